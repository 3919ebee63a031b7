import { CofferError } from "./errors.js";
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
/**
 * Client calls one coffer service with one API key. Errors the service
 * answers reject with CofferError; a transport failure rejects with fetch's
 * own error, and a write may then be sent again with the same idempotency key.
 */
export declare class Client {
    #private;
    constructor(opts: ClientOptions);
    /** balances reads a player's balances: now, or at a past time `at`. */
    balances(ns: number, player: number, q?: BalancesQuery): Promise<Balances>;
    /** change applies a change, or begins a hold (change.hold). */
    change(ns: number, player: number, change: Change): Promise<Trx>;
    /**
     * batch applies up to 1000 changes of players of ns, each atomically on
     * its own; one result per change, in request order. To retry results that
     * failed retryably, send the whole batch again: what was applied replays.
     */
    batch(ns: number, changes: BatchChange[]): Promise<BatchResult[]>;
    /** commit commits the pending hold of idempotency key `key`. */
    commit(ns: number, player: number, key: string): Promise<Trx>;
    /** rollback rolls the pending hold of idempotency key `key` back. */
    rollback(ns: number, player: number, key: string): Promise<Trx>;
    /** trx reads one trx of this client by its idempotency key, as it is now. */
    trx(ns: number, player: number, key: string): Promise<Trx>;
    /** exchange exchanges one currency for another at the namespace's rate. */
    exchange(ns: number, player: number, exchange: Exchange): Promise<Trx>;
    /** refund takes back a store order credited to the player. */
    refund(ns: number, player: number, refund: Refund): Promise<Trx>;
    /** finlog reads a page of a player's finlog; pass its next_cursor as cursor for the next. */
    finlog(ns: number, player: number, q?: FinlogQuery): Promise<FinlogPage>;
    /** order reads who presented a store order first: its player, and the request's emitter and key; not_found if it never was. */
    order(ns: number, store: string, orderId: string): Promise<OrderClaim>;
    /** revenue reads the revenue report of ns (admin). */
    revenue(ns: number, q: RevenueQuery): Promise<RevenueLine[]>;
}
