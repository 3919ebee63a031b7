"""The requests coffer takes and the answers it gives, as dataclasses.

Field names are the API's (docs/api.md), except where the API's name is a
Python keyword: an exchange's `from` and `to` are `from_currency` and
`to_currency`. Answers are frozen; a field the server left out (a zero, an
empty list) has its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Requests.


@dataclass
class Purchase:
    """Purchase is the store order a paid grant credits (docs/api.md, Store orders)."""

    store: str
    order_id: str
    price: int
    fiat: str


@dataclass
class Op:
    """Op is one op of a change as sent: amount > 0 grants, < 0 consumes."""

    currency: str
    amount: int
    kind: str | None = None  # "free" (the default) or "paid", for grants
    expires_at: datetime | None = None
    priority: int | None = None
    purchase: Purchase | None = None


@dataclass
class Change:
    """Change is a one-phase change, or the begin of a hold with hold=True."""

    idempotency_key: str
    ops: list[Op]
    reason: str | None = None
    meta: dict[str, Any] | None = None
    hold: bool = False
    hold_ttl_seconds: int | None = None


@dataclass(kw_only=True)
class BatchChange(Change):
    """BatchChange is one change of a batch, with the player it is for."""

    player_id: int


@dataclass
class Exchange:
    """Exchange consumes amount of from_currency and grants to_currency at the namespace's rate."""

    idempotency_key: str
    from_currency: str = field(metadata={"json": "from"})
    amount: int
    to_currency: str = field(metadata={"json": "to"})
    reason: str | None = None
    meta: dict[str, Any] | None = None


@dataclass
class Refund:
    """Refund takes back a store order credited to the player; kind is "refund" or "chargeback"."""

    idempotency_key: str
    store: str
    order_id: str
    kind: str
    reason: str | None = None


# Answers.


@dataclass(frozen=True)
class Money:
    """Money is an amount in minor units of an ISO 4217 fiat currency."""

    amount: int = 0
    fiat: str = ""


@dataclass(frozen=True)
class TrxOp:
    """TrxOp is one movement on one lot inside a trx."""

    currency: str = ""
    amount: int = 0
    kind: str = ""  # grant, consume or expire
    cause: str = ""
    paid: bool = False
    lot_id: int = 0
    balance_after: int = 0
    pending: bool = False
    purchase: Purchase | None = None
    value: Money | None = None


@dataclass(frozen=True)
class Lot:
    """Lot is one balance row of a player (balances with lots=True)."""

    id: int = 0
    currency: str = ""
    amount: int = 0
    paid: bool = False
    priority: int = 0
    expires_at: datetime | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Balance:
    """Balance is a player's balance in one currency."""

    currency: str = ""
    total: int = 0
    paid: int = 0
    free: int = 0
    lots: list[Lot] = field(default_factory=list)


@dataclass(frozen=True)
class Balances:
    """Balances is a player's balances in a namespace, now or at a past time."""

    namespace: int = 0
    player_id: int = 0
    version: int = 0
    balances: list[Balance] = field(default_factory=list)
    at: datetime | None = None

    def total(self, currency: str) -> int:
        """total is the player's total in currency, 0 when it holds none."""
        return next((b.total for b in self.balances if b.currency == currency), 0)


@dataclass(frozen=True)
class RefundAmount:
    """RefundAmount is an amount of a currency a refund counts, and what it cost."""

    currency: str = ""
    amount: int = 0
    value: int = 0


@dataclass(frozen=True)
class TrxRefund:
    """TrxRefund is what a refund trx took back, and what it could not."""

    store: str = ""
    order_id: str = ""
    kind: str = ""
    exchanged: list[RefundAmount] = field(default_factory=list)
    shortfall: list[RefundAmount] = field(default_factory=list)


@dataclass(frozen=True)
class Trx:
    """Trx is one accepted request. replay is not in the body: it is True when
    the answer is the original result of an earlier request with the same key."""

    id: int = 0
    idempotency_key: str = ""
    emitter: int = 0  # of the client that wrote it, whose key it is; 0 for coffer's expiries
    kind: str = ""  # change, hold, exchange, expire or refund
    status: str = ""  # committed, pending, rolled_back or expired
    reason: str = ""
    meta: dict[str, Any] | None = None
    ops: list[TrxOp] = field(default_factory=list)
    created_at: datetime | None = None
    hold_expires_at: datetime | None = None
    refund: TrxRefund | None = None
    # of the client that committed or rolled back a hold (its own, or a
    # support agent's); 0 while pending, and when coffer expired it
    finished_by: int = 0
    balances: list[Balance] = field(default_factory=list)
    version: int = 0
    replay: bool = field(default=False, metadata={"wire": False})


@dataclass(frozen=True)
class FinlogPage:
    """FinlogPage is a page of a player's finlog; next_cursor is "" on the last page."""

    items: list[Trx] = field(default_factory=list)
    next_cursor: str = ""


@dataclass(frozen=True)
class OrderClaim:
    """OrderClaim is who presented a store order first: the player it was
    credited to, and the client (emitter) and idempotency key of the request."""

    namespace: int = 0
    store: str = ""
    order_id: str = ""
    player_id: int = 0
    emitter: int = 0
    idempotency_key: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class RevenueLine:
    """RevenueLine is the revenue report's line of one currency and fiat (docs/ledger.md)."""

    currency: str = ""
    fiat: str = ""
    opening: int = 0
    opening_value: int = 0
    deposited: int = 0
    deposited_value: int = 0
    recognised: int = 0
    recognised_value: int = 0
    converted_in: int = 0
    converted_in_value: int = 0
    converted_out: int = 0
    converted_out_value: int = 0
    expired: int = 0
    expired_value: int = 0
    refunded: int = 0
    refunded_value: int = 0
    refund_shortfall: int = 0
    refund_shortfall_value: int = 0
    deferred: int = 0
    deferred_value: int = 0
