-- Shard moves (coffer shard move, docs/adr/0022-shard-moves.md). The
-- shard map is the config's placement overlaid, shard by shard, with the
-- latest move found on any database: a database keeps the latest move of
-- each shard that it was the source or the target of, and the mover
-- writes each step on both.
CREATE TABLE shard_move (
    shard_id   integer     NOT NULL PRIMARY KEY,
    -- The shard's moves so far: each move takes one more than the last.
    epoch      bigint      NOT NULL CHECK (epoch > 0),
    -- The databases as coffer names them (shard.Database.Name:
    -- address(es)/dbname).
    source     text        NOT NULL,
    target     text        NOT NULL,
    -- shard.MoveState: copying, aborted, cut, done, verified, cleaned.
    state      text        NOT NULL,
    -- The shard's tables, which the move copies, and its sequences,
    -- which it sets past the source's, as the source named them when
    -- the move began.
    tables     text[]      NOT NULL,
    sequences  text[]      NOT NULL,
    -- How long the shard's writes paused at the cut-over (lock taken on
    -- the source until the target took writes); NULL before.
    pause_ms   bigint,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The fence of a shard's copy that the move is filling on its target:
-- a trigger for each statement that would write it. The logical
-- replication worker that fills it runs with session_replication_role
-- replica, for which ordinary triggers do not fire.
CREATE FUNCTION shard_move_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'shard % is being moved to this database: it takes writes once the move has cut over', TG_ARGV[0]
        USING ERRCODE = 'CF001';
END
$$;
