-- Lighter writes (docs/benchmarks.md): fewer WAL bytes per balance change.
-- A trx's balances are rebuilt from its ops' balance_after and paid_after
-- (the last op of each currency), so the trx no longer stores them.
ALTER TABLE trx_<shard_id> DROP COLUMN balances;

-- Balance at a past time reads balance_after and paid_after from the op
-- row (one heap fetch per currency) instead of carrying them in every
-- index entry.
DROP INDEX op_<shard_id>_at;
CREATE INDEX op_<shard_id>_at ON op_<shard_id> (ns, player_id, currency, created_at, trx_id, seq);
