"""The models are written by hand (docs/adr): each holds every field the
server's OpenAPI document gives its schema, so that a field added to the
API without the client fails here instead of being dropped silently."""

import dataclasses

import httpx
import pytest

import coffer

# The document's schema of each model, and the fields of the schema the
# model leaves out on purpose: the path's ids, which are arguments.
MODELS = {
    "Purchase": (coffer.Purchase, set()),
    "OpRequest": (coffer.Op, set()),
    "ChangeRequest": (coffer.Change, {"namespace", "player_id"}),
    "BatchChange": (coffer.BatchChange, set()),
    "ExchangeRequest": (coffer.Exchange, {"namespace", "player_id"}),
    "RefundRequest": (coffer.Refund, {"namespace", "player_id"}),
    "Money": (coffer.Money, set()),
    "Op": (coffer.TrxOp, set()),
    "Lot": (coffer.Lot, set()),
    "Balance": (coffer.Balance, set()),
    "Balances": (coffer.Balances, set()),
    "RefundAmount": (coffer.RefundAmount, set()),
    "Refund": (coffer.TrxRefund, set()),
    "Trx": (coffer.Trx, set()),
    "FinlogPage": (coffer.FinlogPage, set()),
    "OrderClaim": (coffer.OrderClaim, set()),
    "RevenueLine": (coffer.RevenueLine, set()),
}


@pytest.fixture(scope="module")
def document(server):
    return httpx.get(server[0] + "/openapi.json").raise_for_status().json()


@pytest.mark.parametrize("schema", sorted(MODELS))
def test_models_hold_the_documents_fields(document, schema):
    model, left_out = MODELS[schema]
    names = {f.metadata.get("json", f.name) for f in dataclasses.fields(model) if f.metadata.get("wire", True)}
    documented = set(document["components"]["schemas"][schema]["properties"]) - left_out
    assert names == documented, f"{model.__name__} differs from the document's {schema}"
