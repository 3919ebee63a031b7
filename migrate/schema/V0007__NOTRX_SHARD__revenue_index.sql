-- The revenue report's index: a namespace's paid ops by time, carrying every
-- column the report sums, so that the report is an index-only scan of the
-- paid ops of one namespace up to its `to`, where it read every op of the
-- shard (docs/ledger.md). Only paid ops get an entry: a free grant or
-- consume, the commonest writes, pays nothing for it.
--
-- Built CONCURRENTLY: writes go on while a large op table is indexed.
-- IF NOT EXISTS lets a rerun pass over a finished index; a build that
-- failed half-way leaves an INVALID index of that name, which must be
-- dropped (DROP INDEX CONCURRENTLY op_N_revenue) before the rerun.
CREATE INDEX CONCURRENTLY IF NOT EXISTS op_<shard_id>_revenue ON op_<shard_id> (ns, created_at)
    INCLUDE (currency, kind, cause, amount) WHERE paid;
