"""The spend guard on its own: worst cases, outcome-unknown settles, missing prices, budgets, exports."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from relaybatch.cost_model import Budgets, PriceBook, PricingError, parse_pricing
from relaybatch.cost_model.worst_case import DEFAULT_OUTPUT_TOKEN_CAP, request_bytes, worst_case_usd
from relaybatch.costs import CostStore, budgets_from_manifest, open_spend_guard
from relaybatch.gateway import Conflict, NotFound, ServerError

D = Decimal
CHAT = {
    "data": {
        "id": "chat-model",
        "pricing": {
            "kind": "token",
            "text": {"prompt": "0.000001", "completion": "0.000004"},
            "cache": {"read": "0.0000001", "write": "0.00000125"},
        },
    }
}


@dataclass
class FakeCall:
    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]
    attempt: int = 1


@dataclass
class FakePricingClient:
    answers: dict[str, Any]
    asked: list[tuple[str, str | None]] = field(default_factory=list)

    async def get_pricing(self, model: str, provider: str | None = None) -> Any:
        self.asked.append((model, provider))
        answer = self.answers[model]
        if isinstance(answer, Exception):
            raise answer
        return answer


def chat_request(text: str = "hello", max_tokens: int | None = 100) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "chat-model", "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    return request


def test_worst_case_of_a_chat_call_is_body_bytes_at_the_dearest_input_rate_plus_the_cap() -> None:
    request = chat_request()
    prices = parse_pricing(CHAT)
    # Dearest input rate is the cache write (0.00000125); output 100 x 0.000004 = 0.0004.
    expected = request_bytes(request) * D("0.00000125") + 100 * D("0.000004")
    assert worst_case_usd("chat", request, prices) == expected


def test_worst_case_without_a_cap_assumes_the_default_cap() -> None:
    request = chat_request(max_tokens=None)
    expected = request_bytes(request) * D("0.00000125") + DEFAULT_OUTPUT_TOKEN_CAP * D("0.000004")
    assert worst_case_usd("chat", request, parse_pricing(CHAT)) == expected


def test_worst_case_of_media_judgment_and_search() -> None:
    video = parse_pricing(
        {"data": {"pricing": {"kind": "generation", "generation": {"video": {"per_second": "0.1"}}}}}
    )
    assert worst_case_usd("video", {"seconds": "8"}, video) == D("0.8")
    assert worst_case_usd("video", {}, video) == D("0.4")  # V2 default 4 s
    assert worst_case_usd("video_v1", {}, video) == D("0.5")  # V1 default 5 s
    per_image = parse_pricing(
        {"data": {"pricing": {"kind": "generation", "generation": {"image": {"per_image": "0.04"}}}}}
    )
    assert worst_case_usd("image", {"n": 3}, per_image) == D("0.12")
    judged = {"model": "judge", "state": "x", "questions": {}}
    assert worst_case_usd("judgment", judged, None) == request_bytes(judged) * D("0.000000042")
    assert worst_case_usd("web_search", {"q": "x"}, None) == D("0.05")
    assert worst_case_usd("chat", chat_request(), None) is None


def test_token_priced_image_worst_case_bounds_the_emulator_table() -> None:
    prices = parse_pricing(
        {"data": {"pricing": {"text": {"prompt": "0.000005"}, "multimodal": {"output_image": "0.00004"}}}}
    )
    request = {"prompt": "a red square", "size": "1024x1024", "quality": "high", "n": 2}
    bound = worst_case_usd("image", request, prices)
    actual = 2 * 4160 * D("0.00004") + 3 * D("0.000005")  # two high 1024x1024 images, 3 prompt tokens
    assert bound is not None and bound >= actual


async def test_a_409_names_the_job_and_candidates(tmp_path: Path) -> None:
    conflict = Conflict(
        409, None, "different prices", body={"error": {"message": "providers with different prices (a, b)"}}
    )
    client = FakePricingClient({"chat-model": conflict})
    with pytest.raises(PricingError, match=r"set `provider` on job 'summaries' \(candidates: a, b\)"):
        await open_spend_guard(tmp_path, client, [("summaries", "chat", "chat-model")])


async def test_a_model_without_a_price_is_recorded_unknown_and_refused_under_a_budget(tmp_path: Path) -> None:
    client = FakePricingClient({"chat-model": NotFound(404, "not_found_error", "no pricing")})
    guard = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")])
    call = FakeCall("k1", "i1", "job", "chat", chat_request())
    assert guard.reserve(call)
    result = {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    assert guard.settle(call, result) is None
    guard.commit()
    row = next(iter(guard.store.records()))
    assert row["priced"] == 0 and row["usd"] is None
    assert row["unknown_prices"] == "text.prompt,text.completion"
    guard.close()

    limited = await open_spend_guard(
        tmp_path, client, [("job", "chat", "chat-model")], budgets=Budgets(run_usd=D(1))
    )
    unbounded = FakeCall("k2", "i2", "job", "chat", chat_request())
    assert not limited.reserve(unbounded)
    refused = limited.refusal(unbounded)
    assert "cannot be bounded" in refused.message and refused.job is None and not refused.may_fit_later
    limited.close()


async def test_other_pricing_failures_are_clear_errors(tmp_path: Path) -> None:
    client = FakePricingClient({"chat-model": ServerError(500, "api_error", "boom")})
    with pytest.raises(PricingError, match="could not fetch the price of model 'chat-model'"):
        await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")])


async def test_outcome_unknown_keeps_the_worst_case_in_the_budget_even_after_a_restart(
    tmp_path: Path,
) -> None:
    client = FakePricingClient({"chat-model": CHAT})
    budgets = Budgets(run_usd=D("0.001"))
    guard = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")], budgets=budgets)
    call = FakeCall("k1", "i1", "job", "chat", chat_request())
    worst = worst_case_usd("chat", call.request, parse_pricing(CHAT))
    assert worst is not None
    assert guard.reserve(call)
    assert guard.settle(call, None) is None
    assert guard.budget.spent == worst
    guard.commit()
    row = next(iter(guard.store.records()))
    assert row["outcome"] == "unknown" and D(row["reserved_usd"]) == worst
    guard.close()

    resumed = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")], budgets=budgets)
    assert resumed.budget.spent == worst
    assert client.asked == [("chat-model", None)]  # prices came from the run's own store the second time
    resumed.close()


async def test_release_gives_the_reservation_back(tmp_path: Path) -> None:
    client = FakePricingClient({"chat-model": CHAT})
    guard = await open_spend_guard(
        tmp_path, client, [("job", "chat", "chat-model")], budgets=Budgets(job_usd={"job": D("0.0006")})
    )
    first = FakeCall("k1", "i1", "job", "chat", chat_request())
    second = FakeCall("k2", "i2", "job", "chat", chat_request())
    assert guard.reserve(first)
    assert not guard.reserve(second)
    refused = guard.refusal(second)  # the job's own budget: only that job holds
    assert refused.job == "job" and "job job budget of 0.0006 USD" in refused.message
    assert refused.may_fit_later  # only the first call, in flight, stands in the way
    guard.sending(first)  # its limiter token taken: it is about to leave
    guard.commit()  # the first reservation is durable (as when the engine marks the item sending)
    assert [row["outcome"] for row in CostStore(tmp_path / "costs.sqlite").records()] == ["reserved"]
    guard.release(first)
    assert guard.reserve(second)
    guard.release(second)  # released before its reservation was ever committed
    guard.close()
    assert list(CostStore(tmp_path / "costs.sqlite").records()) == []


async def test_a_reservation_left_by_a_crash_is_an_unknown_outcome_at_its_worst_case(tmp_path: Path) -> None:
    client = FakePricingClient({"chat-model": CHAT})
    budgets = Budgets(run_usd=D("1"))
    guard = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")], budgets=budgets)
    call = FakeCall("k1", "i1", "job", "chat", chat_request())
    waiting = FakeCall("k2", "i2", "job", "chat", chat_request("still waiting for its token"))
    assert guard.reserve(call)
    assert guard.reserve(waiting)
    guard.sending(call)
    guard.commit()
    worst = guard.worst_case(call)
    guard.store.close()  # the process dies here: no settle, no release, no close

    resumed = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")], budgets=budgets)
    try:
        # The call that was leaving may have been billed; the one waiting at the limit never left.
        (row,) = resumed.store.unknown_outcomes()
        assert (row["item_key"], row["outcome"], row["usd"]) == ("k1", "unknown", None)
        assert D(row["reserved_usd"]) == worst
        assert resumed.budget.spent == worst > 0  # counted as spent in this execution and later ones
        assert resumed.store.resolve(row["id"], D("0.0001"))
        assert resumed.store.spent()[0] == D("0.0001")
    finally:
        resumed.close()


def test_price_book_keeps_one_price_per_model_and_provider() -> None:
    book = PriceBook(lambda model, provider: None)  # type: ignore[arg-type, return-value]
    prices = parse_pricing(CHAT)
    book.put(prices, "alpha")
    assert book.get("chat-model", "alpha") is prices
    assert book.get("chat-model") is None


def test_budgets_from_manifest(tmp_path: Path) -> None:
    from relaybatch.manifests import open_manifest

    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "run: {budget_usd: 2.50}\n"
        "jobs:\n"
        "  - {name: a, kind: chat, model: m, prompt: hi, budget_usd: 0.10, items: [{id: 1}]}\n"
        "  - {name: b, kind: chat, model: m, prompt: hi, items: [{id: 1}]}\n"
    )
    budgets = budgets_from_manifest(open_manifest(manifest))
    assert budgets.run_usd == D("2.50")
    assert budgets.job_usd == {"a": D("0.10")}


async def test_an_answer_without_usage_is_unknown_not_free(tmp_path: Path) -> None:
    guard = await open_spend_guard(
        tmp_path, FakePricingClient({"chat-model": CHAT}), [("job", "chat", "chat-model")]
    )
    call = FakeCall("k1", "i1", "job", "chat", chat_request())
    assert guard.reserve(call)
    assert guard.settle(call, {"output_text": "hi", "usage": {}}) is None
    guard.commit()
    row = next(iter(guard.store.records()))
    assert row["usd"] is None and row["unknown_prices"] == "usage unreadable: the answer carries no usage"
    guard.close()


async def test_each_billed_attempt_is_its_own_row(tmp_path: Path) -> None:
    guard = await open_spend_guard(
        tmp_path, FakePricingClient({"chat-model": CHAT}), [("job", "chat", "chat-model")]
    )
    first = FakeCall("k1", "i1", "job", "chat", chat_request(), attempt=1)
    again = FakeCall("k1", "i1", "job", "chat", chat_request(), attempt=2)
    assert guard.reserve(first)
    guard.settle(first, None)  # sent, no answer: may have been charged
    assert guard.reserve(again)
    assert guard.settle(again, {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}) == D("0.00003")
    assert list(guard.store.records()) == []  # queued until the engine's next checkpoint commit
    guard.commit()
    rows = {row["call"]: row for row in guard.store.records()}
    assert set(rows) == {"attempt-1", "attempt-2"}
    assert rows["attempt-1"]["outcome"] == "unknown" and rows["attempt-2"]["usd"] == "0.000030"
    guard.close()


async def test_a_run_budget_refusal_stops_the_run_not_only_the_job(tmp_path: Path) -> None:
    client = FakePricingClient({"chat-model": CHAT})
    budgets = Budgets(run_usd=D("0.0006"), job_usd={"job": D("1")})
    guard = await open_spend_guard(tmp_path, client, [("job", "chat", "chat-model")], budgets=budgets)
    first = FakeCall("k1", "i1", "job", "chat", chat_request())
    second = FakeCall("k2", "i2", "job", "chat", chat_request())
    assert guard.reserve(first)
    assert not guard.reserve(second)
    refused = guard.refusal(second)
    assert refused.job is None and "run budget of 0.0006 USD" in refused.message
    assert refused.may_fit_later  # the first call is in flight and may settle lower
    guard.settle(first, {"usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    assert guard.reserve(second)  # it did: room came back
    third = FakeCall("k3", "i3", "job", "chat", chat_request())
    assert not guard.reserve(third)
    assert guard.refusal(third).may_fit_later
    guard.settle(second, None)  # no answer: counted at its worst case, nothing in flight now
    assert not guard.reserve(third)
    final = guard.refusal(third)
    assert not final.may_fit_later and "run budget of 0.0006 USD reached" in final.message
    guard.close()


async def test_progress_report_and_dashboard_split_known_and_unknown_by_one_rule(tmp_path: Path) -> None:
    """The guard's live figures, `relaybatch report` (run_spend_figures, the Prefect summary's source)
    and the dashboard agree on known and unknown spend, with unknown outcomes and unknown prices."""
    from cost_builders import sample_rows

    from relaybatch.cost_model.price import CallCost, price_call
    from relaybatch.cost_model.usage import UsageCounts
    from relaybatch.costs.dashboard_data import load_dashboard
    from relaybatch.costs.ledger import OUTCOME_UNKNOWN, UNKNOWN, build_row
    from relaybatch.costs.report import run_spend_figures

    run_dir = tmp_path / "demo"
    run_dir.mkdir()
    common = {"run": "demo", "job": "clips", "kind": "video", "model": "video-model", "provider": None}
    extra = [
        build_row(  # sent, no answer recorded: its worst case
            **common,
            item_id="v1",
            item_key="kv1",
            usage=UsageCounts(),
            cost=CallCost((), "base", (OUTCOME_UNKNOWN,)),
            reserved_usd=D("0.40"),
            outcome=UNKNOWN,
        ),
        build_row(  # answered, a price missing: the worst case beyond the part that is known
            **common,
            item_id="v2",
            item_key="kv2",
            usage=UsageCounts(input_tokens=10),
            cost=price_call(None, UsageCounts(input_tokens=10)),
            reserved_usd=D("0.05"),
        ),
    ]
    store = CostStore(run_dir / "costs.sqlite")
    for row in [*sample_rows(), *extra]:
        store.record(row)
    store.close()

    guard = await open_spend_guard(run_dir, FakePricingClient({}), [], budgets=Budgets(run_usd=D("100")))
    live = guard.figures()
    guard.close()
    report = run_spend_figures(run_dir)
    dashboard = load_dashboard(tmp_path, ["demo"])

    assert report.unknown_usd == D("0.45")
    assert (live.spent_usd, live.unknown_usd) == (report.known_usd, report.unknown_usd)
    assert (dashboard.known_usd, dashboard.unknown_usd) == (report.known_usd, report.unknown_usd)


async def test_the_price_look_ups_go_out_together_and_the_first_failure_in_order_is_raised(
    tmp_path: Path,
) -> None:
    """An execution's price look-ups are its first requests: made one after the other, each model's
    adds a round trip before anything is sent. Each look-up here waits until both have been asked."""
    import asyncio

    both_asked = asyncio.Event()
    other = {"data": {**CHAT["data"], "id": "other-model"}}

    @dataclass
    class Together(FakePricingClient):
        async def get_pricing(self, model: str, provider: str | None = None) -> Any:
            self.asked.append((model, provider))
            if len(self.asked) == 2:
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), 5)  # one after the other: TimeoutError
            answer = self.answers[model]
            if isinstance(answer, Exception):
                raise answer
            return answer

    calls = [("a", "chat", "chat-model"), ("b", "chat", "other-model"), ("c", "chat", "chat-model")]
    client = Together({"chat-model": CHAT, "other-model": other})
    guard = await open_spend_guard(tmp_path, client, calls)
    assert sorted(client.asked) == [("chat-model", None), ("other-model", None)]  # each model once
    assert len(list(guard.store.saved_prices())) == 2  # both stored with the run
    guard.close()

    both_asked.clear()
    failing = Together(
        {
            "chat-model": Conflict(409, None, "different", body={"error": {"message": "x (p, q)"}}),
            "other-model": ServerError(500, "api_error", "down"),
        }
    )
    with pytest.raises(
        PricingError, match=r"job 'a'"
    ):  # job a's model fails first in (job, kind, model) order
        await open_spend_guard(tmp_path / "again", failing, calls)
