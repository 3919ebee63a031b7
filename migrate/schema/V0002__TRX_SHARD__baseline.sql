-- coffer 1.0's schema, part 2: the ledger, one set of tables per shard
-- (<shard_id>). Every row of a player lives in the player's shard, and so
-- does the claim of a store order in the shard its key hashes to; ids
-- come from a sequence of the shard, never shared across shards.
--
-- <access_method>, <storage_params> and <hot_storage_params> are env
-- variables (docs/migrations.md). Tables updated in place (balance, lot)
-- take <hot_storage_params>, whose fillfactor leaves room for HOT
-- updates; no index covers a column that changes on the hot path
-- (version, amount, reserved, updated_at), so those updates stay HOT.
-- No CHECK beyond the few below: each costs an evaluation per row, and
-- the audit checks the rules (docs/adr/0004-ledger-schema.md).
--
-- Column order is the order of the migrations that built this schema
-- before 1.0 (TestBaselineIsTheOldChain holds the two equal); tests and
-- tools that insert rows by position rely on it.

-- Ids of lots and trx.
CREATE SEQUENCE id_seq_<shard_id> AS bigint CACHE 32;

-- A player in a namespace: the row every write locks first, which
-- serialises the writes of one player (postgres/batchsql.go, lock).
CREATE TABLE balance_<shard_id> (
    ns          integer     NOT NULL,
    player_id   bigint      NOT NULL,
    -- The balance version: one more with every write (a trx inserted, or
    -- a hold's finish).
    version     bigint      NOT NULL,
    -- The time of the player's last write; the next one is never earlier,
    -- so a player's times never go back.
    updated_at  timestamptz NOT NULL,
    -- The last position handed out in the player's order (trx_N.pos,
    -- op_N.pos), under the player's lock.
    pos         bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, player_id)
) USING <access_method> WITH (<hot_storage_params>);

-- Lots: a player's balance in a currency is the sum of its lots' amounts
-- (coffer.BookLot). Rows are never deleted; a spent lot stays at 0.
CREATE TABLE lot_<shard_id> (
    ns             integer     NOT NULL,
    player_id      bigint      NOT NULL,
    lot_id         bigint      NOT NULL,
    currency       integer     NOT NULL,
    paid           boolean     NOT NULL,
    -- The coins left.
    amount         bigint      NOT NULL CHECK (amount >= 0),
    -- NULL: never expires.
    expires_at     timestamptz,
    priority       integer     NOT NULL,
    created_at     timestamptz NOT NULL,
    -- The trx that created the lot.
    trx_id         bigint      NOT NULL,
    -- What pending holds took from the lot: a rollback returns it here, a
    -- commit spends it. With it a write sees from the lots alone what its
    -- bounds limit (coffer.BalanceMax, coffer.LotsMax).
    reserved       bigint      NOT NULL DEFAULT 0,
    -- Paid lots: the store order whose coins the lot holds (its purchase,
    -- or for a lot an exchange made, the order of the paid lot it
    -- consumed), which a refund follows (docs/adr/0014-refunds.md). NULL
    -- for free lots.
    store          text,
    order_id       text,
    -- Paid lots: what the coins cost (docs/adr/0013-fiat-value.md): the
    -- ISO 4217 code, the value of amount and the value of reserved, in
    -- minor units of fiat. NULL and 0 for free lots.
    fiat           text,
    value          bigint      NOT NULL DEFAULT 0,
    value_reserved bigint      NOT NULL DEFAULT 0,
    -- What of reserved a refund of the lot's order counted short: a
    -- rollback of the hold gives it to the refund, not back to the
    -- player; a commit spends it. At most reserved
    -- (docs/adr/0015-refunds-and-pending-holds.md).
    owed           bigint      NOT NULL DEFAULT 0,
    -- Whether an exchange made the lot, of a paid lot it consumed: what
    -- it owes a refund never moves to another lot of the order (ADR 0015).
    exchanged      boolean     NOT NULL DEFAULT false,
    -- The currency leads the lot id, so that a write reads only the lots
    -- of the currencies it touches, one index range each.
    PRIMARY KEY (ns, player_id, currency, lot_id)
) USING <access_method> WITH (<hot_storage_params>);

-- The lot sweeper's scan of expiries; expires_at never changes.
CREATE INDEX lot_<shard_id>_expiry ON lot_<shard_id> (expires_at) WHERE expires_at IS NOT NULL;
-- The lots holding a store order's coins, for its refund. Paid lots
-- only; store and order_id never change.
CREATE INDEX lot_<shard_id>_order ON lot_<shard_id> (ns, player_id, store, order_id) WHERE store IS NOT NULL;

