-- How far the lot sweeper has recorded expired lots, per shard of the
-- database: every lot with an amount left whose expiry is at or before
-- swept_to has its expire op (docs/operations.md, Holds and lots that
-- expire). A recorded lot stays in lot_N_expiry at amount 0, so without
-- it an instance just started would read every expiry ever recorded, a
-- scan that on a shard of years may not end within a pass's time, pass
-- after pass. Any instance's complete pass moves it, never back.
CREATE TABLE IF NOT EXISTS expiry_sweep (
    shard_id integer NOT NULL PRIMARY KEY,
    swept_to timestamptz NOT NULL
) WITH (fillfactor = 50);
