"""Structured jobs end to end: answers checked against the schema, invalid ones re-asked (each a
wasted ledger row), the still-invalid failed invalid_output with their raw answer kept."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_fakes import ClientFactory
from starlette.applications import Starlette

from relaybatch.costs.observed import observed_outputs
from relaybatch.costs.report import display_usd, load_spend, unguarded
from relaybatch.costs.terminal import spend_summary
from relaybatch.emulator import EmulatorState
from relaybatch.emulator.config import FaultRule, FaultsConfig
from relaybatch.engine import CheckpointStore
from relaybatch.run import export_run_results, open_run, plan_run
from relaybatch.settings import run_paths

LABEL = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "sarcastic": {"type": "boolean"},
    },
    "required": ["sentiment", "confidence", "sarcastic"],
}
MODELS = {
    "chat": "relay-chat-small",
    "responses": "relay-chat-small",
    "messages": "relay-claude-haiku",
    "generate_content": "relay-gemini-flash",
}


def manifest(folder: Path, kind: str, rows: int, **job: Any) -> Path:
    path = folder / "labels.yaml"
    items = [{"id": f"r{number}", "text": f"review number {number}"} for number in range(rows)]
    document = {
        "jobs": [
            {
                "name": "labels",
                "kind": kind,
                "model": MODELS[kind],
                "prompt": "Label this review: {text}",
                "request": {"max_tokens": 200} if kind == "messages" else {},
                "output_schema": LABEL,
                "items": items,
                **job,
            }
        ]
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


async def run(path: Path, runs: Path, make_client: ClientFactory) -> CheckpointStore:
    planned = plan_run(path, runs)
    async with open_run(planned.paths, client=make_client()) as opened:
        await opened.execute()
    return CheckpointStore(planned.paths.checkpoint)


def ledger(runs: Path) -> list[dict[str, Any]]:
    return pq.read_table(runs / "labels" / "ledger.parquet").to_pylist()


@pytest.mark.parametrize("kind", list(MODELS))
async def test_each_family_answers_fit_the_schema(
    kind: str, tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store = await run(manifest(tmp_path, kind, 3), tmp_path / "runs", make_client)
    with store:
        rows = list(store.iter_items())

    assert [row["state"] for row in rows] == ["done"] * 3
    for row in rows:
        assert set(row["result"]["structured"]) == {"sentiment", "confidence", "sarcastic"}


async def test_invalid_answers_are_reasked_and_their_cost_is_wasted(
    tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    emulator: EmulatorState = fast_app.state.emulator
    emulator.faults.replace(FaultsConfig(seed=3, rules=[FaultRule(fault="invalid_json", rate=0.3)]))

    store = await run(manifest(tmp_path, "chat", 40), tmp_path / "runs", make_client)
    with store:
        states = [row["state"] for row in store.iter_items()]
    rows = ledger(tmp_path / "runs")

    broken = [charge for charge in emulator.ledger if charge.usage.get("fault") == "invalid_json"]
    assert broken and len(rows) == len(emulator.ledger) == 40 + len(broken)
    wasted = sum((row["usd"] for row in rows if row["wasted"]), Decimal(0))
    assert wasted == sum((charge.usd for charge in broken), Decimal(0))
    assert sum(row["wasted"] for row in rows) == len(broken)
    assert states.count("done") >= 38
    learnt = observed_outputs(tmp_path / "runs")[("labels", "relay-chat-small")]
    assert (learnt.items, learnt.calls) == (40, len(rows))  # a later plan expects the re-asks too
    spend = load_spend(tmp_path / "runs", ["labels"], None, unguarded)
    assert spend.wasted_usd == wasted
    assert f"wasted {display_usd(wasted)} on answers that did not fit their schema" in spend_summary(spend)


async def test_an_answer_still_invalid_fails_invalid_output_with_its_raw_text(
    tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    emulator: EmulatorState = fast_app.state.emulator
    emulator.faults.replace(FaultsConfig(rules=[FaultRule(fault="invalid_json", rate=1.0)]))

    store = await run(manifest(tmp_path, "generate_content", 1, max_reasks=1), tmp_path / "runs", make_client)
    with store:
        [row] = list(store.iter_items())

    assert row["state"] == "failed"
    assert row["last_error"].startswith("invalid_output: not JSON")
    assert row["attempts"] == 2  # the first ask and one re-ask
    assert row["result"]["output_text"].startswith("Sure! Here is the JSON")
    assert [charge["wasted"] for charge in ledger(tmp_path / "runs")] == [True, True]
    assert Decimal(row["cost_usd"]) == sum(charge.usd for charge in emulator.ledger)


async def test_one_invalid_answer_is_one_wasted_row_then_a_useful_one(
    tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    emulator: EmulatorState = fast_app.state.emulator
    rule = FaultRule(fault="invalid_json", at=[1], paths=["/v1/messages"])
    emulator.faults.replace(FaultsConfig(rules=[rule]))

    store = await run(manifest(tmp_path, "messages", 1), tmp_path / "runs", make_client)
    with store:
        [row] = list(store.iter_items())

    assert row["state"] == "done" and row["attempts"] == 2
    assert [charge["call"] for charge in ledger(tmp_path / "runs")] == ["attempt-1", "attempt-2"]
    assert [charge["wasted"] for charge in ledger(tmp_path / "runs")] == [True, False]


async def test_answers_are_typed_columns_beside_the_raw_json(
    tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store = await run(manifest(tmp_path, "responses", 6), tmp_path / "runs", make_client)
    store.close()
    [path] = export_run_results(run_paths(tmp_path / "runs", "labels"))
    table = pq.read_table(path)

    assert table.schema.field("answer_sentiment").type == pa.dictionary(pa.int32(), pa.string())
    assert table.schema.field("answer_confidence").type == pa.float64()
    assert table.schema.field("answer_sarcastic").type == pa.bool_()
    assert table.schema.field("answer_json").type == pa.string()
    rows = table.to_pylist()
    assert {row["answer_sentiment"] for row in rows} <= {"positive", "negative", "neutral"}
    assert all(json.loads(row["answer_json"])["confidence"] == row["answer_confidence"] for row in rows)


@pytest.mark.parametrize(("threshold", "expected"), [(None, 0.5), (0.99, 0.99)])
async def test_noul_answers_get_a_boolean_at_the_jobs_threshold(
    threshold: float | None, expected: float, tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    job: dict[str, Any] = {
        "name": "labels",
        "kind": "judgment",
        "model": "relay-judge-1",
        "prompt": "{text}",
        "request": {"questions": {"spam": {"type": "noul", "instructions": "Spam?"}}},
        "items": [{"text": f"message {number}"} for number in range(8)],
    }
    if threshold is not None:
        job["noul_threshold"] = threshold
    path = tmp_path / "labels.yaml"
    path.write_text(json.dumps({"jobs": [job]}), encoding="utf-8")

    (await run(path, tmp_path / "runs", make_client)).close()
    [results] = export_run_results(run_paths(tmp_path / "runs", "labels"))
    rows = pq.read_table(results).to_pylist()

    assert all(row["answer_spam_true"] == (row["answer_spam"] >= expected) for row in rows)


@pytest.mark.parametrize("kind", ["chat", "responses", "messages", "generate_content"])
def test_a_structured_request_is_planned_at_a_typical_answer_of_its_schema(kind: str) -> None:
    """The plan reads the schema back from each family's request: a three-field label is about 13
    tokens of JSON, not the 40 of a free text answer."""
    from relaybatch.cost_model import EXPECTED_ANSWER_TOKENS, expected_usage
    from relaybatch.structured import ask_for_schema, requested_schema

    schema = {
        "type": "object",
        "properties": {
            "team": {"type": "string", "enum": ["billing", "technical", "none"]},
            "urgency": {"type": "number"},
            "refund": {"type": "boolean"},
        },
    }
    request: dict[str, Any] = {"model": "m", "messages": [], "contents": [], "input": "x"}
    plain = expected_usage(kind, request, None).usage.output_tokens
    ask_for_schema(kind, request, schema)

    assert requested_schema(kind, request) is not None
    assert plain == EXPECTED_ANSWER_TOKENS
    typical = '{"team":"technical","urgency":0.5,"refund":false}'
    assert expected_usage(kind, request, None).usage.output_tokens == -(-len(typical) // 4)
