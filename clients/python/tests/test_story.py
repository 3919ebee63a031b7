"""The README's story, through the client: grant, spend, hold, exchange,
refund, the batch API, errors with their codes."""

import asyncio
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import coffer
from conftest import key

NS = 1


def test_grant_spend_and_replay(client, player):
    order = coffer.Purchase("steam", str(uuid.uuid4()), 499, "USD")
    grant = coffer.Change(key("grant"), [coffer.Op("gold", 500, kind="paid", purchase=order),
                                         coffer.Op("gold", 100)], reason="purchase", meta={"offer": 12})
    trx = client.change(NS, player, grant)
    assert (trx.kind, trx.status, trx.replay) == ("change", "committed", False)
    assert [(op.kind, op.amount, op.paid) for op in trx.ops] == [("grant", 500, True), ("grant", 100, False)]
    assert trx.ops[0].purchase == order and trx.meta == {"offer": 12}
    assert trx.created_at is not None and trx.created_at.tzinfo is not None

    again = client.change(NS, player, grant)
    assert again.replay and again.id == trx.id

    spend = client.change(NS, player, coffer.Change(key("spend"), [coffer.Op("gold", -150)]))
    assert spend.ops[-1].balance_after == 450
    balances = client.balances(NS, player, lots=True)
    assert (balances.total("gold"), balances.version) == (450, spend.version)
    assert sum(lot.amount for lot in balances.balances[0].lots) == 450
    past = client.balances(NS, player, at=trx.created_at)
    assert past.total("gold") == 600


def test_hold_commit_and_rollback(client, player):
    client.change(NS, player, coffer.Change(key("grant"), [coffer.Op("gold", 100)]))
    begin = coffer.Change(key("hold"), [coffer.Op("gold", -30), coffer.Op("silver", 5)], hold=True,
                          hold_ttl_seconds=60)
    held = client.change(NS, player, begin)
    assert held.status == "pending" and held.hold_expires_at is not None
    assert [op.pending for op in held.ops] == [False, True]
    done = client.commit(NS, player, begin.idempotency_key)
    assert done.status == "committed" and not done.replay
    assert client.commit(NS, player, begin.idempotency_key).replay

    other = coffer.Change(key("hold"), [coffer.Op("gold", -50)], hold=True)
    client.change(NS, player, other)
    assert client.rollback(NS, player, other.idempotency_key).status == "rolled_back"
    with pytest.raises(coffer.CofferError) as err:
        client.commit(NS, player, other.idempotency_key)
    assert (err.value.code, err.value.status) == ("hold_not_pending", 409)
    assert client.trx(NS, player, other.idempotency_key).status == "rolled_back"
    holds = client.finlog(NS, player, kind="hold", status="rolled_back")
    assert [t.idempotency_key for t in holds.items] == [other.idempotency_key]
    assert [t.kind for t in client.finlog(NS, player, idempotency_key=begin.idempotency_key).items] == ["hold"]
    balances = client.balances(NS, player)
    assert (balances.total("gold"), balances.total("silver")) == (70, 5)


def test_exchange_and_refund(client, player):
    order = coffer.Purchase("steam", str(uuid.uuid4()), 999, "USD")
    buy = client.change(NS, player, coffer.Change(key("buy"), [coffer.Op("gold", 20, kind="paid", purchase=order)]))
    assert buy.emitter > 0, "a client's trx names its emitter"
    claim = client.order(NS, "steam", order.order_id)
    assert (claim.player_id, claim.emitter, claim.idempotency_key) == (player, buy.emitter, buy.idempotency_key)
    with pytest.raises(coffer.CofferError) as err:
        client.order(NS, "steam", str(uuid.uuid4()))
    assert err.value.code == "not_found"
    ex = client.exchange(NS, player, coffer.Exchange(key("ex"), from_currency="gold", amount=5,
                                                      to_currency="silver"))
    assert ex.kind == "exchange" and ex.balances
    assert client.balances(NS, player).total("silver") == 500
    refund = client.refund(NS, player, coffer.Refund(key("refund"), "steam", order.order_id, "chargeback"))
    assert refund.kind == "refund" and refund.refund is not None
    assert (refund.refund.store, refund.refund.kind) == ("steam", "chargeback")
    with pytest.raises(coffer.CofferError) as err:
        client.refund(NS, player, coffer.Refund(key("refund"), "steam", order.order_id, "refund"))
    assert err.value.code == "already_refunded"
    page = client.finlog(NS, player, limit=2)
    assert [t.kind for t in page.items] == ["change", "exchange"] and page.next_cursor
    rest = client.finlog(NS, player, cursor=page.next_cursor)
    assert [t.kind for t in rest.items] == ["refund"] and not rest.next_cursor


def test_errors_carry_their_code(server, player):
    slept = []
    with coffer.Client(*server, sleep=slept.append) as c:
        with pytest.raises(coffer.CofferError) as err:
            c.change(NS, player, coffer.Change(key("spend"), [coffer.Op("gold", -1)]))
        assert (err.value.code, err.value.status, err.value.retryable) == ("insufficient_funds", 409, False)
        assert err.value.request_id
        with pytest.raises(coffer.CofferError) as err:
            c.trx(NS, player, "no such key")
        assert err.value.code == "not_found"
    assert slept == [], "a refusal that is not retryable is not retried"
    with coffer.Client(server[0], "coffer_wrong") as c, pytest.raises(coffer.CofferError) as err:
        c.balances(NS, player)
    assert (err.value.code, err.value.status) == ("unauthenticated", 401)


def test_batch(client, player):
    other = player + 1
    changes = [
        coffer.BatchChange(key("season"), [coffer.Op("gold", 300)], reason="season", player_id=player),
        coffer.BatchChange(key("season"), [coffer.Op("gold", 200)], reason="season", player_id=other),
        coffer.BatchChange(key("spend"), [coffer.Op("gold", -1000)], player_id=other),
    ]
    results = client.batch(NS, changes)
    assert [r.status for r in results] == [201, 201, 409]
    assert results[0].trx is not None and results[0].trx.ops[0].balance_after == 300
    assert results[2].error is not None and results[2].error.code == "insufficient_funds"
    again = client.batch(NS, changes[:2])
    assert [(r.status, r.trx.replay, r.trx.id) for r in again] == [(200, True, r.trx.id) for r in results[:2]]


def test_async_client(server, player):
    async def story():
        async with coffer.AsyncClient(*server) as c:
            trx = await c.change(NS, player, coffer.Change(key("grant"), [coffer.Op("gold", 7)]))
            assert trx.ops[0].balance_after == 7
            with pytest.raises(coffer.CofferError) as err:
                await c.change(NS, player, coffer.Change(key("spend"), [coffer.Op("gold", -8)]))
            assert err.value.code == "insufficient_funds"
            return await c.balances(NS, player)

    assert asyncio.run(story()).total("gold") == 7


def test_revenue(client, player):
    now = datetime.now(timezone.utc)
    order = coffer.Purchase("steam", str(uuid.uuid4()), 100, "EUR")
    client.change(NS, player, coffer.Change(key("buy"), [coffer.Op("silver", 10, kind="paid", purchase=order)]))
    lines = client.revenue(NS, now - timedelta(hours=1), now + timedelta(hours=1), currency="silver")
    eur = [line for line in lines if line.fiat == "EUR"]
    assert eur and eur[0].deposited >= 10 and eur[0].deposited_value >= 100
