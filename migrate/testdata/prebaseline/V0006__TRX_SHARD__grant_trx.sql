-- A one-phase change of one grant, the commonest write (rewards and
-- purchases), planned in the database: one statement, so one round trip
-- and no explicit BEGIN or COMMIT, where the service's own plan needs two
-- (docs/benchmarks.md, change 9). It writes the rows the service's plan
-- (coffer.Book.Grant) writes: the player's version, a new lot or the
-- player's live free lot of the same expiry and priority, the trx and its
-- op. Where that plan would do more, or fail, it raises CF001 with nothing
-- written, and the service plans the write itself: a due expiry in the
-- currency to record first, a balance that would overflow, a lot due at
-- once. A known idempotency key fails the trx insert (unique_violation),
-- as in the service's plan.
CREATE FUNCTION grant_trx_<shard_id>(
    p_ns integer, p_player_id bigint, p_emitter integer, p_key text, p_hash bytea,
    p_reason text, p_meta jsonb, p_currency integer, p_amount bigint, p_paid boolean,
    p_expires_at timestamptz, p_priority integer, p_purchase jsonb,
    OUT o_trx_id bigint, OUT o_lot_id bigint, OUT o_version bigint, OUT o_created_at timestamptz,
    OUT o_balance_after bigint, OUT o_paid_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_due boolean;
    v_new boolean := false;
BEGIN
    -- The player's lock, as every write takes it first.
    INSERT INTO balance_<shard_id> AS b (ns, player_id, version, updated_at)
    VALUES (p_ns, p_player_id, 1, clock_timestamp())
    ON CONFLICT (ns, player_id) DO UPDATE
    SET version = b.version + 1, updated_at = greatest(clock_timestamp(), b.updated_at + interval '1 microsecond')
    RETURNING b.version, b.updated_at INTO o_version, o_created_at;

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
        kind, status, reason, meta, version)
    VALUES (p_ns, p_player_id, o_created_at, o_trx_id, p_emitter, p_key, p_hash,
        'change', 'committed', p_reason, p_meta, o_version);
    IF v_new THEN
        INSERT INTO lot_<shard_id> (ns, player_id, lot_id, currency, paid, amount, expires_at, priority, created_at, trx_id)
        VALUES (p_ns, p_player_id, o_lot_id, p_currency, p_paid, p_amount, p_expires_at, p_priority, o_created_at, o_trx_id);
    ELSE
        UPDATE lot_<shard_id> SET amount = amount + p_amount
        WHERE ns = p_ns AND player_id = p_player_id AND currency = p_currency AND lot_id = o_lot_id;
    END IF;
    INSERT INTO op_<shard_id> (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
        balance_after, paid_after, created_at, purchase)
    VALUES (o_trx_id, 0, p_ns, p_player_id, p_currency, o_lot_id, 'grant', 'change', p_amount, p_paid,
        o_balance_after, o_paid_after, o_created_at, p_purchase);
END
$$;
