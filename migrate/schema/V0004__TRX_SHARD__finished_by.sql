-- Who finished a hold: the emitter of the client that committed or
-- rolled it back — the hold's own, or a support agent's that finished
-- another client's hold from the console (docs/console.md); 0 when the
-- hold sweeper expired it; NULL while it is pending, and for holds
-- finished before this column. A column without a default: adding it
-- rewrites no row.
ALTER TABLE trx_<shard_id> ADD COLUMN finished_by integer;
