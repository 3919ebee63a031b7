-- A trx's meta is kept as the text of its canonical form (RFC 8785,
-- docs/api.md), the bytes the first answer carried: jsonb rewrote it (its
-- own member order, 2.50 kept as written, 1e131071 printed in 131 072
-- digits), so a replay was not the first answer and what was served was
-- not bounded by what was accepted.
--
-- Rows written before keep their jsonb, in the column renamed meta_jsonb;
-- coffer reads it into the canonical form (coffer.StoredMeta). Renaming a
-- column and adding one without a default rewrite nothing, where changing
-- the column's type would rewrite trx_<shard_id> under an exclusive lock.
ALTER TABLE trx_<shard_id> RENAME COLUMN meta TO meta_jsonb;
ALTER TABLE trx_<shard_id> ADD COLUMN meta text;

-- grant_trx_<shard_id> as in V0009, taking meta as text.
DROP FUNCTION grant_trx_<shard_id>(integer, bigint, integer, text, bytea, text, jsonb, integer, bigint, boolean,
    timestamptz, integer, jsonb, bigint, integer);

CREATE FUNCTION grant_trx_<shard_id>(
    p_ns integer, p_player_id bigint, p_emitter integer, p_key text, p_hash bytea,
    p_reason text, p_meta text, p_currency integer, p_amount bigint, p_paid boolean,
    p_expires_at timestamptz, p_priority integer, p_purchase jsonb, p_balance_max bigint, p_lots_max integer,
    OUT o_trx_id bigint, OUT o_lot_id bigint, OUT o_version bigint, OUT o_created_at timestamptz,
    OUT o_balance_after bigint, OUT o_paid_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_due boolean;
    v_new boolean := false;
    v_pos bigint;
    v_held numeric;
    v_lots bigint;
BEGIN
    -- The player's lock, as every write takes it first.
    INSERT INTO balance_<shard_id> AS b (ns, player_id, version, updated_at, pos)
    VALUES (p_ns, p_player_id, 1, clock_timestamp(), 2)
    ON CONFLICT (ns, player_id) DO UPDATE
    SET version = b.version + 1, updated_at = greatest(clock_timestamp(), b.updated_at + interval '1 microsecond'),
        pos = b.pos + 2
    RETURNING b.version, b.updated_at, b.pos INTO o_version, o_created_at, v_pos;

    SELECT COALESCE(sum(l.amount), 0), COALESCE(sum(l.amount) FILTER (WHERE l.paid), 0),
        COALESCE(sum(l.amount) + sum(l.reserved), 0), count(*),
        COALESCE(bool_or(l.amount > 0 AND l.expires_at <= o_created_at), false),
        min(l.lot_id) FILTER (WHERE NOT p_paid AND NOT l.paid AND l.priority = p_priority
            AND l.expires_at IS NOT DISTINCT FROM p_expires_at)
    INTO o_balance_after, o_paid_after, v_held, v_lots, v_due, o_lot_id
    FROM lot_<shard_id> l
    WHERE l.ns = p_ns AND l.player_id = p_player_id AND l.currency = p_currency AND (l.amount > 0 OR l.reserved > 0);

    IF v_due OR v_held + p_amount > p_balance_max OR p_expires_at <= o_created_at
        OR (o_lot_id IS NULL AND v_lots >= p_lots_max) THEN
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
