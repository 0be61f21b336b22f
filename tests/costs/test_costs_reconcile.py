"""A mixed run through the engine against the in-process emulator: our ledger and the emulator's
ledger agree to the cent, in total and call by call; and a tight budget stops the run resumable."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.cost_model import Budgets, PricingError
from relaybatch.costs import (
    Reconciliation,
    RunSpendGuard,
    load_spend,
    open_spend_guard,
    reconcile,
    spend_guard_for_run,
)
from relaybatch.emulator.text.synth import TOKENS_PER_TURN
from relaybatch.engine import CheckpointStore, execute
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.manifests import Item
from relaybatch.settings import EMULATOR_DEMO_KEY
from tests.engine.engine_fakes import FAST


def item(kind: str, request: dict[str, Any], item_id: str, job: str) -> Item:
    return Item.build(item_id=item_id, job=job, kind=kind, request=request)  # type: ignore[arg-type]


def chat_items(count: int, model: str = "relay-chat-small", job: str = "chat") -> list[Item]:
    return [
        item(
            "chat",
            {
                "model": model,
                "messages": [{"role": "user", "content": f"question {n} " * (n + 1)}],
                "max_tokens": 64,
            },
            f"chat-{n}",
            job,
        )
        for n in range(count)
    ]


def mixed_items() -> list[Item]:
    """Every kind, several models per family, cache and reasoning models included."""
    items = chat_items(6) + chat_items(3, "relay-chat-reasoner", "reasoning")
    for n in range(3):
        question = f"Summarise item {n} of the batch in a sentence."
        items += [
            item("responses", {"model": "relay-chat-small", "input": question}, f"resp-{n}", "responses"),
            item(
                "messages",
                {
                    "model": "relay-claude-sonnet",
                    "max_tokens": 48,
                    "messages": [{"role": "user", "content": question}],
                },
                f"msg-{n}",
                "messages",
            ),
            item(
                "generate_content",
                {"model": "relay-gemini-pro", "contents": [{"role": "user", "parts": [{"text": question}]}]},
                f"gc-{n}",
                "gemini",
            ),
        ]
    # Long prompts: cache reads (openai, gemini), 5-minute and 1-hour writes (anthropic), reasoning.
    long_text = "a long shared context that the cache keeps. " * 120
    items += [
        item(
            "chat",
            {
                "model": "relay-chat-reasoner",
                "messages": [{"role": "user", "content": long_text}],
                "max_tokens": 64,
            },
            "chat-cached",
            "reasoning",
        ),
        item(
            "generate_content",
            {"model": "relay-gemini-pro", "contents": [{"role": "user", "parts": [{"text": long_text}]}]},
            "gc-cached",
            "gemini",
        ),
        item(
            "messages",
            {
                "model": "relay-claude-sonnet",
                "max_tokens": 48,
                "messages": [{"role": "user", "content": long_text}],
            },
            "msg-cached",
            "messages",
        ),
        item(
            "generate_content",
            {
                "model": "relay-gemini-image",
                "contents": [
                    {"role": "user", "parts": [{"text": "make it blue"}, {"inlineData": tiny_png()}]},
                ],
            },
            "gc-edit",
            "images",
        ),
    ]
    items += [
        item(
            "image",
            {"model": "relay-image-2", "prompt": "a red square", "size": "1024x1024"},
            "img-1",
            "images",
        ),
        item("image", {"model": "relay-image-1", "prompt": "a blue circle", "n": 2}, "img-2", "images"),
        item(
            "generate_content",
            {
                "model": "relay-gemini-image",
                "contents": [{"role": "user", "parts": [{"text": "draw a cat"}]}],
            },
            "gc-img",
            "images",
        ),
        item("video", {"model": "relay-video-2", "prompt": "a lighthouse", "seconds": "8"}, "vid-1", "video"),
        item("video_v1", {"model": "relay-video-v1", "prompt": "a river delta"}, "v1-1", "video"),
        item(
            "judgment",
            {
                "model": "relay-judge-1",
                "state": "The parcel never arrived.",
                "questions": {"complaint": {"type": "noul", "instructions": "Is this a complaint?"}},
            },
            "judge-1",
            "labels",
        ),
        item("web_search", {"route": "search", "q": "river restoration"}, "search-1", "labels"),
        item("web_search", {"route": "simple-search", "q": "wetlands"}, "search-2", "labels"),
    ]
    return items


def tiny_png() -> dict[str, str]:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    return {"mimeType": "image/png", "data": base64.b64encode(buffer.getvalue()).decode()}


def messages_with_prompt_tokens(tokens: int, item_id: str) -> Item:
    """A messages call whose prompt the emulator counts as exactly ``tokens`` tokens."""
    text = "x" * ((tokens - TOKENS_PER_TURN) * 4)
    request = {
        "model": "relay-claude-sonnet",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }
    return item("messages", request, item_id, "long-context")


@pytest.fixture
async def client(fast_app: Starlette) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=fast_app),
        retry=RetryPolicy(max_attempts=1),
    ) as gateway_client:
        yield gateway_client


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    checkpoint = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    yield checkpoint
    checkpoint.close()


async def run_with_guard(
    store: CheckpointStore, client: GatewayClient, budgets: Budgets | None = None
) -> tuple[Any, RunSpendGuard]:
    guard = await open_spend_guard(store.path.parent, client, store.calls(), budgets=budgets)
    try:
        summary = await execute(store, client, settings=FAST, spend=guard)
    finally:
        guard.close()
    return summary, guard


def ledger_rows(run_dir: Path) -> list[dict[str, Any]]:
    return pq.read_table(run_dir / "ledger.parquet").to_pylist()


def assert_reconciled(run_dir: Path, app: Starlette) -> Reconciliation:
    result = reconcile(ledger_rows(run_dir), app.state.emulator.ledger)
    assert result.agree, result.describe()
    # Stricter than the cent: both sides keep full precision, so every call matches exactly.
    assert result.ours_usd == result.theirs_usd
    return result


async def test_ledgers_agree_to_the_cent_call_by_call(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    items = mixed_items()
    store.add_items(items)
    summary, _ = await run_with_guard(store, client)

    failures = {row["item_id"]: row["last_error"] for row in store.iter_items() if row["state"] != "done"}
    assert failures == {}
    result = assert_reconciled(store.path.parent, fast_app)
    assert len(fast_app.state.emulator.ledger) == len(ledger_rows(store.path.parent)) == len(items)
    assert summary.spent_usd == result.theirs_usd
    # The report reads the same run: spend equals the emulator's, activity comes from the events.
    spend = load_spend(store.path.parent.parent, [store.path.parent.name])
    assert spend.total_usd == result.theirs_usd
    assert sum(count for _, count in spend.activity.finished_per_minute) == len(items)
    assert spend.activity.latency_count == len(items)
    kinds = {row["kind"] for row in store.iter_items()}
    assert kinds == {"chat", "responses", "messages", "generate_content", "image", "video", "video_v1"} | {
        "judgment",
        "web_search",
    }


async def test_the_200k_tier_switches_one_token_past_the_boundary_as_the_gateway_bills(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    store.add_items(
        [messages_with_prompt_tokens(200_000, "at"), messages_with_prompt_tokens(200_001, "over")]
    )
    await run_with_guard(store, client)

    rows = {row["item_id"]: row for row in ledger_rows(store.path.parent)}
    assert rows["at"]["tier"] == "base" and rows["over"]["tier"] == "over_200k"
    for row in rows.values():  # the emulator's cache split: half read, an eighth 5m, a sixteenth 1h
        prompt = row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_5m_tokens"]
        assert prompt + row["cache_write_1h_tokens"] == (200_000 if row["item_id"] == "at" else 200_001)
        assert row["cache_write_1h_tokens"] > 0 and row["cache_write_5m_tokens"] > 0
    assert rows["over"]["price_input"] == Decimal("0.000006")
    assert rows["over"]["price_cache_write_1h"] == Decimal("0.000012")
    assert_reconciled(store.path.parent, fast_app)


async def test_every_item_records_its_cost_in_the_checkpoint(
    store: CheckpointStore, client: GatewayClient
) -> None:
    store.add_items(chat_items(3))
    await run_with_guard(store, client)
    ledger = ledger_rows(store.path.parent)
    by_key = {row["item_key"]: row["usd"] for row in ledger}
    for row in store.iter_items():
        assert Decimal(row["cost_usd"]) == by_key[row["key"]]


async def test_tight_budget_stops_the_run_resumable_and_is_never_crossed(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    items = chat_items(40)
    store.add_items(items)
    # Worst case of one call is about 0.00004 USD; this admits only some of the 40.
    limit = Decimal("0.0005")
    summary, _ = await run_with_guard(store, client, Budgets(run_usd=limit))

    spent = sum(Decimal(charge.usd) for charge in fast_app.state.emulator.ledger)
    assert spent <= limit
    assert summary.stopped is not None and "run budget of 0.0005 USD" in summary.stopped
    assert 0 < summary.counts.get("done", 0) < 40
    assert summary.counts.get("pending", 0) == 40 - summary.counts["done"]

    # Resuming under the same budget: calls that were only blocked by reservations in flight may
    # go now, but the budget still holds, and soon nothing more fits (the spend is remembered).
    for _ in range(10):
        again, _ = await run_with_guard(store, client, Budgets(run_usd=limit))
        assert sum(Decimal(charge.usd) for charge in fast_app.state.emulator.ledger) <= limit
        if again.sent == 0:
            break
    assert again.sent == 0 and again.stopped is not None
    # With a larger budget the rest goes through, and the ledgers still agree.
    final, _ = await run_with_guard(store, client, Budgets(run_usd=Decimal("1")))
    assert final.counts == {"done": 40}
    assert_reconciled(store.path.parent, fast_app)


async def test_job_budget_stops_only_while_other_jobs_fit(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    store.add_items(chat_items(20, job="small") + chat_items(3, job="free"))
    summary, _ = await run_with_guard(store, client, Budgets(job_usd={"small": Decimal("0.0002")}))
    small_spent = sum(
        Decimal(row["cost_usd"]) for row in store.iter_items() if row["job"] == "small" and row["cost_usd"]
    )
    assert small_spent <= Decimal("0.0002")
    assert summary.stopped is not None and "job small budget" in summary.stopped


async def test_ambiguous_price_asks_for_a_provider_and_names_the_candidates(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    store.add_items(chat_items(1, model="relay-chat-multi", job="multi"))
    with pytest.raises(PricingError) as raised:
        await open_spend_guard(store.path.parent, client, store.calls())
    message = str(raised.value)
    assert "set `provider` on job 'multi'" in message
    assert "alpha" in message
    assert fast_app.state.emulator.ledger == []


async def test_prices_are_stored_with_the_run_and_reused_on_resume(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    store.add_items(chat_items(2))
    await run_with_guard(store, client)
    pricing_requests = fast_app.state.emulator.request_count("GET", "/v1/models/pricing")
    assert pricing_requests == 1
    guard = await open_spend_guard(store.path.parent, client, store.calls())
    guard.close()
    assert fast_app.state.emulator.request_count("GET", "/v1/models/pricing") == 1


def test_reconcile_reports_what_differs() -> None:
    ours = [
        {"kind": "chat", "model": "m", "usd": Decimal("0.0012")},
        {"kind": "web_search", "model": "search", "usd": Decimal("0.05")},
        {"kind": "chat", "model": "m", "usd": None},
    ]
    theirs = [
        {"route": "/v1/chat/completions", "model": "m", "usd": "0.0012"},
        {"route": "/v1/websearch/search", "model": "relay-websearch", "usd": "0.05"},
        {"route": "/v1/chat/completions", "model": "m", "usd": "0.0031"},
    ]
    result = reconcile(ours, theirs)
    assert not result.agree
    assert result.only_theirs == [("m", Decimal("0.0031"))]
    assert result.only_ours == []
    assert result.unknown_calls == 1
    assert reconcile(ours[:2], theirs[:2]).agree


async def test_rows_carry_the_run_name_the_store_records(
    store: CheckpointStore, client: GatewayClient, fast_app: Starlette
) -> None:
    store.save_run("whole-run")
    store.add_items(chat_items(2))
    async with spend_guard_for_run(store, client) as guard:
        await execute(store, client, settings=FAST, spend=guard)
    assert {row["run"] for row in ledger_rows(store.path.parent)} == {"whole-run"}
    assert_reconciled(store.path.parent, fast_app)


async def test_a_charge_is_durable_before_the_item_state_that_follows_from_it(
    store: CheckpointStore, client: GatewayClient
) -> None:
    """Ledger rows are queued by the guard and committed just before each checkpoint commit: when
    an item's `done` is committed, another connection already sees its charge."""
    from relaybatch.costs import CostStore

    store.add_items(chat_items(12))
    reader = CostStore(store.path.parent / "costs.sqlite")
    missing: list[str] = []

    def check(point: str, key: str) -> None:
        if point == "result_committed" and not any(row["item_key"] == key for row in reader.records()):
            missing.append(key)

    guard = await open_spend_guard(store.path.parent, client, store.calls())
    try:
        await execute(store, client, settings=FAST, spend=guard, hook=check)
        charged = len(list(reader.records()))
    finally:
        guard.close()
        reader.close()
    assert missing == []
    assert charged == 12


