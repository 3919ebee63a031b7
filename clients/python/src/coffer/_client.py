"""Client and AsyncClient: coffer's HTTP/JSON API, one method per call.

Both build the same calls (_Call) and read the same answers (_answer); they
differ only in how they send them. A refusal that did nothing and may pass
later (errors.RETRYABLE) is sent again, the very same request and so the
same idempotency key, after the answer's Retry-After: at most `retries`
times, each wait at most `retry_after_max` seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from ._codec import decode, dumps, encode
from ._errors import CofferError, UnexpectedAnswer
from ._models import (Balances, BatchChange, Change, Exchange, FinlogPage, OrderClaim, Refund, RevenueLine,
                      Trx)

T = TypeVar("T")

RETRY_AFTER_DEFAULT = 1.0  # seconds, when a retryable refusal names no Retry-After


@dataclass(frozen=True)
class BatchResult:
    """BatchResult is the result of one change of a batch: its trx (replay as
    in Trx), or the error the change sent alone would have had."""

    status: int
    trx: Trx | None = None
    error: CofferError | None = None


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    read: Callable[[int, Any], T]
    query: dict[str, str] | None = None
    body: bytes | None = None


def _player(ns: int, player: int) -> str:
    return f"/v1/namespaces/{int(ns)}/players/{int(player)}"


def _segment(what: str, s: str) -> str:
    """_segment is s as one escaped segment of a path. An empty s would make an
    empty segment, which routes elsewhere; "." and ".." are names too, whose
    dots URL resolvers would remove, so they are escaped."""
    if not s:
        raise CofferError("invalid_argument", f"{what} is empty; nothing was sent")
    return "%2E" * len(s) if s in (".", "..") else quote(s, safe="")


def _trx_path(ns: int, player: int, key: str, suffix: str = "") -> str:
    """_trx_path is the path of the trx of key."""
    return f"{_player(ns, player)}/transactions/{_segment('an idempotency key', key)}{suffix}"


def _trx(status: int, body: Any) -> Trx:
    trx: Trx = decode(Trx, body)
    return replace(trx, replay=status == 200)


def _query(**params: Any) -> dict[str, str]:
    out = {}
    for name, v in params.items():
        if v is None or v is False or v == "":
            continue
        out[name] = encode(v) if isinstance(v, datetime) else "true" if v is True else str(v)
    return out


def _batch_results(status: int, body: Any) -> list[BatchResult]:
    out = []
    for r in body.get("results", []):
        if r.get("error") is not None:
            out.append(BatchResult(r["status"], error=_error(r["status"], r["error"], None)))
        else:
            out.append(BatchResult(r["status"], trx=replace(decode(Trx, r["trx"]), replay=bool(r.get("replay")))))
    return out


class _Calls:
    """_Calls builds each call of the API; the clients send them."""

    @staticmethod
    def balances(ns: int, player: int, currency: str | None, at: datetime | None, lots: bool) -> _Call[Balances]:
        return _Call("GET", _player(ns, player) + "/balances", lambda s, b: decode(Balances, b),
                     _query(currency=currency, at=at, lots=lots))

    @staticmethod
    def change(ns: int, player: int, change: Change) -> _Call[Trx]:
        return _Call("POST", _player(ns, player) + "/transactions", _trx, body=dumps(change))

    @staticmethod
    def batch(ns: int, changes: list[BatchChange]) -> _Call[list[BatchResult]]:
        return _Call("POST", f"/v1/namespaces/{int(ns)}/transactions:batch", _batch_results,
                     body=dumps({"changes": changes}))

    @staticmethod
    def finish(ns: int, player: int, key: str, how: str) -> _Call[Trx]:
        return _Call("POST", _trx_path(ns, player, key, "/" + how), _trx)

    @staticmethod
    def trx(ns: int, player: int, key: str) -> _Call[Trx]:
        return _Call("GET", _trx_path(ns, player, key), _trx)

    @staticmethod
    def exchange(ns: int, player: int, exchange: Exchange) -> _Call[Trx]:
        return _Call("POST", _player(ns, player) + "/exchanges", _trx, body=dumps(exchange))

    @staticmethod
    def refund(ns: int, player: int, refund: Refund) -> _Call[Trx]:
        return _Call("POST", _player(ns, player) + "/refunds", _trx, body=dumps(refund))

    @staticmethod
    def finlog(ns: int, player: int, **q: Any) -> _Call[FinlogPage]:
        return _Call("GET", _player(ns, player) + "/finlog", lambda s, b: decode(FinlogPage, b), _query(**q))

    @staticmethod
    def order(ns: int, store: str, order_id: str) -> _Call[OrderClaim]:
        return _Call("GET", f"/v1/namespaces/{int(ns)}/orders/{_segment('a store', store)}/"
                     f"{_segment('an order id', order_id)}", lambda s, b: decode(OrderClaim, b))

    @staticmethod
    def revenue(ns: int, start: datetime, end: datetime, currency: str | None) -> _Call[list[RevenueLine]]:
        return _Call("GET", f"/v1/namespaces/{int(ns)}/reports/revenue",
                     lambda s, b: [decode(RevenueLine, x) for x in b.get("lines", [])],
                     _query(**{"from": start, "to": end, "currency": currency}))


def _error(status: int, problem: Any, retry_after: str | None) -> CofferError:
    seconds = None
    if retry_after is not None and retry_after.strip().isdigit():
        seconds = float(retry_after)
    return CofferError(problem["code"], problem.get("detail", ""), status=status,
                       request_id=problem.get("request_id", ""), retry_after=seconds)


def _answer(call: _Call[T], resp: httpx.Response) -> T:
    """_answer reads one answer: the call's result, or a CofferError."""
    try:
        body = json.loads(resp.content) if resp.content else None
    except ValueError:
        body = None
    if resp.status_code >= 300:
        if not isinstance(body, dict) or not body.get("code"):
            raise UnexpectedAnswer(f"coffer: {call.method} {call.path}: HTTP {resp.status_code}: {resp.text[:200]}",
                                   status=resp.status_code)
        raise _error(resp.status_code, body, resp.headers.get("retry-after"))
    if not isinstance(body, dict):
        raise UnexpectedAnswer(f"coffer: {call.method} {call.path}: HTTP {resp.status_code}: not a JSON object",
                               status=resp.status_code)
    return call.read(resp.status_code, body)


