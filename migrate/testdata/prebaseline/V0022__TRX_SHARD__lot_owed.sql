-- What of a lot's reservation (reserved) a refund of its order could not
-- take and counted short: a rollback of the hold gives it to the refund,
-- not back to the player; a commit spends it. At most reserved (the
-- audit checks it). The column has a default, so adding it does not
-- rewrite lot_<shard_id>; it is not indexed, so updates stay HOT. Refunds
-- made before it owe nothing: a hold pending at one of them still returns
-- its coins to the player.
ALTER TABLE lot_<shard_id> ADD COLUMN owed bigint NOT NULL DEFAULT 0;