class OneTokenAtATime:
    """A limiter at its limit, without a clock: the next create's token comes when the test says."""

    def __init__(self) -> None:
        self.tokens = asyncio.Semaphore(1)

    async def acquire(self, purpose: Any = "submit") -> None:
        if purpose == "submit":
            await self.tokens.acquire()

    def observe(self, status: int, headers: Mapping[str, str], rate_limit: Any = None) -> None:
        return None

    def no_answer(self) -> None:
        return None


async def test_a_call_waiting_at_the_limit_leaves_no_reservation_in_the_ledger(
    store: CheckpointStore, fast_app: Starlette
) -> None:
    """Every worker reserves its call's worst case, then waits for the limiter's token with its item
    still pending. Those reservations must not reach the cost store with another item's commit: a
    SIGKILL there would leave calls never sent as unknown outcomes (`resolve` would list them as
    sent, and the next execution's budget would count their worst cases). So whenever an item's
    `sending` is durable, the store holds that call's reservation and no other."""
    from relaybatch.costs import CostStore

    store.add_items(chat_items(6))
    reader = CostStore(store.path.parent / "costs.sqlite")
    limiter = OneTokenAtATime()
    seen: list[tuple[str, list[str]]] = []  # (the item sent, the reservations durable then)

    def check(point: str, key: str) -> None:
        if point == "sending_committed":
            reserved = sorted(row["item_key"] for row in reader.records() if row["outcome"] == "reserved")
            seen.append((key, reserved))
        elif point == "result_committed":
            limiter.tokens.release()  # the next token: one create at a time, the others wait

    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=fast_app),
        retry=RetryPolicy(max_attempts=1),
        limiter=limiter,
    ) as client:
        guard = await open_spend_guard(store.path.parent, client, store.calls())
        try:
            summary = await execute(store, client, settings=FAST, spend=guard, hook=check)
        finally:
            guard.close()
            reader.close()
    assert summary.counts.get("done") == 6
    assert seen == [(key, [key]) for key, _ in seen] and len(seen) == 6, seen
    assert_reconciled(store.path.parent, fast_app)