class _Base:
    def __init__(self, api_key: str, retries: int, retry_after_max: float) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self._auth = {"Authorization": f"Bearer {api_key}"}
        self._retries = retries
        self._retry_after_max = retry_after_max

    def _request(self, call: _Call[Any]) -> dict[str, Any]:
        """_request is the arguments of httpx's request() for call."""
        headers = self._auth if call.body is None else {**self._auth, "Content-Type": "application/json"}
        return {"method": call.method, "url": call.path, "params": call.query, "content": call.body,
                "headers": headers}

    def _wait(self, err: CofferError, attempt: int) -> float:
        """_wait is how long to wait before sending err's request again; it
        raises err when it must not be sent again: not retryable, or the
        last attempt."""
        if not err.retryable or attempt >= self._retries:
            raise err
        after = RETRY_AFTER_DEFAULT if err.retry_after is None else err.retry_after
        return min(after, self._retry_after_max)


class Client(_Base):
    """Client calls one coffer service with one API key, synchronously. It is
    safe for use from several threads (httpx.Client is). Errors the service
    answers are CofferError; a transport failure is httpx's own exception,
    and a write may then be sent again with the same idempotency key."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 10.0, retries: int = 3,
                 retry_after_max: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                 http: httpx.Client | None = None) -> None:
        super().__init__(api_key, retries, retry_after_max)
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            try:
                return _answer(call, self._http.request(**self._request(call)))
            except CofferError as err:
                self._sleep(self._wait(err, attempt))
            attempt += 1

    def balances(self, ns: int, player: int, *, currency: str | None = None, at: datetime | None = None,
                 lots: bool = False) -> Balances:
        """balances reads a player's balances: now, or at a past time `at`."""
        return self._send(_Calls.balances(ns, player, currency, at, lots))

    def change(self, ns: int, player: int, change: Change) -> Trx:
        """change applies a change, or begins a hold (change.hold)."""
        return self._send(_Calls.change(ns, player, change))

    def batch(self, ns: int, changes: list[BatchChange]) -> list[BatchResult]:
        """batch applies up to 1000 changes of players of ns, each atomically on
        its own; one result per change, in request order. To retry results
        that failed retryably, send the whole batch again: what was applied
        replays."""
        return self._send(_Calls.batch(ns, changes))

    def commit(self, ns: int, player: int, key: str) -> Trx:
        """commit commits the pending hold of idempotency key `key`."""
        return self._send(_Calls.finish(ns, player, key, "commit"))

    def rollback(self, ns: int, player: int, key: str) -> Trx:
        """rollback rolls the pending hold of idempotency key `key` back."""
        return self._send(_Calls.finish(ns, player, key, "rollback"))

    def trx(self, ns: int, player: int, key: str) -> Trx:
        """trx reads one trx of this client by its idempotency key, as it is now."""
        return self._send(_Calls.trx(ns, player, key))

    def exchange(self, ns: int, player: int, exchange: Exchange) -> Trx:
        """exchange exchanges one currency for another at the namespace's rate."""
        return self._send(_Calls.exchange(ns, player, exchange))

    def refund(self, ns: int, player: int, refund: Refund) -> Trx:
        """refund takes back a store order credited to the player."""
        return self._send(_Calls.refund(ns, player, refund))

    def finlog(self, ns: int, player: int, *, start: datetime | None = None, end: datetime | None = None,
               currency: str | None = None, reason: str | None = None, kind: str | None = None,
               status: str | None = None, idempotency_key: str | None = None, limit: int | None = None,
               cursor: str | None = None, desc: bool = False) -> FinlogPage:
        """finlog reads a page of a player's finlog, [start, end); pass the
        page's next_cursor as cursor for the next. kind, status and
        idempotency_key (any client's) list only the trx that match: a
        filtered page may come short, with a cursor."""
        return self._send(_Calls.finlog(ns, player, **{"from": start, "to": end}, currency=currency,
                                        reason=reason, kind=kind, status=status, idempotency_key=idempotency_key,
                                        limit=limit, cursor=cursor, order="desc" if desc else None))

    def order(self, ns: int, store: str, order_id: str) -> OrderClaim:
        """order reads who presented a store order first: its player, and the
        request's emitter and key; not_found if it never was."""
        return self._send(_Calls.order(ns, store, order_id))

    def revenue(self, ns: int, start: datetime, end: datetime, *, currency: str | None = None) -> list[RevenueLine]:
        """revenue reads the revenue report of ns for [start, end) (admin)."""
        return self._send(_Calls.revenue(ns, start, end, currency))


