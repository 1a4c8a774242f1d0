"""Budget status, policy, introspection, configuration and provider settings."""

from __future__ import annotations

from typing import Tuple

import pytest

from spendgate import Spendgate
from spendgate.errors import AuthenticationRequiredError, UnauthorizedError

from .support import Dashboard, Server


def test_budget_status_shows_the_keys_budget(
        client: Spendgate, owner: Dashboard, key: Tuple[str, str]) -> None:
    r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key[0],
                                              "maxBudgetMicrodollars": 5_000_000})
    assert r.status_code == 201, r.text
    entities = {(e.entity_type, e.entity_id): e for e in client.budget_status()}
    mine = entities[("api_key", key[0])]
    assert mine.limit_microdollars == 5_000_000
    assert mine.remaining_microdollars == 5_000_000 - mine.spend_microdollars
    assert mine.policy == "strict_block"


def test_policy_names_the_cheapest_model_per_provider(client: Spendgate) -> None:
    p = client.policy()
    assert {"openai", "anthropic"} <= set(p.cheapest_per_provider)
    assert p.cheapest_per_provider["openai"].model
    assert p.cheapest_overall is not None and p.cheapest_overall.provider in p.cheapest_per_provider
    assert p.restrictions_active is False


def test_introspect_names_the_user(client: Spendgate) -> None:
    me = client.introspect()
    # The suite's server runs in development mode, where the key id reads "dev".
    assert (me.key_id, me.dev) == ("dev", True) and me.user_id.startswith("svc_usr_")


def test_settings_come_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, server: Server, key: Tuple[str, str]) -> None:
    monkeypatch.setenv("SPENDGATE_API_KEY", key[1])
    monkeypatch.setenv("SPENDGATE_BASE_URL", server.control + "/")
    monkeypatch.setenv("SPENDGATE_PROXY_URL", server.proxy)
    with Spendgate() as c:
        assert c.introspect().user_id.startswith("svc_usr_")
        assert c.settings.base_url == server.control
        assert c.openai_settings().base_url == server.proxy + "/v1"
        assert c.anthropic_settings().base_url == server.proxy
        assert c.openai_settings().default_headers == {"X-Service-Key": key[1]}


def test_missing_or_provider_key_is_refused_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPENDGATE_API_KEY", raising=False)
    with pytest.raises(ValueError, match="SPENDGATE_API_KEY"):
        Spendgate()
    with pytest.raises(ValueError, match="not a spendgate key"):
        Spendgate("sk-proj-abc")


def test_a_wrong_key_is_authentication_required_on_the_control_plane_and_unauthorized_on_the_proxy(
        server: Server) -> None:
    with Spendgate("svc_live_sk_" + "0" * 32, base_url=server.control, proxy_url=server.proxy) as c:
        with pytest.raises(AuthenticationRequiredError) as control:
            c.introspect()
        with pytest.raises(UnauthorizedError) as proxy:
            c.policy()
    assert control.value.status == proxy.value.status == 401
