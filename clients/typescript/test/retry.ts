// A retryable refusal is sent again, after its Retry-After, with the same
// idempotency key. The refusal is the server's own: two request bodies
// that never finish arriving hold its budget of request bytes
// (limits.request_bytes_in_flight_max, 8 MiB in `coffer dev`; docs/api.md,
// Limits), so that every other write is refused with `overloaded` until
// they go.

import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { test } from "node:test";
import { setTimeout as sleepMs } from "node:timers/promises";

import { Client, CofferError } from "../src/index.js";
import { NS, apiKey, key, player, url } from "./server.js";

const budget = 8 << 20; // coffer dev's limits.request_bytes_in_flight_max
const batchMax = 4 << 20; // coffer dev's limits.batch_body_bytes_max: one body's most
const waitMaxMs = 30_000; // how long the server has to take, and to give back, the budget

// holdBudget sends two batch bodies of batchMax bytes, all but the last
// byte of each: together they hold the whole budget but 2 bytes.
async function holdBudget(): Promise<Socket[]> {
  const u = new URL(url);
  const hogs: Socket[] = [];
  for (let i = 0; i < budget / batchMax; i++) {
    const s = connect(Number(u.port), u.hostname);
    await new Promise<void>((resolve, reject) => s.once("connect", resolve).once("error", reject));
    s.on("error", () => {}); // the server may close it first: it is let go anyway
    s.write(
      `POST /v1/namespaces/${NS}/transactions:batch HTTP/1.1\r\nHost: ${u.host}\r\n` +
        `Authorization: Bearer ${apiKey}\r\nContent-Type: application/json\r\nContent-Length: ${batchMax}\r\n\r\n`,
    );
    s.write(Buffer.alloc(batchMax - 1, " "));
    hogs.push(s);
  }
  return hogs;
}

// refused tells whether the server refuses a small write with overloaded.
async function refused(): Promise<boolean> {
  const r = await fetch(`${url}/v1/namespaces/${NS}/players/1/transactions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${apiKey}` },
    body: '{"idempotency_key": ""}',
  });
  const body = (await r.json()) as { code?: string };
  return r.status === 503 && body.code === "overloaded";
}

// overload holds the budget until the server refuses a small write. A
// probe holds its few bytes while it is served: if a hog's last bytes
// arrive then, the server refuses that hog (it answers it), and the hogs
// are sent again.
async function overload(): Promise<Socket[]> {
  const deadline = Date.now() + waitMaxMs;
  while (Date.now() < deadline) {
    const hogs = await holdBudget();
    while (Date.now() < deadline && hogs.every((s) => s.bytesRead === 0 && !s.destroyed)) {
      if (await refused()) return hogs;
      await sleepMs(50);
    }
    release(hogs);
  }
  assert.fail(`the server was not overloaded in ${waitMaxMs} ms`);
}

// served waits for the server to serve a small write again: it gives back
// the hogs' bytes as they go.
async function served(): Promise<void> {
  const deadline = Date.now() + waitMaxMs;
  while (Date.now() < deadline) {
    if (!(await refused())) return;
    await sleepMs(50);
  }
  assert.fail(`the server was still overloaded after ${waitMaxMs} ms`);
}

function release(hogs: Socket[]): void {
  for (const s of hogs.splice(0)) s.destroy();
}

test("a retry after overloaded, with the same key", async () => {
  const p = player();
  const hogs = await overload();
  const waits: number[] = [];
  try {
    const c = new Client({
      baseUrl: url,
      apiKey,
      // The first refusal: let the hogs go, then the retry can pass.
      sleep: async (ms) => {
        waits.push(ms);
        if (hogs.length > 0) {
          release(hogs);
          await served();
        }
      },
    });
    const grant = { idempotency_key: key("retried"), ops: [{ currency: "gold", amount: 40 }] };
    const trx = await c.change(NS, p, grant);
    assert.deepEqual(waits, [1000], "one refusal, waited for its Retry-After");
    assert.deepEqual([trx.status, trx.replay], ["committed", false]);
    assert.equal((await c.change(NS, p, grant)).id, trx.id);
    const b = await c.balances(NS, p);
    assert.equal(b.balances?.[0].total, 40);
  } finally {
    release(hogs);
  }
});

test("retries are bounded", async () => {
  const hogs = await overload();
  const waits: number[] = [];
  try {
    const c = new Client({ baseUrl: url, apiKey, retries: 2, sleep: async (ms) => void waits.push(ms) });
    const err = await c.change(NS, player(), { idempotency_key: key("refused"), ops: [{ currency: "gold", amount: 1 }] }).then(
      () => assert.fail("an overloaded server accepted the write"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CofferError);
    assert.deepEqual([err.code, err.status, err.retryAfterSeconds, err.retryable], ["overloaded", 503, 1, true]);
    assert.deepEqual(waits, [1000, 1000]);
  } finally {
    release(hogs);
  }
  await served();
});