async def _asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncClient(_Base):
    """AsyncClient is Client for asyncio: the same calls, awaited."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 10.0, retries: int = 3,
                 retry_after_max: float = 30.0, sleep: Callable[[float], Awaitable[None]] = _asleep,
                 http: httpx.AsyncClient | None = None) -> None:
        super().__init__(api_key, retries, retry_after_max)
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._sleep = sleep

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            try:
                return _answer(call, await self._http.request(**self._request(call)))
            except CofferError as err:
                await self._sleep(self._wait(err, attempt))
            attempt += 1

    async def balances(self, ns: int, player: int, *, currency: str | None = None,
                       at: datetime | None = None, lots: bool = False) -> Balances:
        return await self._send(_Calls.balances(ns, player, currency, at, lots))

    async def change(self, ns: int, player: int, change: Change) -> Trx:
        return await self._send(_Calls.change(ns, player, change))

    async def batch(self, ns: int, changes: list[BatchChange]) -> list[BatchResult]:
        return await self._send(_Calls.batch(ns, changes))

    async def commit(self, ns: int, player: int, key: str) -> Trx:
        return await self._send(_Calls.finish(ns, player, key, "commit"))

    async def rollback(self, ns: int, player: int, key: str) -> Trx:
        return await self._send(_Calls.finish(ns, player, key, "rollback"))

    async def trx(self, ns: int, player: int, key: str) -> Trx:
        return await self._send(_Calls.trx(ns, player, key))

    async def exchange(self, ns: int, player: int, exchange: Exchange) -> Trx:
        return await self._send(_Calls.exchange(ns, player, exchange))

    async def refund(self, ns: int, player: int, refund: Refund) -> Trx:
        return await self._send(_Calls.refund(ns, player, refund))

    async def finlog(self, ns: int, player: int, *, start: datetime | None = None, end: datetime | None = None,
                     currency: str | None = None, reason: str | None = None, kind: str | None = None,
                     status: str | None = None, idempotency_key: str | None = None, limit: int | None = None,
                     cursor: str | None = None, desc: bool = False) -> FinlogPage:
        return await self._send(_Calls.finlog(ns, player, **{"from": start, "to": end}, currency=currency,
                                              reason=reason, kind=kind, status=status,
                                              idempotency_key=idempotency_key, limit=limit, cursor=cursor,
                                              order="desc" if desc else None))

    async def order(self, ns: int, store: str, order_id: str) -> OrderClaim:
        return await self._send(_Calls.order(ns, store, order_id))

    async def revenue(self, ns: int, start: datetime, end: datetime, *,
                      currency: str | None = None) -> list[RevenueLine]:
        return await self._send(_Calls.revenue(ns, start, end, currency))
