"""A retryable refusal is sent again, after its Retry-After, with the same
idempotency key. The refusal is the server's own: two request bodies that
never finish arriving hold its budget of request bytes
(limits.request_bytes_in_flight_max, 8 MiB in `coffer dev`; docs/api.md,
Limits), so that every other write is refused with `overloaded` until they
go."""

import select
import socket
import time
from urllib.parse import urlsplit

import httpx

import coffer
from conftest import key

NS = 1
BUDGET = 8 << 20  # coffer dev's limits.request_bytes_in_flight_max
BATCH_MAX = 4 << 20  # coffer dev's limits.batch_body_bytes_max: one body's most
WAIT_MAX = 30.0  # seconds the server has to take, and to give back, the budget


def hold_budget(url: str, api_key: str) -> list[socket.socket]:
    """hold_budget sends two batch bodies of BATCH_MAX bytes, all but the last
    byte of each: together they hold the whole budget but 2 bytes."""
    u = urlsplit(url)
    hogs = []
    for _ in range(BUDGET // BATCH_MAX):
        s = socket.create_connection((u.hostname, u.port))
        hogs.append(s)
        try:
            s.sendall(f"POST /v1/namespaces/{NS}/transactions:batch HTTP/1.1\r\nHost: {u.netloc}\r\n"
                      f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {BATCH_MAX}\r\n\r\n".encode() + b" " * (BATCH_MAX - 1))
        except ConnectionError:
            pass  # refused while it was sent: overload sees it answered or closed
    return hogs


def refused(url: str, api_key: str) -> bool:
    """refused tells whether the server refuses a small write with overloaded."""
    r = httpx.post(f"{url}/v1/namespaces/{NS}/players/1/transactions", content=b'{"idempotency_key": ""}',
                   headers={"Authorization": f"Bearer {api_key}"})
    return r.status_code == 503 and r.json()["code"] == "overloaded"


def overload(url: str, api_key: str) -> list[socket.socket]:
    """overload holds the budget until the server refuses a small write. A
    probe holds its few bytes while it is served: if a hog's last bytes
    arrive then, the server refuses that hog (it answers it, or closes it),
    and the hogs are sent again."""
    deadline = time.monotonic() + WAIT_MAX
    while time.monotonic() < deadline:
        hogs = hold_budget(url, api_key)
        while time.monotonic() < deadline and not select.select(hogs, [], [], 0)[0]:
            if refused(url, api_key):
                return hogs
            time.sleep(0.05)
        release(hogs)
    raise AssertionError(f"the server was not overloaded in {WAIT_MAX} s")


def served(url: str, api_key: str) -> None:
    """served waits for the server to serve a small write again: it gives
    back the hogs' bytes as they go."""
    deadline = time.monotonic() + WAIT_MAX
    while time.monotonic() < deadline:
        if not refused(url, api_key):
            return
        time.sleep(0.05)
    raise AssertionError(f"the server was still overloaded after {WAIT_MAX} s")


def release(hogs: list[socket.socket]) -> None:
    for s in hogs:
        s.close()
    hogs.clear()


def test_retry_overloaded_with_the_same_key(server, player):
    url, api_key = server
    hogs = overload(url, api_key)
    waits = []

    def sleep(seconds: float) -> None:
        # The first refusal: let the hogs go, then the retry can pass.
        waits.append(seconds)
        if hogs:
            release(hogs)
            served(url, api_key)

    try:
        grant = coffer.Change(key("retried"), [coffer.Op("gold", 40)])
        with coffer.Client(url, api_key, sleep=sleep) as c:
            trx = c.change(NS, player, grant)
            assert waits == [1.0], "one refusal, waited for its Retry-After"
            assert trx.status == "committed" and not trx.replay
            assert c.change(NS, player, grant).id == trx.id
            assert c.balances(NS, player).total("gold") == 40
    finally:
        release(hogs)


def test_retries_are_bounded(server, player):
    url, api_key = server
    hogs = overload(url, api_key)
    waits = []
    try:
        with coffer.Client(url, api_key, retries=2, sleep=waits.append) as c:
            try:
                c.change(NS, player, coffer.Change(key("refused"), [coffer.Op("gold", 1)]))
                raise AssertionError("an overloaded server accepted the write")
            except coffer.CofferError as err:
                assert (err.code, err.status, err.retry_after, err.retryable) == ("overloaded", 503, 1.0, True)
        assert waits == [1.0, 1.0]
    finally:
        release(hogs)
    served(url, api_key)
