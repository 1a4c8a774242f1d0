"""Fixtures: one spendgate server and one signed-in owner for the whole run."""

from __future__ import annotations

import uuid
from typing import Iterator, Tuple

import pytest

from spendgate import Spendgate

from .support import Dashboard, Server


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def owner(server: Server) -> Dashboard:
    return Dashboard(server, "owner@example.com")


@pytest.fixture(scope="session")
def key(owner: Dashboard) -> Tuple[str, str]:
    return owner.create_key("sdk-tests")


@pytest.fixture()
def client(server: Server, key: Tuple[str, str]) -> Iterator[Spendgate]:
    with Spendgate(key[1], base_url=server.control, proxy_url=server.proxy, max_retry_delay=2) as c:
        yield c


@pytest.fixture()
def run_id() -> str:
    return uuid.uuid4().hex[:12]
