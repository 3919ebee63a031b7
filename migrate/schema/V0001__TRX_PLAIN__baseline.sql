-- coffer 1.0's schema, part 1: what each database holds once, beside its
-- shards' tables (V0002). This file and V0002 are the schema reference:
-- docs/ledger.md says what the ledger means, this says where it is kept.
-- Later migrations go on from here (docs/migrations.md).

-- The codes of trx and op rows. An enum admits only its labels, as a
-- CHECK on text would, in 4 bytes, and costs nothing per insert, where
-- PostgreSQL evaluates a CHECK's expression on every row
-- (docs/benchmarks.md). Labels are only ever added (ALTER TYPE … ADD
-- VALUE rewrites nothing).

-- coffer.TrxKind: a one-phase change, a hold, an exchange, the record of
-- lots that expired, a refund or chargeback of a store order.
CREATE TYPE trx_kind AS ENUM ('change', 'hold', 'exchange', 'expire', 'refund');

-- coffer.TrxStatus.
CREATE TYPE trx_status AS ENUM ('committed', 'pending', 'rolled_back', 'expired');

-- coffer.OpKind: a grant (+), a consume (−), or an expiry recorded (−).
CREATE TYPE op_kind AS ENUM ('grant', 'consume', 'expire');

-- coffer.OpCause, what moved the amount, for the revenue report: a plain
-- change (a hold's commit included), a hold's reservation returned,
-- either side of an exchange, a refund taking an order's coins back, and
-- a refund taking back, when a hold rolls back, coins of its order the
-- hold reserved when it was refunded (lot_N.owed). Refunds are not
-- revenue (docs/ledger.md, Refunds).
CREATE TYPE op_cause AS ENUM ('change', 'release', 'exchange', 'refund', 'refund_held');

-- The marks by which a batch whose COMMIT's answer was lost learns
-- whether that COMMIT was applied (docs/adr/0012-group-commit.md). Each
-- committer of a coffer process owns a row, under a random key; every
-- batch it commits sets the row's token in its own transaction. The next
-- attempt reads the row once it holds the batch's player locks: the token
-- is there if and only if the COMMIT was. A row per committer, updated in
-- place (HOT: no indexed column changes); the sweepers remove the rows of
-- processes gone a day after their last batch.
CREATE TABLE batch_mark (
    committer bigint      NOT NULL PRIMARY KEY,
    token     bigint      NOT NULL,
    marked_at timestamptz NOT NULL
) WITH (fillfactor = 50);
