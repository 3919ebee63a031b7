// Client: coffer's HTTP/JSON API, one method per call. A refusal that did
// nothing and may pass later (RETRYABLE) is sent again, the very same
// request and so the same idempotency key, after the answer's Retry-After:
// at most `retries` times, each wait at most `retryAfterMaxSeconds`.

import { CofferError, UnexpectedAnswer } from "./errors.js";
import type { Balances, BatchChange, Change, Exchange, FinlogPage, OrderClaim, Refund, RevenueLine, Trx, TrxKind, TrxStatus } from "./models.js";

/** ClientOptions configure a Client; only baseUrl and apiKey are required. */
export interface ClientOptions {
  /** The service's address, e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  apiKey: string;
  /** Bound of each attempt, in milliseconds; default 10 000. */
  timeoutMs?: number;
  /** How many times a retryable refusal is sent again; default 3. */
  retries?: number;
  /** The longest wait before a retry, whatever Retry-After says; default 30. */
  retryAfterMaxSeconds?: number;
  /** Waits before a retry; default setTimeout. */
  sleep?: (ms: number) => Promise<void>;
  /** The fetch to call; default the global one. */
  fetch?: typeof fetch;
}

/** BatchResult is the result of one change of a batch: its trx, or the error the change sent alone would have had. */
export interface BatchResult {
  status: number;
  trx?: Trx;
  error?: CofferError;
}

/** BalancesQuery selects the balances read: one currency, at a past time, with lots. */
export interface BalancesQuery {
  currency?: string;
  at?: string;
  lots?: boolean;
}

/**
 * FinlogQuery selects a finlog page: the period [from, to), filters, the
 * page. A filtered page may come short, with a cursor.
 */
export interface FinlogQuery {
  from?: string;
  to?: string;
  currency?: string;
  reason?: string;
  kind?: TrxKind;
  status?: TrxStatus;
  /** Only the trx under this key, whichever client gave it. */
  idempotency_key?: string;
  limit?: number;
  cursor?: string;
  order?: "asc" | "desc";
}

/** RevenueQuery is the period [from, to) of a revenue report, and optionally one currency. */
export interface RevenueQuery {
  from: string;
  to: string;
  currency?: string;
}

const retryAfterDefaultSeconds = 1;

interface Call<T> {
  method: "GET" | "POST";
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  read: (status: number, body: any) => T;
}

function playerPath(ns: number, player: number): string {
  return `/v1/namespaces/${ns}/players/${player}`;
}

// segment is s as one escaped segment of a path. An empty s would make an
// empty segment, which routes elsewhere; "." and ".." are names too, whose
// dots URL resolvers would remove, so they are escaped.
function segment(what: string, s: string): string {
  if (s === "") {
    throw new CofferError("invalid_argument", `${what} is empty; nothing was sent`);
  }
  return s === "." || s === ".." ? "%2E".repeat(s.length) : encodeURIComponent(s);
}

// trxPath is the path of the trx of key.
function trxPath(ns: number, player: number, key: string, suffix = ""): string {
  return `${playerPath(ns, player)}/transactions/${segment("an idempotency key", key)}${suffix}`;
}

function trx(status: number, body: any): Trx {
  return { ...body, replay: status === 200 };
}

function problem(status: number, body: any, retryAfter: string | null): CofferError {
  const seconds = retryAfter !== null && /^\s*\d+\s*$/.test(retryAfter) ? Number(retryAfter) : undefined;
  return new CofferError(body.code, body.detail ?? "", { status, requestId: body.request_id, retryAfterSeconds: seconds });
}

// safeIntegers is a JSON.parse reviver that refuses an integer a number
// cannot hold exactly (a balance may reach 10^18): better no answer than
// a wrong amount.
function safeIntegers(key: string, v: unknown): unknown {
  if (typeof v === "number" && Number.isInteger(v) && !Number.isSafeInteger(v)) {
    throw new RangeError(`${key}: an integer beyond Number.MAX_SAFE_INTEGER, which a number cannot hold exactly`);
  }
  return v;
}

/**
 * Client calls one coffer service with one API key. Errors the service
 * answers reject with CofferError; a transport failure rejects with fetch's
 * own error, and a write may then be sent again with the same idempotency key.
 */
export class Client {
  readonly #base: string;
  readonly #key: string;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #retryAfterMaxSeconds: number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #fetch: typeof fetch;

