-- Claims of store orders: a paid grant's purchase (store, order_id) is
-- credited at most once per namespace, whoever presents it. An order's
-- claim lives in the shard its key hashes to (shard.Map.ShardOfPurchase),
-- not in the player's: the primary key is the uniqueness, for every
-- player on every database. A request claims its orders here, each claim
-- committed on its own, before the player's write credits them; the
-- claimant is the request's scope (namespace, player, emitter,
-- idempotency key), and only the claimant's requests may credit the order
-- (docs/adr/0011-purchase-claims.md). Rows are inserted, never updated or
-- deleted.
CREATE TABLE purchase_claim_<shard_id> (
    ns              integer     NOT NULL,
    store           text        NOT NULL,
    order_id        text        NOT NULL,
    player_id       bigint      NOT NULL,
    emitter         integer     NOT NULL,
    idempotency_key text        NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (ns, store, order_id)
) USING <access_method> WITH (<storage_params>);