-- Accepted requests, and the expiries the sweeper records. The primary
-- key pages a player's finlog: (created_at, pos) order is pos order, as a
-- player's times never go back, and the time leads so that a page from a
-- given time is one range scan.
CREATE TABLE trx_<shard_id> (
    ns              integer     NOT NULL,
    player_id       bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    trx_id          bigint      NOT NULL,
    -- The idempotency scope with ns and player_id: the client's emitter
    -- and its key.
    emitter         integer     NOT NULL,
    idempotency_key text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 128),
    -- coffer.RequestHash: a version byte and 16 bytes of SHA-256 of the
    -- validated request; a retry with another is idempotency_conflict.
    request_hash    bytea       NOT NULL,
    kind            trx_kind    NOT NULL,
    status          trx_status  NOT NULL,
    reason          text        NOT NULL,
    -- A pending hold's end, for the hold sweeper.
    hold_expires_at timestamptz,
    -- A hold's grants (JSON), applied at its commit.
    pending_grants  jsonb,
    -- The player's version after the write; a finished hold's is its
    -- finish's (begin_version keeps its begin's).
    version         bigint      NOT NULL,
    -- When a hold was committed, rolled back or expired.
    finished_at     timestamptz,
    -- The trx's position in its player's order (balance_N.pos).
    pos             bigint      NOT NULL,
    -- The client's meta as the text of its canonical form (RFC 8785), the
    -- bytes every answer carries (docs/adr/0010-canonical-requests.md).
    meta            text,
    -- A refund trx's order, kind and shortfall (JSON); NULL for others.
    refund          jsonb,
    -- A finished hold: the version its begin left, so that a balance at
    -- a time the hold was pending answers that version. NULL for others.
    begin_version   bigint,
    PRIMARY KEY (ns, player_id, created_at, pos)
) USING <access_method> WITH (<storage_params>);

-- A key names one trx: a replay finds it here.
CREATE UNIQUE INDEX trx_<shard_id>_idempotency ON trx_<shard_id> (ns, player_id, emitter, idempotency_key);
-- The hold sweeper's scan of pending holds by their end.
CREATE INDEX trx_<shard_id>_pending_holds ON trx_<shard_id> (hold_expires_at) WHERE status = 'pending';
-- An order is refunded at most once: checked by the service under the
-- player's lock, and again here.
CREATE UNIQUE INDEX trx_<shard_id>_refund ON trx_<shard_id> (ns, player_id, (refund->>'store'), (refund->>'order_id'))
    WHERE refund IS NOT NULL;
-- The revenue report's holds pending at some moment of its period: holds
-- only, by the end of their life (pending ones last).
CREATE INDEX trx_<shard_id>_holds ON trx_<shard_id> (ns, (COALESCE(finished_at, 'infinity'::timestamptz)))
    INCLUDE (created_at) WHERE kind = 'hold';
-- The revenue report's refunds of its period, for their shortfall.
CREATE INDEX trx_<shard_id>_refunds ON trx_<shard_id> (ns, created_at) WHERE refund IS NOT NULL;
-- A player's last hold finish before a time (coffer.PastVersion).
CREATE INDEX trx_<shard_id>_finished ON trx_<shard_id> (ns, player_id, finished_at) WHERE finished_at IS NOT NULL;

-- Movements on lots (coffer.BookOp): a trx's ops, numbered by seq.
CREATE TABLE op_<shard_id> (
    trx_id        bigint      NOT NULL,
    seq           integer     NOT NULL,
    ns            integer     NOT NULL,
    player_id     bigint      NOT NULL,
    currency      integer     NOT NULL,
    lot_id        bigint      NOT NULL,
    kind          op_kind     NOT NULL,
    cause         op_cause    NOT NULL,
    -- Signed: + for a grant, − for a consume or an expiry.
    amount        bigint      NOT NULL CHECK (amount <> 0),
    paid          boolean     NOT NULL,
    -- The player's total and paid part in the currency after the op: a
    -- balance at a past time is one lookup (op_N_at).
    balance_after bigint      NOT NULL,
    paid_after    bigint      NOT NULL,
    created_at    timestamptz NOT NULL,
    -- A paid grant's purchase (JSON: store, order_id, price, fiat).
    purchase      jsonb,
    -- The op's position in its player's order (balance_N.pos).
    pos           bigint      NOT NULL,
    -- The value the op moved, in minor units of fiat; NULL for an op of a
    -- lot without a value (a free one).
    fiat          text,
    value         bigint,
    PRIMARY KEY (trx_id, seq)
) USING <access_method> WITH (<storage_params>);

-- Balance at a past time: the latest op at or before it, one lookup.
CREATE INDEX op_<shard_id>_at ON op_<shard_id> (ns, player_id, currency, created_at, pos);
-- The revenue report: a namespace's paid ops by time, with every column
-- it sums, an index-only scan. Paid ops only: free ones, the commonest,
-- pay nothing for it.
CREATE INDEX op_<shard_id>_revenue ON op_<shard_id> (ns, created_at)
    INCLUDE (currency, kind, cause, amount, fiat, value) WHERE paid;
-- The grants that credited a store order, by player and order, for its
-- refund. Ops of purchases only.
CREATE INDEX op_<shard_id>_order ON op_<shard_id> (ns, player_id, (purchase->>'store'), (purchase->>'order_id'))
    WHERE purchase IS NOT NULL;

-- Claims of store orders (docs/adr/0011-purchase-claims.md): a paid
-- grant's order (store, order_id) is credited at most once per
-- namespace, whoever presents it. An order's claim lives in the shard its
-- key hashes to (shard.Map.ShardOfPurchase), not in the player's: the
-- primary key is the uniqueness. A request claims its orders here, each
-- claim committed before the player's write credits them; the claimant
-- is the request's scope. Rows are inserted, never updated or deleted.
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

-- How far the lot sweeper has recorded the shard's expired lots: every
-- lot with an amount left whose expiry is at or before swept_to has its
-- expire op (docs/operations.md), so that an instance just started does
-- not read every expiry ever recorded. One row at most; a table of the
-- shard, so that it moves with the shard's lots.
CREATE TABLE expiry_sweep_<shard_id> (
    one      boolean     NOT NULL DEFAULT true PRIMARY KEY CHECK (one),
    swept_to timestamptz NOT NULL
);
