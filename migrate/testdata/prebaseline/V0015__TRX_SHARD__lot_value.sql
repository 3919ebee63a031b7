-- What paid coins cost, kept with them (docs/adr/0013-fiat-value.md).
-- A paid lot keeps its store order (store, order_id: the purchase that
-- granted it, or for a lot an exchange made, the order of the paid lot it
-- consumed, which a refund follows), the fiat of its value, its value
-- (what its amount cost, in minor units of fiat) and the value of what
-- pending holds reserve from it. An op keeps the value it moved and its
-- fiat, so that the revenue report sums real money and a consume says
-- what the player paid for what it bought. The rules are coffer.Book's.
--
-- Columns added without a default, or with a constant one, rewrite
-- nothing; none is indexed, so lot updates stay HOT. No CHECK: the audit
-- checks the values (V0004 says why the tables carry no CHECK).
ALTER TABLE lot_<shard_id>
    ADD COLUMN store text,
    ADD COLUMN order_id text,
    ADD COLUMN fiat text,
    ADD COLUMN value bigint NOT NULL DEFAULT 0,
    ADD COLUMN value_reserved bigint NOT NULL DEFAULT 0;
ALTER TABLE op_<shard_id>
    ADD COLUMN fiat text,
    ADD COLUMN value bigint;

-- Lots of purchases credited before: their store order, from the grant
-- that created them, so that a refund finds them. Their value is not
-- known (what was spent of them was not recorded): they keep no fiat and
-- no value, and the report counts their coins under no fiat.
UPDATE lot_<shard_id> l SET store = o.purchase->>'store', order_id = o.purchase->>'order_id'
FROM op_<shard_id> o
WHERE o.trx_id = l.trx_id AND o.ns = l.ns AND o.player_id = l.player_id AND o.lot_id = l.lot_id
    AND o.kind = 'grant' AND o.purchase IS NOT NULL AND l.paid;
