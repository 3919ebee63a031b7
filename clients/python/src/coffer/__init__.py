"""coffer: the Python client of coffer's HTTP/JSON API (docs/clients.md).

    import coffer
    with coffer.Client("http://127.0.0.1:8080", api_key) as c:
        trx = c.change(1, 42, coffer.Change("welcome-42", [coffer.Op("gold", 100)], reason="welcome"))
"""

from ._client import AsyncClient, BatchResult, Client
from ._errors import RETRYABLE, CofferError, UnexpectedAnswer
from ._models import (Balance, Balances, BatchChange, Change, Exchange, FinlogPage, Lot, Money, Op, OrderClaim,
                      Purchase, Refund, RefundAmount, RevenueLine, Trx, TrxOp, TrxRefund)

__all__ = [
    "AsyncClient", "Balance", "Balances", "BatchChange", "BatchResult", "Change", "Client", "CofferError",
    "Exchange", "FinlogPage", "Lot", "Money", "Op", "OrderClaim", "Purchase", "RETRYABLE", "Refund", "RefundAmount",
    "RevenueLine", "Trx", "TrxOp", "TrxRefund", "UnexpectedAnswer",
]
