"""Fault injection: per-request header and configured rules (rate, every Nth, given numbers)."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from emulator_http import bearer, goog, user_chat, user_contents
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorConfig, EmulatorState, create_app
from relaybatch.emulator import middleware as gateway_middleware
from relaybatch.emulator.config import FaultRule, FaultsConfig


def faulty(fault: str) -> dict[str, str]:
    return {**bearer(), "x-emulator-fault": fault}


async def chat(http: httpx.AsyncClient, headers: dict[str, str] | None = None) -> httpx.Response:
    return await http.post("/v1/chat/completions", json=user_chat(), headers=headers or bearer())


@pytest.mark.parametrize(
    ("status", "error_type"), [(500, "api_error"), (529, "overloaded_error"), (503, "api_error")]
)
async def test_status_faults_answer_the_error_without_processing(
    http: httpx.AsyncClient, state: EmulatorState, status: int, error_type: str
) -> None:
    response = await chat(http, faulty(f"status={status}"))

    assert response.status_code == status
    assert response.json()["error"]["type"] == error_type
    assert response.json()["error"]["code"] == str(status)
    assert state.ledger == []


async def test_injected_429_reports_a_rate_limit(http: httpx.AsyncClient) -> None:
    response = await chat(http, faulty("status=429"))

    assert response.status_code == 429
    assert response.json()["error"]["rate_limit"] == {"rpm": 120, "qps": 2.0}


async def test_injected_fault_on_generate_content_uses_its_shape(http: httpx.AsyncClient) -> None:
    headers = {**goog(), "x-emulator-fault": "status=429"}

    response = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json=user_contents(), headers=headers
    )

    assert response.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


async def test_drop_before_breaks_the_connection_and_charges_nothing(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    with pytest.raises(httpx.TransportError):
        await chat(http, faulty("drop=before"))

    assert state.ledger == []
    assert state.total_requests == 1


async def test_drop_after_charges_but_the_client_sees_a_broken_connection(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    with pytest.raises(httpx.TransportError):
        await chat(http, faulty("drop=after"))

    [charge] = state.ledger
    assert charge.usd > 0
    assert state.accounts["demo"].balance == Decimal("100.00") - charge.usd


async def test_truncate_sends_half_the_body(http: httpx.AsyncClient) -> None:
    whole = await chat(http)

    cut = await chat(http, faulty("truncate"))

    assert cut.status_code == 200
    assert cut.content == whole.content[: len(whole.content) // 2]
    with pytest.raises(ValueError):
        cut.json()


async def test_latency_waits_then_answers(http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(gateway_middleware, "sleep", record)

    response = await chat(http, faulty("latency=0.3; status=500"))

    assert waits == [0.3]
    assert response.status_code == 500


@pytest.mark.parametrize("fault", ["status=200", "latency=-1", "drop=sideways", "explode"])
async def test_bad_fault_header_is_400(http: httpx.AsyncClient, fault: str) -> None:
    response = await chat(http, faulty(fault))

    assert response.status_code == 400
    assert "x-emulator-fault" in response.json()["error"]["message"]


def app_with(shipped_config: EmulatorConfig, *rules: FaultRule, seed: int = 0) -> Starlette:
    return create_app(
        shipped_config.model_copy(update={"faults": FaultsConfig(seed=seed, rules=list(rules))})
    )


async def statuses(app: Starlette, count: int, path: str = "/v1/chat/completions") -> list[int]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as client:
        return [
            (await client.post(path, json=user_chat(), headers=bearer())).status_code for _ in range(count)
        ]


async def test_rule_every_nth_request(shipped_config: EmulatorConfig) -> None:
    app = app_with(shipped_config, FaultRule(fault="status=529", every=3))

    assert await statuses(app, 7) == [200, 200, 529, 200, 200, 529, 200]


async def test_rule_at_given_request_numbers(shipped_config: EmulatorConfig) -> None:
    app = app_with(shipped_config, FaultRule(fault="status=500", at=[2, 4]))

    assert await statuses(app, 5) == [200, 500, 200, 500, 200]


async def test_rule_at_a_rate_is_seeded_and_repeatable(shipped_config: EmulatorConfig) -> None:
    rule = FaultRule(fault="status=429", rate=0.5)

    first = await statuses(app_with(shipped_config, rule, seed=7), 30)
    second = await statuses(app_with(shipped_config, rule, seed=7), 30)

    assert first == second
    assert 5 < first.count(429) < 25


async def test_rule_only_hits_its_paths(shipped_config: EmulatorConfig) -> None:
    app = app_with(shipped_config, FaultRule(fault="status=500", every=1, paths=["/v1/messages"]))

    assert await statuses(app, 3) == [200, 200, 200]


async def test_faults_can_be_changed_at_run_time(http: httpx.AsyncClient) -> None:
    rules = {"seed": 1, "rules": [{"fault": "status=529", "every": 2}]}

    put = await http.put("/_emulator/faults", json=rules)

    assert put.json()["rules"][0]["fault"] == "status=529"
    assert [(await chat(http)).status_code for _ in range(4)] == [200, 529, 200, 529]
    assert (await http.put("/_emulator/faults", json={"rules": [{"fault": "boom"}]})).status_code == 400
    await http.put("/_emulator/faults", json={"rules": []})
    assert (await chat(http)).status_code == 200


async def test_faults_apply_to_streams_too(http: httpx.AsyncClient, state: EmulatorState) -> None:
    request = user_chat(stream=True)
    whole = await http.post("/v1/chat/completions", json=request, headers=bearer())

    cut = await http.post("/v1/chat/completions", json=request, headers=faulty("truncate"))
    with pytest.raises(httpx.TransportError):
        await http.post("/v1/chat/completions", json=request, headers=faulty("drop=after"))

    assert cut.content == whole.content[: len(whole.content) // 2]
    assert len(state.ledger) == 3
