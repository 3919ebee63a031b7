"""The tests run against a real coffer (TestClients in cmd/coffer starts
`coffer dev` and passes its address and key in COFFER_URL and
COFFER_API_KEY)."""

import os
import random
import uuid

import pytest

import coffer


@pytest.fixture(scope="session")
def server() -> tuple[str, str]:
    url, key = os.environ.get("COFFER_URL"), os.environ.get("COFFER_API_KEY")
    if not url or not key:
        pytest.fail("COFFER_URL and COFFER_API_KEY name the coffer to test (TestClients in cmd/coffer sets them)")
    return url, key


@pytest.fixture
def client(server):
    with coffer.Client(*server) as c:
        yield c


@pytest.fixture
def player() -> int:
    """player is a new player: the stack is shared with the other client's tests."""
    return random.randint(1, 2**53)


def key(what: str) -> str:
    return f"{what}-{uuid.uuid4()}"
