"""The web-search routes over raw HTTP: shapes, the flat error envelope, the per-request price."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest

from relaybatch.emulator import EmulatorState
from tests.emulator.emulator_http import EMPTY_KEY, REVOKED_KEY, AppFactory, bearer

SEARCH_ROUTES = ("search", "simple-search", "search-news")


def search_charges(state: EmulatorState) -> list[Decimal]:
    return [charge.usd for charge in state.ledger if charge.route.startswith("/v1/websearch/")]


@pytest.mark.parametrize("route", SEARCH_ROUTES)
async def test_search_shapes(http: httpx.AsyncClient, route: str) -> None:
    response = await http.get(f"/v1/websearch/{route}", params={"q": "tide tables"}, headers=bearer())
    assert response.status_code == 200
    document = response.json()
    assert (document["code"], document["message"]) == (200, "ok")
    assert isinstance(document["took_ms"], int) and document["took_ms"] > 0
    organic = document["data"]["organic"]
    assert len(organic) == 5
    for result in organic:
        assert {"title", "link", "snippet"} <= set(result)
        assert result["link"].startswith("https://")
        if route == "simple-search":
            assert "contexts" not in result
        else:
            assert [context["idx"] for context in result["contexts"]] == [0, 1]
            assert all(isinstance(context["text"], str) for context in result["contexts"])


async def test_simple_search_reports_about_one_second(http: httpx.AsyncClient) -> None:
    simple = await http.get("/v1/websearch/simple-search", params={"q": "x"}, headers=bearer())
    deep = await http.get("/v1/websearch/search", params={"q": "x"}, headers=bearer())
    assert simple.json()["took_ms"] < 1_500 <= 3_000 <= deep.json()["took_ms"] <= 15_000


async def test_num_and_determinism(http: httpx.AsyncClient) -> None:
    one = await http.get("/v1/websearch/search", params={"q": "tides", "num": "2"}, headers=bearer())
    again = await http.get("/v1/websearch/search", params={"q": "tides", "num": "2"}, headers=bearer())
    assert len(one.json()["data"]["organic"]) == 2
    assert one.json() == again.json()


async def test_reader_returns_markdown(http: httpx.AsyncClient) -> None:
    response = await http.get(
        "/v1/websearch/reader", params={"url": "https://example.com/docs/page"}, headers=bearer()
    )
    assert response.status_code == 200
    document = response.json()
    assert (document["code"], document["message"]) == (200, "success")
    assert document["content"].startswith("# page") and "https://example.com/docs/page" in document["content"]


@pytest.mark.parametrize(
    ("route", "params"),
    [
        ("search", {}),
        ("simple-search", {"q": "  "}),
        ("search-news", {"query": "x"}),
        ("search", {"q": "x", "num": "0"}),
        ("search", {"q": "x", "num": "lots"}),
        ("reader", {}),
        ("reader", {"url": "not a url"}),
        ("reader", {"url": "ftp://example.com/file"}),
    ],
)
async def test_bad_queries_are_flat_400_and_free(
    http: httpx.AsyncClient, state: EmulatorState, route: str, params: dict[str, str]
) -> None:
    response = await http.get(f"/v1/websearch/{route}", params=params, headers=bearer())
    assert response.status_code == 400
    document = response.json()
    assert set(document) == {"code", "message"} and document["code"] == 400
    assert search_charges(state) == []


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (bearer("rb-nobody"), 401), (bearer(REVOKED_KEY), 403), (bearer(EMPTY_KEY), 403)],
)
async def test_auth_and_balance_errors_are_flat(
    http: httpx.AsyncClient, state: EmulatorState, headers: dict[str, str], status: int
) -> None:
    response = await http.get("/v1/websearch/search", params={"q": "x"}, headers=headers)
    assert response.status_code == status
    assert response.json()["code"] == status and isinstance(response.json()["message"], str)
    assert search_charges(state) == []


async def test_each_successful_request_costs_five_cents(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    for route in (*SEARCH_ROUTES, "reader"):
        params = {"url": "https://example.com"} if route == "reader" else {"q": "x"}
        assert (await http.get(f"/v1/websearch/{route}", params=params, headers=bearer())).status_code == 200
    assert search_charges(state) == [Decimal("0.05")] * 4
    assert {charge.model for charge in state.ledger} == {"relay-websearch"}


async def test_rate_limited_search_is_a_flat_error(http: httpx.AsyncClient, state: EmulatorState) -> None:
    headers = bearer("rb-limited-key")  # 6 requests per minute
    statuses = [
        (await http.get("/v1/websearch/simple-search", params={"q": "x"}, headers=headers)).status_code
        for _ in range(8)
    ]
    assert statuses[:6] == [200] * 6
    limited = await http.get("/v1/websearch/simple-search", params={"q": "x"}, headers=headers)
    assert limited.status_code in (429, 503)
    assert set(limited.json()) == {"code", "message"}
    assert len(search_charges(state)) == 6


async def test_wrong_method_is_405(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/websearch/search", params={"q": "x"}, headers=bearer())
    assert response.status_code == 405
    assert response.json()["code"] == 405


async def test_search_upstream_limit_is_503_with_retry_after(make_app: AppFactory) -> None:
    app = make_app({"search": {"upstream_rpm": 2}})
    state: EmulatorState = app.state.emulator
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as http:

        async def search() -> httpx.Response:
            return await http.get("/v1/websearch/search", params={"q": "x"}, headers=bearer())

        assert [(await search()).status_code for _ in range(2)] == [200, 200]
        await http.post("/_emulator/clock/advance", json={"seconds": 20})
        busy = await search()
        assert busy.status_code == 503
        assert busy.json() == {"code": 503, "message": busy.json()["message"]}
        assert busy.headers["retry-after"] == "40"
        assert len(search_charges(state)) == 2  # refused calls are free
        await http.post("/_emulator/clock/advance", json={"seconds": 40})
        assert (await search()).status_code == 200
