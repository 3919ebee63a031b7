-- The marks by which a batch whose COMMIT's answer was lost learns
-- whether that COMMIT was applied (docs/adr/0012-group-commit.md). Each
-- committer of a coffer process owns a row, under a random key; every
-- batch it commits sets the row's token in its own transaction. The next
-- attempt reads the row once it holds the batch's player locks (the cut
-- transaction has ended by then): the token is there if and only if the
-- COMMIT was. Nothing else tells as surely: a player's row or a hold's
-- finish as the batch planned them may also be another instance's write,
-- when the database's clock is behind the player's last write.
--
-- A row per committer, updated in place (HOT: no index column changes);
-- rows of processes gone are removed a day after their last batch.
CREATE TABLE IF NOT EXISTS batch_mark (
    committer bigint NOT NULL PRIMARY KEY,
    token bigint NOT NULL,
    marked_at timestamptz NOT NULL
) WITH (fillfactor = 50);
