"""Errors: what the service answered (CofferError, with its stable code) and
answers outside the contract (UnexpectedAnswer)."""

from __future__ import annotations

# RETRYABLE are the codes of refusals that did nothing and may pass a
# moment later: the client retries them with the same request, and so the
# same idempotency key, after the answer's Retry-After.
RETRYABLE = frozenset({"overloaded", "shard_unavailable"})


class CofferError(Exception):
    """CofferError is an error the service answered: code is its stable code
    (docs/api.md, Errors), status the HTTP status; retry_after the seconds
    the answer asked to wait before a retry, or None."""

    def __init__(self, code: str, detail: str = "", *, status: int = 0, request_id: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """retryable tells whether the same request may pass if sent again later."""
        return self.code in RETRYABLE


class UnexpectedAnswer(Exception):
    """UnexpectedAnswer is an answer outside the contract: an error without
    problem details (from a proxy, say), or a body that does not decode."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
