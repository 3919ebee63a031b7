-- A write reads only the lots of the currencies it touches. With the
-- currency in the lot's primary key that read is one index range per
-- currency, so a write's cost no longer grows with every currency the
-- player ever collected (docs/benchmarks.md). This rebuilds one index per
-- shard, under a lock on lot_<shard_id> for the time of the build; the
-- table is not rewritten.
ALTER TABLE lot_<shard_id>
    DROP CONSTRAINT lot_<shard_id>_pkey,
    ADD CONSTRAINT lot_<shard_id>_pkey PRIMARY KEY (ns, player_id, currency, lot_id);
