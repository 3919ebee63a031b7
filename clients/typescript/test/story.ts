// The README's story, through the client: grant, spend, hold, exchange,
// refund, the batch API, errors with their codes.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Client, CofferError, type Balances, type BatchChange, type Change } from "../src/index.js";
import { NS, apiKey, key, player, url } from "./server.js";

const client = new Client({ baseUrl: url, apiKey });

function total(b: Balances, currency: string): number {
  return b.balances?.find((x) => x.currency === currency)?.total ?? 0;
}

async function refused(p: Promise<unknown>): Promise<CofferError> {
  const err = await p.then(
    () => assert.fail("the call was accepted"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof CofferError, `${err}`);
  return err;
}

test("grant, spend and replay", async () => {
  const p = player();
  const order = { store: "steam", order_id: randomUUID(), price: 499, fiat: "USD" };
  const grant: Change = {
    idempotency_key: key("grant"),
    ops: [
      { currency: "gold", amount: 500, kind: "paid", purchase: order },
      { currency: "gold", amount: 100 },
    ],
    reason: "purchase",
    meta: { offer: 12 },
  };
  const trx = await client.change(NS, p, grant);
  assert.deepEqual([trx.kind, trx.status, trx.replay], ["change", "committed", false]);
  assert.deepEqual(trx.ops?.map((op) => [op.kind, op.amount, op.paid ?? false]), [["grant", 500, true], ["grant", 100, false]]);
  assert.deepEqual(trx.ops?.[0].purchase, order);
  assert.deepEqual(trx.meta, { offer: 12 });

  const again = await client.change(NS, p, grant);
  assert.ok(again.replay);
  assert.equal(again.id, trx.id);

  const spend = await client.change(NS, p, { idempotency_key: key("spend"), ops: [{ currency: "gold", amount: -150 }] });
  assert.equal(spend.ops?.at(-1)?.balance_after, 450);
  const balances = await client.balances(NS, p, { lots: true });
  assert.equal(total(balances, "gold"), 450);
  assert.equal(balances.version, spend.version);
  assert.equal(balances.balances?.[0].lots?.reduce((sum, lot) => sum + lot.amount, 0), 450);
  assert.equal(total(await client.balances(NS, p, { at: trx.created_at }), "gold"), 600);
});

test("hold: commit and rollback", async () => {
  const p = player();
  await client.change(NS, p, { idempotency_key: key("grant"), ops: [{ currency: "gold", amount: 100 }] });
  const begin: Change = {
    idempotency_key: key("hold"),
    ops: [
      { currency: "gold", amount: -30 },
      { currency: "silver", amount: 5 },
    ],
    hold: true,
    hold_ttl_seconds: 60,
  };
  const held = await client.change(NS, p, begin);
  assert.equal(held.status, "pending");
  assert.ok(held.hold_expires_at);
  assert.deepEqual(held.ops?.map((op) => op.pending ?? false), [false, true]);
  const done = await client.commit(NS, p, begin.idempotency_key);
  assert.deepEqual([done.status, done.replay], ["committed", false]);
  assert.ok((await client.commit(NS, p, begin.idempotency_key)).replay);

  const other = key("hold");
  await client.change(NS, p, { idempotency_key: other, ops: [{ currency: "gold", amount: -50 }], hold: true });
  assert.equal((await client.rollback(NS, p, other)).status, "rolled_back");
  const err = await refused(client.commit(NS, p, other));
  assert.deepEqual([err.code, err.status], ["hold_not_pending", 409]);
  assert.equal((await client.trx(NS, p, other)).status, "rolled_back");
  const holds = await client.finlog(NS, p, { kind: "hold", status: "rolled_back" });
  assert.deepEqual(holds.items?.map((t) => t.idempotency_key), [other]);
  const byKey = await client.finlog(NS, p, { idempotency_key: begin.idempotency_key });
  assert.deepEqual(byKey.items?.map((t) => t.kind), ["hold"]);
  const balances = await client.balances(NS, p);
  assert.deepEqual([total(balances, "gold"), total(balances, "silver")], [70, 5]);
});

test("exchange and refund", async () => {
  const p = player();
  const order = { store: "steam", order_id: randomUUID(), price: 999, fiat: "USD" };
  const buy = await client.change(NS, p, { idempotency_key: key("buy"), ops: [{ currency: "gold", amount: 20, kind: "paid", purchase: order }] });
  assert.ok((buy.emitter ?? 0) > 0, "a client's trx names its emitter");
  const claim = await client.order(NS, "steam", order.order_id);
  assert.deepEqual([claim.player_id, claim.emitter, claim.idempotency_key], [p, buy.emitter, buy.idempotency_key]);
  assert.equal((await refused(client.order(NS, "steam", randomUUID()))).code, "not_found");
  const ex = await client.exchange(NS, p, { idempotency_key: key("ex"), from: "gold", amount: 5, to: "silver" });
  assert.equal(ex.kind, "exchange");
  assert.equal(total(await client.balances(NS, p), "silver"), 500);
  const refund = await client.refund(NS, p, { idempotency_key: key("refund"), store: "steam", order_id: order.order_id, kind: "chargeback" });
  assert.equal(refund.kind, "refund");
  assert.deepEqual([refund.refund?.store, refund.refund?.kind], ["steam", "chargeback"]);
  const err = await refused(client.refund(NS, p, { idempotency_key: key("refund"), store: "steam", order_id: order.order_id, kind: "refund" }));
  assert.equal(err.code, "already_refunded");
  const page = await client.finlog(NS, p, { limit: 2 });
  assert.deepEqual(page.items?.map((t) => t.kind), ["change", "exchange"]);
  assert.ok(page.next_cursor);
  const rest = await client.finlog(NS, p, { cursor: page.next_cursor });
  assert.deepEqual(rest.items?.map((t) => t.kind), ["refund"]);
  assert.equal(rest.next_cursor, undefined);
});

test("errors carry their code", async () => {
  const p = player();
  const waits: number[] = [];
  const c = new Client({ baseUrl: url, apiKey, sleep: async (ms) => void waits.push(ms) });
  let err = await refused(c.change(NS, p, { idempotency_key: key("spend"), ops: [{ currency: "gold", amount: -1 }] }));
  assert.deepEqual([err.code, err.status, err.retryable], ["insufficient_funds", 409, false]);
  assert.ok(err.requestId);
  err = await refused(c.trx(NS, p, "no such key"));
  assert.equal(err.code, "not_found");
  assert.deepEqual(waits, [], "a refusal that is not retryable is not retried");
  err = await refused(new Client({ baseUrl: url, apiKey: "coffer_wrong" }).balances(NS, p));
  assert.deepEqual([err.code, err.status], ["unauthenticated", 401]);
});

test("batch", async () => {
  const p = player();
  const changes: BatchChange[] = [
    { player_id: p, idempotency_key: key("season"), ops: [{ currency: "gold", amount: 300 }], reason: "season" },
    { player_id: p + 1, idempotency_key: key("season"), ops: [{ currency: "gold", amount: 200 }], reason: "season" },
    { player_id: p + 1, idempotency_key: key("spend"), ops: [{ currency: "gold", amount: -1000 }] },
  ];
  const results = await client.batch(NS, changes);
  assert.deepEqual(results.map((r) => r.status), [201, 201, 409]);
  assert.equal(results[0].trx?.ops?.[0].balance_after, 300);
  assert.equal(results[2].error?.code, "insufficient_funds");
  const again = await client.batch(NS, changes.slice(0, 2));
  assert.deepEqual(
    again.map((r) => [r.status, r.trx?.replay, r.trx?.id]),
    results.slice(0, 2).map((r) => [200, true, r.trx?.id]),
  );
});

test("revenue", async () => {
  const p = player();
  const now = Date.now();
  const order = { store: "steam", order_id: randomUUID(), price: 100, fiat: "EUR" };
  await client.change(NS, p, { idempotency_key: key("buy"), ops: [{ currency: "silver", amount: 10, kind: "paid", purchase: order }] });
  const lines = await client.revenue(NS, {
    from: new Date(now - 3_600_000).toISOString(),
    to: new Date(now + 3_600_000).toISOString(),
    currency: "silver",
  });
  const eur = lines.find((l) => l.fiat === "EUR");
  assert.ok(eur && (eur.deposited ?? 0) >= 10 && (eur.deposited_value ?? 0) >= 100, JSON.stringify(lines));
});
