-- The moves that brought a shard to this database (coffer shard move,
-- docs/adr/0022-shard-moves.md), one row each, written in the
-- transaction that opens the shard here. Unlike shard_move, which keeps
-- a shard's latest move only, a row stays when the shard moves on: the
-- change feed's relay, which may decode this database's WAL long after,
-- holds the events of the shard's stay here until the relay of the
-- database it came from has published the shard's events there
-- (docs/events.md#shard-moves).
CREATE TABLE shard_arrival (
    shard_id integer NOT NULL,
    -- The move's epoch (shard_move.epoch).
    epoch    bigint  NOT NULL,
    -- The database the shard came from (shard.Database.Name).
    source   text    NOT NULL,
    -- The source's WAL position after the cut-over: every write of the
    -- shard there committed before it.
    cut_lsn  pg_lsn  NOT NULL,
    -- This database's WAL position in the transaction that opened the
    -- shard here: every write of the shard here since commits after it,
    -- every write of an earlier stay here before it.
    open_lsn pg_lsn  NOT NULL,
    PRIMARY KEY (shard_id, epoch)
);
