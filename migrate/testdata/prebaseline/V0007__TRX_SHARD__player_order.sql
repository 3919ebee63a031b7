-- A player's trx and ops in one total order, assigned under the player's
-- lock: balance_<shard_id>.pos is the last position handed out, and every
-- trx and op row stores its own. Ordering by (created_at, trx_id) was not
-- total: ids come from a sequence each session caches 32 at a time, so an
-- expiry recorded after a hold's ops often had the smaller id and sorted
-- first (ADR 0004). Existing rows get positions in the order they had:
-- (created_at, trx_id) for trx, then seq for the ops of one trx.
--
-- This rewrites trx_<shard_id> and op_<shard_id> (every row gets its
-- position; op.seq widens from smallint) and rebuilds their indexes, under
-- an exclusive lock: on a large ledger, run it in a maintenance window
-- (docs/migrations.md).
ALTER TABLE balance_<shard_id> ADD COLUMN pos bigint NOT NULL DEFAULT 0;
ALTER TABLE trx_<shard_id> ADD COLUMN pos bigint;
-- One trx may move more lots than a smallint counts (coffer.TrxOpsMax).
ALTER TABLE op_<shard_id> ADD COLUMN pos bigint, ALTER COLUMN seq TYPE integer;

WITH entries AS (
    SELECT ns, player_id, trx_id, -1 AS seq, created_at FROM trx_<shard_id>
    UNION ALL
    SELECT ns, player_id, trx_id, seq, created_at FROM op_<shard_id>
), numbered AS (
    SELECT ns, player_id, trx_id, seq,
        row_number() OVER (PARTITION BY ns, player_id ORDER BY created_at, trx_id, seq) AS pos
    FROM entries
), trx_done AS (
    UPDATE trx_<shard_id> t SET pos = n.pos FROM numbered n
    WHERE n.seq = -1 AND n.trx_id = t.trx_id AND n.ns = t.ns AND n.player_id = t.player_id
)
UPDATE op_<shard_id> o SET pos = n.pos FROM numbered n
WHERE n.seq = o.seq AND n.trx_id = o.trx_id;

UPDATE balance_<shard_id> b SET pos = m.pos
FROM (SELECT ns, player_id, max(pos) AS pos FROM (
        SELECT ns, player_id, pos FROM trx_<shard_id>
        UNION ALL
        SELECT ns, player_id, pos FROM op_<shard_id>) e
    GROUP BY ns, player_id) m
WHERE m.ns = b.ns AND m.player_id = b.player_id;

ALTER TABLE trx_<shard_id> ALTER COLUMN pos SET NOT NULL;
ALTER TABLE op_<shard_id> ALTER COLUMN pos SET NOT NULL;

-- The finlog pages in (created_at, pos) order, which is pos order: a
-- player's times never go back as positions grow (the audit checks it),
-- and the time leads so that a page from a given time is one range scan.
ALTER TABLE trx_<shard_id>
    DROP CONSTRAINT trx_<shard_id>_pkey,
    ADD CONSTRAINT trx_<shard_id>_pkey PRIMARY KEY (ns, player_id, created_at, pos);
-- Balance at a past time: the latest op at or before it, one lookup.
DROP INDEX op_<shard_id>_at;
CREATE INDEX op_<shard_id>_at ON op_<shard_id> (ns, player_id, currency, created_at, pos);

-- grant_trx_<shard_id> as in V0006, with positions: the lock hands out two
-- (the trx's, then its op's).
CREATE OR REPLACE FUNCTION grant_trx_<shard_id>(
    p_ns integer, p_player_id bigint, p_emitter integer, p_key text, p_hash bytea,
    p_reason text, p_meta jsonb, p_currency integer, p_amount bigint, p_paid boolean,
    p_expires_at timestamptz, p_priority integer, p_purchase jsonb,
    OUT o_trx_id bigint, OUT o_lot_id bigint, OUT o_version bigint, OUT o_created_at timestamptz,
    OUT o_balance_after bigint, OUT o_paid_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_due boolean;
    v_new boolean := false;
    v_pos bigint;
BEGIN
    -- The player's lock, as every write takes it first.
    INSERT INTO balance_<shard_id> AS b (ns, player_id, version, updated_at, pos)
    VALUES (p_ns, p_player_id, 1, clock_timestamp(), 2)
    ON CONFLICT (ns, player_id) DO UPDATE
    SET version = b.version + 1, updated_at = greatest(clock_timestamp(), b.updated_at + interval '1 microsecond'),
        pos = b.pos + 2
    RETURNING b.version, b.updated_at, b.pos INTO o_version, o_created_at, v_pos;

    SELECT COALESCE(sum(l.amount), 0), COALESCE(sum(l.amount) FILTER (WHERE l.paid), 0),
        COALESCE(bool_or(l.expires_at <= o_created_at), false),
        min(l.lot_id) FILTER (WHERE NOT p_paid AND NOT l.paid AND l.priority = p_priority
            AND l.expires_at IS NOT DISTINCT FROM p_expires_at)
    INTO o_balance_after, o_paid_after, v_due, o_lot_id
    FROM lot_<shard_id> l
    WHERE l.ns = p_ns AND l.player_id = p_player_id AND l.currency = p_currency AND l.amount > 0;

    IF v_due OR p_amount > 9223372036854775807 - o_balance_after OR p_expires_at <= o_created_at THEN
        RAISE EXCEPTION 'the service plans this grant' USING ERRCODE = 'CF001';
    END IF;
    o_balance_after := o_balance_after + p_amount;
    IF p_paid THEN
        o_paid_after := o_paid_after + p_amount;
    END IF;

    -- The lot's id is drawn before the trx's, as the service does; the
    -- trx goes first, so that a known key fails before anything else.
    IF o_lot_id IS NULL THEN
        o_lot_id := nextval('id_seq_<shard_id>');
        v_new := true;
    END IF;
    o_trx_id := nextval('id_seq_<shard_id>');
    INSERT INTO trx_<shard_id> (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash,
        kind, status, reason, meta, version, pos)
    VALUES (p_ns, p_player_id, o_created_at, o_trx_id, p_emitter, p_key, p_hash,
        'change', 'committed', p_reason, p_meta, o_version, v_pos - 1);
    IF v_new THEN
        INSERT INTO lot_<shard_id> (ns, player_id, lot_id, currency, paid, amount, expires_at, priority, created_at, trx_id)
        VALUES (p_ns, p_player_id, o_lot_id, p_currency, p_paid, p_amount, p_expires_at, p_priority, o_created_at, o_trx_id);
    ELSE
        UPDATE lot_<shard_id> SET amount = amount + p_amount
        WHERE ns = p_ns AND player_id = p_player_id AND currency = p_currency AND lot_id = o_lot_id;
    END IF;
    INSERT INTO op_<shard_id> (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
        balance_after, paid_after, created_at, purchase, pos)
    VALUES (o_trx_id, 0, p_ns, p_player_id, p_currency, o_lot_id, 'grant', 'change', p_amount, p_paid,
        o_balance_after, o_paid_after, o_created_at, p_purchase, v_pos);
END
$$;
