-- The player's version at a past time (coffer.PastVersion), for a time a
-- hold was pending. A hold's finish (commit, rollback, expiry) sets its
-- row's version to the finish's; the row now keeps the one its begin left
-- in begin_version. NULL for every other row: adding the column rewrites
-- nothing, and a NULL costs a row nothing (each trx row has NULLs, so a
-- null bitmap, which stays 3 bytes).
--
-- A finish inserts no trx of its own, so trx_<shard_id>_finished finds a
-- player's last finish before a time: finished holds only, an entry per
-- finish. The finish already updates an indexed column (finished_at, in
-- trx_<shard_id>_holds), so its update was not HOT before either.
--
-- NOTRX, statement by statement: the column is added under a brief lock,
-- the backfill and the build take none that stops writes. Each statement
-- may run again after a failure half-way (an invalid index of that name
-- is dropped and built again).
ALTER TABLE trx_<shard_id> ADD COLUMN IF NOT EXISTS begin_version bigint;

-- Holds finished before: their begin's version. A player's version grows
-- by one with each of its writes (a trx insert, or a hold's finish), and
-- each write has a time of its own, shared by the trx rows it inserts. So
-- a begin's version is that of the player's next write whose version is
-- known, less the writes between them: the hold's own finish is such a
-- write, at the latest. It reads every trx row of the shard once.
WITH writes AS (
    SELECT ns, player_id, created_at AS at, CASE WHEN finished_at IS NULL THEN version ELSE begin_version END AS version
    FROM trx_<shard_id>
    UNION ALL
    SELECT ns, player_id, finished_at, version FROM trx_<shard_id> WHERE finished_at IS NOT NULL
), numbered AS (
    SELECT ns, player_id, at, max(version) AS version, row_number() OVER (PARTITION BY ns, player_id ORDER BY at) AS n
    FROM writes GROUP BY ns, player_id, at
), runs AS (
    -- run numbers each known write with the unknown ones before it.
    SELECT ns, player_id, at, version, n, count(version) OVER (PARTITION BY ns, player_id ORDER BY at DESC) AS run
    FROM numbered
), begun AS (
    SELECT ns, player_id, at,
        max(version) OVER w - (max(n) FILTER (WHERE version IS NOT NULL) OVER w - n) AS version
    FROM runs WINDOW w AS (PARTITION BY ns, player_id, run)
)
UPDATE trx_<shard_id> t SET begin_version = b.version
FROM begun b
WHERE t.finished_at IS NOT NULL AND t.begin_version IS NULL
    AND b.ns = t.ns AND b.player_id = t.player_id AND b.at = t.created_at;

DROP INDEX CONCURRENTLY IF EXISTS trx_<shard_id>_finished;
CREATE INDEX CONCURRENTLY trx_<shard_id>_finished ON trx_<shard_id> (ns, player_id, finished_at)
    WHERE finished_at IS NOT NULL;