  constructor(opts: ClientOptions) {
    this.#base = opts.baseUrl.replace(/\/+$/, "");
    this.#key = opts.apiKey;
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
    this.#retries = opts.retries ?? 3;
    this.#retryAfterMaxSeconds = opts.retryAfterMaxSeconds ?? 30;
    this.#sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.#fetch = opts.fetch ?? fetch;
    if (!Number.isInteger(this.#retries) || this.#retries < 0) {
      throw new RangeError("retries must be an integer >= 0");
    }
  }

  /** balances reads a player's balances: now, or at a past time `at`. */
  balances(ns: number, player: number, q: BalancesQuery = {}): Promise<Balances> {
    return this.#send({ method: "GET", path: `${playerPath(ns, player)}/balances`, query: { ...q }, read: (_, b) => b });
  }

  /** change applies a change, or begins a hold (change.hold). */
  change(ns: number, player: number, change: Change): Promise<Trx> {
    return this.#send({ method: "POST", path: `${playerPath(ns, player)}/transactions`, body: change, read: trx });
  }

  /**
   * batch applies up to 1000 changes of players of ns, each atomically on
   * its own; one result per change, in request order. To retry results that
   * failed retryably, send the whole batch again: what was applied replays.
   */
  batch(ns: number, changes: BatchChange[]): Promise<BatchResult[]> {
    return this.#send({
      method: "POST",
      path: `/v1/namespaces/${ns}/transactions:batch`,
      body: { changes },
      read: (_, b) =>
        (b.results ?? []).map((r: any): BatchResult =>
          r.error ? { status: r.status, error: problem(r.status, r.error, null) } : { status: r.status, trx: { ...r.trx, replay: r.replay === true } },
        ),
    });
  }

  /** commit commits the pending hold of idempotency key `key`. */
  commit(ns: number, player: number, key: string): Promise<Trx> {
    return this.#send({ method: "POST", path: trxPath(ns, player, key, "/commit"), read: trx });
  }

  /** rollback rolls the pending hold of idempotency key `key` back. */
  rollback(ns: number, player: number, key: string): Promise<Trx> {
    return this.#send({ method: "POST", path: trxPath(ns, player, key, "/rollback"), read: trx });
  }

  /** trx reads one trx of this client by its idempotency key, as it is now. */
  trx(ns: number, player: number, key: string): Promise<Trx> {
    return this.#send({ method: "GET", path: trxPath(ns, player, key), read: trx });
  }

  /** exchange exchanges one currency for another at the namespace's rate. */
  exchange(ns: number, player: number, exchange: Exchange): Promise<Trx> {
    return this.#send({ method: "POST", path: `${playerPath(ns, player)}/exchanges`, body: exchange, read: trx });
  }

  /** refund takes back a store order credited to the player. */
  refund(ns: number, player: number, refund: Refund): Promise<Trx> {
    return this.#send({ method: "POST", path: `${playerPath(ns, player)}/refunds`, body: refund, read: trx });
  }

  /** finlog reads a page of a player's finlog; pass its next_cursor as cursor for the next. */
  finlog(ns: number, player: number, q: FinlogQuery = {}): Promise<FinlogPage> {
    return this.#send({ method: "GET", path: `${playerPath(ns, player)}/finlog`, query: { ...q }, read: (_, b) => b });
  }

  /** order reads who presented a store order first: its player, and the request's emitter and key; not_found if it never was. */
  order(ns: number, store: string, orderId: string): Promise<OrderClaim> {
    const path = `/v1/namespaces/${ns}/orders/${segment("a store", store)}/${segment("an order id", orderId)}`;
    return this.#send({ method: "GET", path, read: (_, b) => b });
  }

  /** revenue reads the revenue report of ns (admin). */
  revenue(ns: number, q: RevenueQuery): Promise<RevenueLine[]> {
    return this.#send({ method: "GET", path: `/v1/namespaces/${ns}/reports/revenue`, query: { ...q }, read: (_, b) => b.lines ?? [] });
  }

  async #send<T>(call: Call<T>): Promise<T> {
    const url = new URL(this.#base + call.path);
    for (const [name, v] of Object.entries(call.query ?? {})) {
      if (v !== undefined && v !== false && v !== "") url.searchParams.set(name, String(v));
    }
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#key}` };
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    if (body !== undefined) headers["Content-Type"] = "application/json";
    for (let attempt = 0; ; attempt++) {
      const resp = await this.#fetch(url, { method: call.method, headers, body, signal: AbortSignal.timeout(this.#timeoutMs) });
      try {
        return await answer(call, resp);
      } catch (err) {
        if (!(err instanceof CofferError) || !err.retryable || attempt >= this.#retries) throw err;
        const seconds = Math.min(err.retryAfterSeconds ?? retryAfterDefaultSeconds, this.#retryAfterMaxSeconds);
        await this.#sleep(seconds * 1000);
      }
    }
  }
}

// answer reads one answer: the call's result, or a CofferError.
async function answer<T>(call: Call<T>, resp: Response): Promise<T> {
  const text = await resp.text();
  let body: any;
  try {
    body = text === "" ? undefined : JSON.parse(text, safeIntegers);
  } catch (err) {
    if (err instanceof RangeError) throw err;
  }
  const what = `coffer: ${call.method} ${call.path}: HTTP ${resp.status}`;
  if (resp.status >= 300) {
    if (typeof body !== "object" || body === null || !body.code) {
      throw new UnexpectedAnswer(`${what}: ${text.slice(0, 200)}`, resp.status);
    }
    throw problem(resp.status, body, resp.headers.get("retry-after"));
  }
  if (typeof body !== "object" || body === null) throw new UnexpectedAnswer(`${what}: not a JSON object`, resp.status);
  return call.read(resp.status, body);
}
