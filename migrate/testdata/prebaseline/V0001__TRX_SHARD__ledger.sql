-- coffer's ledger, one set of tables per shard. Every row of a player lives in
-- the player's shard; ids come from a sequence of the shard, never shared.
-- <access_method>, <storage_params> and <hot_storage_params> are env variables
-- (see docs/migrations.md). Tables updated in place (balance, lot) use
-- <hot_storage_params>, whose fillfactor leaves room for HOT updates; no index
-- covers a column that changes on the hot path (version, amount, updated_at).

CREATE SEQUENCE id_seq_<shard_id> AS bigint CACHE 32;

-- The player's balance version in a namespace: bumped by every write, and the
-- row every write locks first, which serialises the writes of one player.
CREATE TABLE balance_<shard_id> (
    ns          integer     NOT NULL,
    player_id   bigint      NOT NULL,
    version     bigint      NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (ns, player_id)
) USING <access_method> WITH (<hot_storage_params>);

-- Lots: a balance in a currency is the sum of its lots. Only amount changes.
CREATE TABLE lot_<shard_id> (
    ns          integer     NOT NULL,
    player_id   bigint      NOT NULL,
    lot_id      bigint      NOT NULL,
    currency    integer     NOT NULL,
    paid        boolean     NOT NULL,
    amount      bigint      NOT NULL CHECK (amount >= 0),
    expires_at  timestamptz,
    priority    integer     NOT NULL,
    created_at  timestamptz NOT NULL,
    trx_id      bigint      NOT NULL,
    PRIMARY KEY (ns, player_id, lot_id)
) USING <access_method> WITH (<hot_storage_params>);

-- The expiry sweeper's scan; expires_at never changes, so updates stay HOT.
CREATE INDEX lot_<shard_id>_expiry ON lot_<shard_id> (expires_at) WHERE expires_at IS NOT NULL;

-- Accepted requests. The primary key orders a player's finlog.
CREATE TABLE trx_<shard_id> (
    ns              integer     NOT NULL,
    player_id       bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    trx_id          bigint      NOT NULL,
    emitter         integer     NOT NULL,
    idempotency_key text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 128),
    request_hash    bytea       NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('change', 'hold', 'exchange', 'expire')),
    status          text        NOT NULL CHECK (status IN ('committed', 'pending', 'rolled_back', 'expired')),
    reason          text        NOT NULL,
    meta            jsonb,
    hold_expires_at timestamptz,
    -- A pending hold's grants, applied at commit.
    pending_grants  jsonb,
    -- The player's version and balances right after the trx, for replays.
    version         bigint      NOT NULL,
    balances        jsonb       NOT NULL,
    finished_at     timestamptz,
    PRIMARY KEY (ns, player_id, created_at, trx_id)
) USING <access_method> WITH (<storage_params>);

CREATE UNIQUE INDEX trx_<shard_id>_idempotency ON trx_<shard_id> (ns, player_id, emitter, idempotency_key);
CREATE INDEX trx_<shard_id>_pending_holds ON trx_<shard_id> (hold_expires_at) WHERE status = 'pending';

-- Movements on lots. amount is signed; balance_after and paid_after are the
-- player's total and paid part in the currency after the op.
CREATE TABLE op_<shard_id> (
    trx_id        bigint      NOT NULL,
    seq           smallint    NOT NULL,
    ns            integer     NOT NULL,
    player_id     bigint      NOT NULL,
    currency      integer     NOT NULL,
    lot_id        bigint      NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('grant', 'consume', 'expire')),
    -- What moved the amount, for the revenue report: a plain change, a hold's
    -- reservation returned, or either side of an exchange.
    cause         text        NOT NULL CHECK (cause IN ('change', 'release', 'exchange')),
    amount        bigint      NOT NULL CHECK (amount <> 0),
    paid          boolean     NOT NULL,
    balance_after bigint      NOT NULL,
    paid_after    bigint      NOT NULL,
    created_at    timestamptz NOT NULL,
    purchase      jsonb,
    PRIMARY KEY (trx_id, seq)
) USING <access_method> WITH (<storage_params>);

-- Balance at a past time: one lookup per currency.
CREATE INDEX op_<shard_id>_at ON op_<shard_id> (ns, player_id, currency, created_at, trx_id, seq) INCLUDE (balance_after, paid_after);
