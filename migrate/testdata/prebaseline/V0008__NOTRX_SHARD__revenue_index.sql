-- The revenue report's index: a namespace's paid ops by time, carrying every
-- column the report sums, so that the report is an index-only scan of the
-- paid ops of one namespace up to its `to`, where it read every op of the
-- shard (docs/ledger.md). Only paid ops get an entry: a free grant or
-- consume, the commonest writes, pays nothing for it.
--
-- Built CONCURRENTLY: writes go on while a large op table is indexed. A
-- build that fails half-way leaves an invalid index of that name and the
-- migration unrecorded; the rerun drops it first and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS op_<shard_id>_revenue;
CREATE INDEX CONCURRENTLY op_<shard_id>_revenue ON op_<shard_id> (ns, created_at)
    INCLUDE (currency, kind, cause, amount) WHERE paid;
