// Client: coffer's HTTP/JSON API, one method per call. A refusal that did
// nothing and may pass later (RETRYABLE) is sent again, the very same
// request and so the same idempotency key, after the answer's Retry-After:
// at most `retries` times, each wait at most `retryAfterMaxSeconds`.
import { CofferError, UnexpectedAnswer } from "./errors.js";
const retryAfterDefaultSeconds = 1;
function playerPath(ns, player) {
    return `/v1/namespaces/${ns}/players/${player}`;
}
// segment is s as one escaped segment of a path. An empty s would make an
// empty segment, which routes elsewhere; "." and ".." are names too, whose
// dots URL resolvers would remove, so they are escaped.
function segment(what, s) {
    if (s === "") {
        throw new CofferError("invalid_argument", `${what} is empty; nothing was sent`);
    }
    return s === "." || s === ".." ? "%2E".repeat(s.length) : encodeURIComponent(s);
}
// trxPath is the path of the trx of key.
function trxPath(ns, player, key, suffix = "") {
    return `${playerPath(ns, player)}/transactions/${segment("an idempotency key", key)}${suffix}`;
}
function trx(status, body) {
    return { ...body, replay: status === 200 };
}
function problem(status, body, retryAfter) {
    const seconds = retryAfter !== null && /^\s*\d+\s*$/.test(retryAfter) ? Number(retryAfter) : undefined;
    return new CofferError(body.code, body.detail ?? "", { status, requestId: body.request_id, retryAfterSeconds: seconds });
}
// safeIntegers is a JSON.parse reviver that refuses an integer a number
// cannot hold exactly (a balance may reach 10^18): better no answer than
// a wrong amount.
function safeIntegers(key, v) {
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
    #base;
    #key;
    #timeoutMs;
    #retries;
    #retryAfterMaxSeconds;
    #sleep;
    #fetch;
    constructor(opts) {
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
    balances(ns, player, q = {}) {
        return this.#send({ method: "GET", path: `${playerPath(ns, player)}/balances`, query: { ...q }, read: (_, b) => b });
    }
    /** change applies a change, or begins a hold (change.hold). */
    change(ns, player, change) {
        return this.#send({ method: "POST", path: `${playerPath(ns, player)}/transactions`, body: change, read: trx });
    }
    /**
     * batch applies up to 1000 changes of players of ns, each atomically on
     * its own; one result per change, in request order. To retry results that
     * failed retryably, send the whole batch again: what was applied replays.
     */
    batch(ns, changes) {
        return this.#send({
            method: "POST",
            path: `/v1/namespaces/${ns}/transactions:batch`,
            body: { changes },
            read: (_, b) => (b.results ?? []).map((r) => r.error ? { status: r.status, error: problem(r.status, r.error, null) } : { status: r.status, trx: { ...r.trx, replay: r.replay === true } }),
        });
    }
    /** commit commits the pending hold of idempotency key `key`. */
    commit(ns, player, key) {
        return this.#send({ method: "POST", path: trxPath(ns, player, key, "/commit"), read: trx });
    }
    /** rollback rolls the pending hold of idempotency key `key` back. */
    rollback(ns, player, key) {
        return this.#send({ method: "POST", path: trxPath(ns, player, key, "/rollback"), read: trx });
    }
    /** trx reads one trx of this client by its idempotency key, as it is now. */
    trx(ns, player, key) {
        return this.#send({ method: "GET", path: trxPath(ns, player, key), read: trx });
    }
    /** exchange exchanges one currency for another at the namespace's rate. */
    exchange(ns, player, exchange) {
        return this.#send({ method: "POST", path: `${playerPath(ns, player)}/exchanges`, body: exchange, read: trx });
    }
    /** refund takes back a store order credited to the player. */
    refund(ns, player, refund) {
        return this.#send({ method: "POST", path: `${playerPath(ns, player)}/refunds`, body: refund, read: trx });
    }
    /** finlog reads a page of a player's finlog; pass its next_cursor as cursor for the next. */
    finlog(ns, player, q = {}) {
        return this.#send({ method: "GET", path: `${playerPath(ns, player)}/finlog`, query: { ...q }, read: (_, b) => b });
    }
    /** order reads who presented a store order first: its player, and the request's emitter and key; not_found if it never was. */
    order(ns, store, orderId) {
        const path = `/v1/namespaces/${ns}/orders/${segment("a store", store)}/${segment("an order id", orderId)}`;
        return this.#send({ method: "GET", path, read: (_, b) => b });
    }
    /** revenue reads the revenue report of ns (admin). */
    revenue(ns, q) {
        return this.#send({ method: "GET", path: `/v1/namespaces/${ns}/reports/revenue`, query: { ...q }, read: (_, b) => b.lines ?? [] });
    }
    async #send(call) {
        const url = new URL(this.#base + call.path);
        for (const [name, v] of Object.entries(call.query ?? {})) {
            if (v !== undefined && v !== false && v !== "")
                url.searchParams.set(name, String(v));
        }
        const headers = { Authorization: `Bearer ${this.#key}` };
        const body = call.body === undefined ? undefined : JSON.stringify(call.body);
        if (body !== undefined)
            headers["Content-Type"] = "application/json";
        for (let attempt = 0;; attempt++) {
            const resp = await this.#fetch(url, { method: call.method, headers, body, signal: AbortSignal.timeout(this.#timeoutMs) });
            try {
                return await answer(call, resp);
            }
            catch (err) {
                if (!(err instanceof CofferError) || !err.retryable || attempt >= this.#retries)
                    throw err;
                const seconds = Math.min(err.retryAfterSeconds ?? retryAfterDefaultSeconds, this.#retryAfterMaxSeconds);
                await this.#sleep(seconds * 1000);
            }
        }
    }
}
// answer reads one answer: the call's result, or a CofferError.
async function answer(call, resp) {
    const text = await resp.text();
    let body;
    try {
        body = text === "" ? undefined : JSON.parse(text, safeIntegers);
    }
    catch (err) {
        if (err instanceof RangeError)
            throw err;
    }
    const what = `coffer: ${call.method} ${call.path}: HTTP ${resp.status}`;
    if (resp.status >= 300) {
        if (typeof body !== "object" || body === null || !body.code) {
            throw new UnexpectedAnswer(`${what}: ${text.slice(0, 200)}`, resp.status);
        }
        throw problem(resp.status, body, resp.headers.get("retry-after"));
    }
    if (typeof body !== "object" || body === null)
        throw new UnexpectedAnswer(`${what}: not a JSON object`, resp.status);
    return call.read(resp.status, body);
}
