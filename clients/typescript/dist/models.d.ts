/** Purchase is the store order a paid grant credits (docs/api.md, Store orders). */
export interface Purchase {
    store: string;
    order_id: string;
    /** The grant's share of the payment, in minor units of fiat. */
    price: number;
    /** ISO 4217 code. */
    fiat: string;
}
/** Op is one op of a change as sent: amount > 0 grants, < 0 consumes. */
export interface Op {
    currency: string;
    amount: number;
    /** For grants: "free" (the default) or "paid", with its purchase. */
    kind?: "free" | "paid";
    expires_at?: string;
    priority?: number;
    purchase?: Purchase;
}
/** Change is a one-phase change, or the begin of a hold with hold: true. */
export interface Change {
    idempotency_key: string;
    ops: Op[];
    reason?: string;
    meta?: Record<string, unknown>;
    hold?: boolean;
    hold_ttl_seconds?: number;
}
/** BatchChange is one change of a batch, with the player it is for. */
export interface BatchChange extends Change {
    player_id: number;
}
/** Exchange consumes amount of from and grants to at the namespace's rate. */
export interface Exchange {
    idempotency_key: string;
    from: string;
    amount: number;
    to: string;
    reason?: string;
    meta?: Record<string, unknown>;
}
/** Refund takes back a store order credited to the player. */
export interface Refund {
    idempotency_key: string;
    store: string;
    order_id: string;
    kind: "refund" | "chargeback";
    reason?: string;
}
/** Money is an amount in minor units of an ISO 4217 fiat currency. */
export interface Money {
    amount: number;
    fiat: string;
}
/** TrxOp is one movement on one lot inside a trx. */
export interface TrxOp {
    currency: string;
    amount: number;
    kind: "grant" | "consume" | "expire";
    cause?: string;
    paid?: boolean;
    lot_id?: number;
    balance_after?: number;
    pending?: boolean;
    purchase?: Purchase;
    value?: Money;
}
/** Lot is one balance row of a player (balances with lots: true). */
export interface Lot {
    id: number;
    currency: string;
    amount: number;
    paid?: boolean;
    priority?: number;
    expires_at?: string;
    created_at?: string;
}
/** Balance is a player's balance in one currency. */
export interface Balance {
    currency: string;
    total?: number;
    paid?: number;
    free?: number;
    lots?: Lot[];
}
/** Balances is a player's balances in a namespace, now or at a past time. */
export interface Balances {
    namespace: number;
    player_id: number;
    version?: number;
    balances?: Balance[];
    at?: string;
}
/** RefundAmount is an amount of a currency a refund counts, and what it cost. */
export interface RefundAmount {
    currency: string;
    amount: number;
    value?: number;
}
/** TrxRefund is what a refund trx took back, and what it could not. */
export interface TrxRefund {
    store: string;
    order_id: string;
    kind: "refund" | "chargeback";
    exchanged?: RefundAmount[];
    shortfall?: RefundAmount[];
}
/** TrxKind is the kind of a trx. */
export type TrxKind = "change" | "hold" | "exchange" | "expire" | "refund";
/** TrxStatus is the state of a trx; only holds are ever pending. */
export type TrxStatus = "committed" | "pending" | "rolled_back" | "expired";
/**
 * Trx is one accepted request. replay is not in the body: it is true when
 * the answer is the original result of an earlier request with the same key.
 */
export interface Trx {
    id: number;
    idempotency_key: string;
    /** The emitter of the client that wrote it, whose key it is; absent for coffer's expiries. */
    emitter?: number;
    kind: TrxKind;
    status: TrxStatus;
    reason?: string;
    meta?: Record<string, unknown>;
    ops?: TrxOp[];
    created_at: string;
    hold_expires_at?: string;
    refund?: TrxRefund;
    /** The emitter of the client that committed or rolled back a hold (its own, or a support agent's); absent while pending, and when coffer expired it. */
    finished_by?: number;
    balances?: Balance[];
    version?: number;
    replay: boolean;
}
/** FinlogPage is a page of a player's finlog; no next_cursor on the last page. */
export interface FinlogPage {
    items?: Trx[];
    next_cursor?: string;
}
/** OrderClaim is who presented a store order first: the player it was credited to, and the request's client (emitter) and key. */
export interface OrderClaim {
    namespace: number;
    store: string;
    order_id: string;
    player_id: number;
    emitter: number;
    idempotency_key: string;
    created_at: string;
}
/** RevenueLine is the revenue report's line of one currency and fiat (docs/ledger.md). */
export interface RevenueLine {
    currency: string;
    fiat: string;
    opening?: number;
    opening_value?: number;
    deposited?: number;
    deposited_value?: number;
    recognised?: number;
    recognised_value?: number;
    converted_in?: number;
    converted_in_value?: number;
    converted_out?: number;
    converted_out_value?: number;
    expired?: number;
    expired_value?: number;
    refunded?: number;
    refunded_value?: number;
    refund_shortfall?: number;
    refund_shortfall_value?: number;
    deferred?: number;
    deferred_value?: number;
}
