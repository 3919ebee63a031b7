-- How far the lot sweeper has recorded the shard's expired lots: every lot
-- with an amount left whose expiry is at or before swept_to has its expire
-- op (docs/operations.md, Holds and lots that expire). A recorded lot
-- stays in lot_N_expiry at amount 0, so without it an instance just
-- started would read every expiry ever recorded, a scan that on a shard
-- of years may not end within a pass, pass after pass. One row at most;
-- a table of the shard, so that it moves with the shard's lots.
CREATE TABLE expiry_sweep_<shard_id> (
    one      boolean     NOT NULL DEFAULT true PRIMARY KEY CHECK (one),
    swept_to timestamptz NOT NULL
);
