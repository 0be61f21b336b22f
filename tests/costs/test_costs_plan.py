"""`relaybatch plan` against the emulator's bill: the worst case never below it, the expected figure
within 25 %, for every example manifest and for each kind's sizes, qualities, seconds and audio."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from relaybatch.cost_model.expected import expected_usage, prompt_tokens
from relaybatch.cost_model.pricing import judgment_prices
from relaybatch.costs.plan import make_plan
from relaybatch.costs.reconcile import WEB_SEARCH_LABEL, gateway_charge
from relaybatch.emulator import create_app, load_config
from relaybatch.engine import CheckpointStore, EngineSettings, PollSettings, execute
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.manifests import Item, load_items
from relaybatch.settings import EMULATOR_DEMO_KEY

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
EXAMPLES = [*sorted((CONFIGS / "manifests").glob("*.yaml")), CONFIGS / "demo.csv"]
FAST_MEDIA = {
    "video": {
        "queued_seconds": 0.02,
        "render_seconds_base": 0.05,
        "render_seconds_per_video_second": 0.0,
        "v1_pending_seconds": 0.02,
        "v1_processing_seconds": 0.05,
    }
}
SETTINGS = EngineSettings(concurrency=8, poll=PollSettings(initial_seconds=0.02, max_seconds=0.05))
PNG_8X8 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEUlEQVR42mO4IyeHFTEMLQkAid1GAQVcagkAAAAASUVORK5CYII="
)


def _label(kind: str, model: str) -> str:
    return WEB_SEARCH_LABEL if kind == "web_search" else model


async def plan_and_bill(items: list[Item], tmp_path: Path) -> dict[str, tuple[Decimal, Decimal, Decimal]]:
    """Per model: (billed by the emulator, expected, worst case) for running ``items``."""
    config = load_config()
    config.media = FAST_MEDIA
    app = create_app(config)
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=app),
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        plan = await make_plan(items, client)
        store = CheckpointStore(tmp_path / "checkpoint.sqlite")
        try:
            store.add_items(items)
            summary = await execute(store, client, settings=SETTINGS)
        finally:
            store.close()
    assert summary.counts == {"done": len(items)}
    assert plan.complete, plan.notes
    figures: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for entry in app.state.emulator.ledger:
        label, usd = gateway_charge(entry)
        figures[label][0] += usd
    for job in plan.jobs:
        figures[_label(job.kind, job.model)][1] += job.expected_usd
        figures[_label(job.kind, job.model)][2] += job.worst_usd
    return {label: (billed, expected, worst) for label, (billed, expected, worst) in figures.items()}


def assert_close(figures: dict[str, tuple[Decimal, Decimal, Decimal]]) -> None:
    for label, (billed, expected, worst) in figures.items():
        assert billed > 0, label
        assert worst >= billed, f"{label}: worst case {worst} below the bill {billed}"
        ratio = expected / billed
        assert Decimal("0.75") <= ratio <= Decimal("1.25"), f"{label}: expected {expected}, billed {billed}"


@pytest.mark.parametrize("manifest", EXAMPLES, ids=lambda path: path.name)
async def test_plan_brackets_the_bill_of_every_example(manifest: Path, tmp_path: Path) -> None:
    assert_close(await plan_and_bill(load_items(manifest), tmp_path))


def _items(kind: Any, requests: Iterable[dict[str, Any]]) -> list[Item]:
    return [
        Item.build(item_id=str(index), job=f"{kind}-{index}", kind=kind, request=request)
        for index, request in enumerate(requests)
    ]


IMAGES = [
    {"model": "relay-image-2", "prompt": "a kite", "quality": quality, "size": size}
    for quality, size in [
        ("low", "1024x1024"),
        ("medium", "1536x1024"),
        ("high", "1024x1536"),
        ("xhigh", "1024x1024"),
        ("max", "1024x1024"),
        ("auto", "auto"),
    ]
] + [{"model": "relay-image-1", "prompt": "a kite", "n": 2, "quality": "high", "size": "1024x1024"}]

GEMINI_IMAGES = [
    {
        "model": "relay-gemini-image",
        "contents": [{"role": "user", "parts": parts}],
        "generationConfig": {"responseModalities": modalities, "imageConfig": {"imageSize": size}},
    }
    for parts, modalities, size in [
        ([{"text": "a red square"}], ["IMAGE"], "1K"),
        ([{"text": "a red square"}], ["TEXT", "IMAGE"], "2K"),
        (
            [{"inlineData": {"mimeType": "image/png", "data": PNG_8X8}}, {"text": "make it round"}],
            ["TEXT", "IMAGE"],
            "4K",
        ),
    ]
]

VIDEOS = [
    {"model": "relay-video-2-pro", "prompt": "sea", "seconds": "8", "audio": True},
    {"model": "relay-video-2-pro", "prompt": "sea", "seconds": "4"},
    {"model": "relay-video-2", "prompt": "sea"},
]


@pytest.mark.parametrize(
    ("kind", "requests"),
    [("image", IMAGES), ("generate_content", GEMINI_IMAGES), ("video", VIDEOS)],
    ids=["images-by-size-and-quality", "generate-content-images", "v2-video-seconds-and-audio"],
)
async def test_plan_brackets_the_bill_of_each_variant(
    kind: str, requests: list[dict[str, Any]], tmp_path: Path
) -> None:
    figures = await plan_and_bill(_items(kind, requests), tmp_path)
    assert_close(figures)


async def test_v1_video_is_priced_by_seconds_with_five_by_default(tmp_path: Path) -> None:
    requests = [
        {"model": "relay-video-v1", "prompt": "sea"},
        {"model": "relay-video-v1", "prompt": "sea", "seconds": 9},
    ]
    figures = await plan_and_bill(_items("video_v1", requests), tmp_path)
    assert figures["relay-video-v1"] == (Decimal("0.70"), Decimal("0.70"), Decimal("0.70"))


def test_text_counts_turns_and_characters_as_the_tokenizer_rule_says() -> None:
    request = {
        "model": "m",
        "messages": [{"role": "system", "content": "abcd"}, {"role": "user", "content": "x" * 9}],
    }
    assert prompt_tokens("chat", request) == (1 + 3) + (3 + 3)
    gemini = {
        "contents": [{"role": "user", "parts": [{"text": "abcdefgh"}]}],
        "systemInstruction": {"parts": [{"text": "ab"}]},
    }
    assert prompt_tokens("generate_content", gemini) == (1 + 3) + (2 + 3)


def test_judgment_input_is_the_json_of_state_and_questions() -> None:
    questions = {"ok": {"type": "noul", "instructions": "Is it fine?"}}
    request = {"model": "relay-judge-1", "state": "all good", "questions": questions}
    expected = expected_usage("judgment", request, judgment_prices("relay-judge-1"))
    text = '"all good"' + '{"ok":{"instructions":"Is it fine?","type":"noul"}}'
    assert expected.usage.input_tokens == -(-len(text) // 4)
    assert expected.usage.output_tokens == 1


class _Pricing:
    def __init__(self, prices: dict[str, Any]) -> None:
        self.prices = prices
        self.asked: list[str] = []

    async def get_pricing(self, model: str, provider: str | None = None) -> dict[str, Any]:
        from relaybatch.gateway import NotFound

        self.asked.append(model)
        if model not in self.prices:
            raise NotFound(404, "not_found_error", f"no pricing for {model}")
        return {"object": "pricing", "data": {"id": model, "pricing": self.prices[model]}}


async def test_plan_asks_once_per_model_and_marks_what_it_cannot_price() -> None:
    prices = {
        "kind": "token",
        "text": {"prompt": "0.000001", "completion": "0.000004"},
        "cache": {"read": "0"},
    }
    chat = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "abcd"}]}
    items = _items("chat", [chat, chat, {**chat, "model": "gone"}])
    client = _Pricing({"m": prices})

    plan = await make_plan(items, client)

    assert client.asked == ["m", "gone"]
    priced = [job for job in plan.jobs if job.model == "m"]
    assert all(job.priced for job in priced) and not plan.complete
    # 1 + 3 input tokens, output at the cap of 10 (below the expected answer length).
    assert priced[0].expected_usd == Decimal("0.000001") * 4 + Decimal("0.000004") * 10
    assert any("cache hits" in unknown for unknown in priced[0].unknowns)
    assert plan.notes == ["model 'gone': the gateway publishes no price (404)"]
