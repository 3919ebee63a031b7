/**
 * RETRYABLE are the codes of refusals that did nothing and may pass a
 * moment later: the client retries them with the same request, and so the
 * same idempotency key, after the answer's Retry-After.
 */
export const RETRYABLE = new Set(["overloaded", "shard_unavailable"]);
/**
 * CofferError is an error the service answered: code is its stable code
 * (docs/api.md, Errors), status the HTTP status, retryAfterSeconds what the
 * answer asked to wait before a retry.
 */
export class CofferError extends Error {
    code;
    status;
    detail;
    requestId;
    retryAfterSeconds;
    constructor(code, detail, opts = {}) {
        super(detail ? `${code}: ${detail}` : code);
        this.name = "CofferError";
        this.code = code;
        this.detail = detail;
        this.status = opts.status ?? 0;
        this.requestId = opts.requestId ?? "";
        this.retryAfterSeconds = opts.retryAfterSeconds;
    }
    /** retryable tells whether the same request may pass if sent again later. */
    get retryable() {
        return RETRYABLE.has(this.code);
    }
}
/**
 * UnexpectedAnswer is an answer outside the contract: an error without
 * problem details (from a proxy, say), or a body that does not decode.
 */
export class UnexpectedAnswer extends Error {
    status;
    constructor(message, status) {
        super(message);
        this.name = "UnexpectedAnswer";
        this.status = status;
    }
}
