-- The lots holding a store order's coins, by player and order, for its
-- refund (docs/adr/0014-refunds.md): a purchase's own lots and those
-- exchanges made from them carry the order (lot_<shard_id>.store,
-- order_id, V0015). A refund reads them under the player's lock to find
-- the exchanges that made lots of the order, and follows its coins there.
--
-- Paid lots only (free ones carry no order): no entry for the commonest
-- grants. store and order_id never change once a lot is inserted, so lot
-- updates stay HOT.
--
-- Built CONCURRENTLY: writes go on. A build that fails half-way leaves an
-- invalid index; the rerun drops it first and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS lot_<shard_id>_order;
CREATE INDEX CONCURRENTLY lot_<shard_id>_order ON lot_<shard_id> (ns, player_id, store, order_id)
    WHERE store IS NOT NULL;
