-- The revenue report in real money (docs/adr/0013-fiat-value.md).
--
-- op_<shard_id>_revenue carries, besides the columns it carried (V0008),
-- each paid op's fiat and value, so that the report stays an index-only
-- scan of a namespace's paid ops. It is built under another name, then
-- put in the old one's place.
--
-- trx_<shard_id>_holds finds the holds pending at some moment of a
-- report's period: a hold's consume is written at its begin but is
-- revenue only once the hold commits. Holds only, by the end of their
-- life (pending ones last): a report reads the holds finished since its
-- `from`, and those still pending. A hold's finish already updated an
-- indexed column (status, in trx_<shard_id>_pending_holds), so the index
-- costs an entry per hold, begun and finished, and no HOT update.
--
-- Built CONCURRENTLY: writes go on. A build that fails half-way leaves an
-- invalid index; the rerun drops it first and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS op_<shard_id>_revenue_value;
CREATE INDEX CONCURRENTLY op_<shard_id>_revenue_value ON op_<shard_id> (ns, created_at)
    INCLUDE (currency, kind, cause, amount, fiat, value) WHERE paid;
DROP INDEX CONCURRENTLY IF EXISTS op_<shard_id>_revenue;
ALTER INDEX op_<shard_id>_revenue_value RENAME TO op_<shard_id>_revenue;
DROP INDEX CONCURRENTLY IF EXISTS trx_<shard_id>_holds;
CREATE INDEX CONCURRENTLY trx_<shard_id>_holds ON trx_<shard_id> (ns, (COALESCE(finished_at, 'infinity'::timestamptz)))
    INCLUDE (created_at) WHERE kind = 'hold';
-- trx_<shard_id>_refunds finds a period's refunds, for their shortfall:
-- refunds only (a few rows), by time.
DROP INDEX CONCURRENTLY IF EXISTS trx_<shard_id>_refunds;
CREATE INDEX CONCURRENTLY trx_<shard_id>_refunds ON trx_<shard_id> (ns, created_at) WHERE refund IS NOT NULL;
