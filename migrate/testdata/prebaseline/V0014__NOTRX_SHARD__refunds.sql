-- Refunds of store orders (docs/adr/0014-refunds.md). A refund trx records
-- its order, kind and shortfall in trx_<shard_id>.refund (NULL for every
-- other trx: adding the column rewrites nothing). A refund runs under its
-- player's lock and reads there:
--
-- * op_<shard_id>_order: the grants that credited the order to the player,
--   and so the lots they created. Only ops that carry a purchase get an
--   entry (paid grants, a small part of all ops).
-- * trx_<shard_id>_refund: the order's refund, if any. It is unique: an
--   order is refunded at most once, checked by the service under the
--   player's lock and again here.
--
-- Both are built CONCURRENTLY: writes go on while a large table is
-- indexed. A build that fails half-way leaves an invalid index of that
-- name and the migration unrecorded; the rerun drops it first and builds
-- it again.
ALTER TABLE trx_<shard_id> ADD COLUMN IF NOT EXISTS refund jsonb;
DROP INDEX CONCURRENTLY IF EXISTS op_<shard_id>_order;
CREATE INDEX CONCURRENTLY op_<shard_id>_order ON op_<shard_id> (ns, player_id, (purchase->>'store'), (purchase->>'order_id'))
    WHERE purchase IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS trx_<shard_id>_refund;
CREATE UNIQUE INDEX CONCURRENTLY trx_<shard_id>_refund ON trx_<shard_id> (ns, player_id, (refund->>'store'), (refund->>'order_id'))
    WHERE refund IS NOT NULL;
