"""The admin API under /_emulator/: request log, ledger, accounts, clock, faults."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import httpx
from emulator_http import bearer, user_chat

from relaybatch.emulator import EmulatorState


async def test_request_log_counts_each_distinct_body(http: httpx.AsyncClient, state: EmulatorState) -> None:
    body = json.dumps(user_chat()).encode()
    for _ in range(3):
        await http.post("/v1/chat/completions", content=body, headers=bearer())
    await http.post("/v1/chat/completions", json=user_chat(text="other"), headers=bearer())

    log = (await http.get("/_emulator/requests")).json()

    assert log["total"] == 4
    counts = {(row["path"], row["body_hash"]): row["count"] for row in log["distinct"]}
    assert counts[("/v1/chat/completions", hashlib.sha256(body).hexdigest())] == 3
    assert sorted(counts.values()) == [1, 3]
    assert log["recent"][0]["account"] == "demo"
    assert state.request_count("POST", "/v1/chat/completions", body) == 3
    assert state.total_requests == 4


async def test_admin_requests_are_not_logged_or_limited(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    for _ in range(10):
        await http.get("/_emulator/requests")

    assert state.total_requests == 0


async def test_ledger_filters_by_account_and_totals(http: httpx.AsyncClient) -> None:
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer("rb-standard-key"))

    demo = (await http.get("/_emulator/ledger?account=demo")).json()
    everyone = (await http.get("/_emulator/ledger")).json()

    assert [c["account"] for c in demo["charges"]] == ["demo"]
    assert len(everyone["charges"]) == 2
    assert everyone["total_usd"] == str(sum(Decimal(c["usd"]) for c in everyone["charges"]))


async def test_top_up_adds_to_the_balance(http: httpx.AsyncClient) -> None:
    response = await http.post("/_emulator/accounts/empty/balance", json={"usd": "2.50"})

    assert response.json() == {"name": "empty", "balance_usd": "2.50", "rate_limit_rpm": 0}
    accounts = (await http.get("/_emulator/accounts")).json()["accounts"]
    assert {"name": "empty", "balance_usd": "2.50", "rate_limit_rpm": 0} in accounts


async def test_top_up_errors(http: httpx.AsyncClient) -> None:
    assert (await http.post("/_emulator/accounts/nobody/balance", json={"usd": "1"})).status_code == 404
    assert (await http.post("/_emulator/accounts/demo/balance", json={"usd": "lots"})).status_code == 400
    assert (await http.post("/_emulator/accounts/demo/balance", content=b"[")).status_code == 400


async def test_clock_advance_moves_the_emulator_clock(http: httpx.AsyncClient) -> None:
    before = (await http.get("/_emulator/clock")).json()

    after = (await http.post("/_emulator/clock/advance", json={"seconds": 90})).json()

    assert after["now"] == before["now"] + 90
    assert after["iso"] == "2027-01-15T08:01:30Z"
    assert (await http.post("/_emulator/clock/advance", json={"seconds": -1})).status_code == 400


async def test_clock_advance_refuses_a_step_no_timestamp_can_show(http: httpx.AsyncClient) -> None:
    before = (await http.get("/_emulator/clock")).json()

    for body in (b'{"seconds": 251606816384.0}', b'{"seconds": Infinity}', b'{"seconds": NaN}'):
        response = await http.post("/_emulator/clock/advance", content=body)
        assert response.status_code == 400, body
        assert "seconds" in response.json()["error"]["message"]

    assert (await http.get("/_emulator/clock")).json() == before  # a refused step moves nothing


async def test_faults_settings_round_trip(http: httpx.AsyncClient) -> None:
    settings = {
        "seed": 3,
        "rules": [{"fault": "drop=after", "rate": 0.1, "every": 0, "at": [], "paths": ["/v1/"]}],
    }

    await http.put("/_emulator/faults", json=settings)

    assert (await http.get("/_emulator/faults")).json() == settings


async def test_request_log_since_a_time_gives_later_entries_with_their_status(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())
    first = (await http.get("/_emulator/requests")).json()["recent"][0]
    state.clock.advance(5)
    await http.post("/v1/chat/completions", json=user_chat(text="later"), headers=bearer())
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer("rb-revoked-key"))

    later = (await http.get(f"/_emulator/requests?since={first['at']}&distinct=false")).json()

    assert "distinct" not in later and later["total"] == 3
    assert [entry["status"] for entry in later["recent"]] == [200, 401]
    assert all(entry["at"] == first["at"] + 5 for entry in later["recent"])
    assert first["status"] == 200
    for query in ("since=yesterday", "distinct=no"):
        refused = await http.get(f"/_emulator/requests?{query}")
        assert refused.status_code == 400 and query.split("=")[0] in refused.json()["error"]["message"]
