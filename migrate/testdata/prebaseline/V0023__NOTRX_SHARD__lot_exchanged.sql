-- Whether an exchange made the lot, of a paid lot it consumed: its coins
-- count in its order's currency through the exchange's ratio, so what it
-- owes a refund (owed, V0022) never moves to another lot of the order,
-- whose coins may count differently (ADR 0015). The order's own lots, all
-- made by its purchase, count alike.
--
-- NOTRX, statement by statement: the column is added under a brief lock
-- (its default rewrites nothing); the backfill, which reads the shard's
-- exchanges, takes no lock that stops writes but on the lots it marks.
-- Each statement may run again after a failure half-way.
ALTER TABLE lot_<shard_id> ADD COLUMN IF NOT EXISTS exchanged boolean NOT NULL DEFAULT false;

-- The paid lots an exchange made before this migration, from their trx.
UPDATE lot_<shard_id> l SET exchanged = true
FROM trx_<shard_id> t
WHERE l.paid AND NOT l.exchanged AND t.ns = l.ns AND t.player_id = l.player_id AND t.trx_id = l.trx_id AND t.kind = 'exchange';
