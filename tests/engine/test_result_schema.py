"""The results Parquet of every kind, read back with pyarrow: exact column types, nothing always null."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_fakes import FAST, ClientFactory
from engine_items import every_kind, item

from relaybatch.engine import Change, CheckpointStore, execute, export_results
from relaybatch.engine.result_columns import (
    ITEM_COLUMNS,
    KIND_COLUMNS,
    READER,
    RESULT_COLUMNS,
    RUN_COLUMNS,
    USAGE_TYPES,
    answer_values,
)

TOKENS = pa.int64()
TEXT = pa.string()
LIST_OF_TEXT = pa.list_(pa.string())
PROBABILITIES = pa.map_(pa.string(), pa.float64())
TOOL_CALLS = pa.list_(pa.struct([("id", TEXT), ("name", TEXT), ("arguments", TEXT)]))
MOMENT = pa.timestamp("ms", tz="UTC")
MODALITIES = pa.list_(pa.struct([("modality", TEXT), ("tokenCount", TOKENS)]))


def counts(*names: str) -> list[tuple[str, pa.DataType]]:
    return [(name, TOKENS) for name in names]


HEAD = [("input_id", TEXT), ("item_id", TEXT), ("item_key", TEXT), ("kind", TEXT), ("state", TEXT)]
TAIL = [
    ("latency_ms", pa.float64()),
    ("limiter_wait_ms", pa.float64()),
    ("attempts", pa.int64()),
    ("error", TEXT),
    ("cost_usd", pa.decimal128(38, 18)),
    ("finished_at", MOMENT),
    ("reused_from", TEXT),
    ("execution", pa.int64()),  # the execution that last changed the item
]
TEXT_ANSWER = [("model", TEXT), ("output_text", TEXT), ("tool_calls", TOOL_CALLS), ("finish_reason", TEXT)]

EXPECTED: dict[str, list[tuple[str, pa.DataType]]] = {
    "chat": [
        *TEXT_ANSWER,
        *counts("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"),
        (
            "usage",
            pa.struct(
                [
                    *counts("prompt_tokens", "completion_tokens", "total_tokens"),
                    ("prompt_tokens_details", pa.struct(counts("cached_tokens"))),
                    ("completion_tokens_details", pa.struct(counts("reasoning_tokens"))),
                ]
            ),
        ),
    ],
    "responses": [
        *TEXT_ANSWER,
        *counts("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"),
        (
            "usage",
            pa.struct(
                [
                    *counts("input_tokens", "output_tokens", "total_tokens"),
                    ("input_tokens_details", pa.struct(counts("cached_tokens"))),
                    ("output_tokens_details", pa.struct(counts("reasoning_tokens"))),
                ]
            ),
        ),
    ],
    "messages": [
        *TEXT_ANSWER,
        *counts("input_tokens", "output_tokens", "cached_tokens"),
        (
            "usage",
            pa.struct(
                [
                    *counts(
                        "input_tokens",
                        "output_tokens",
                        "cache_read_input_tokens",
                        "cache_creation_input_tokens",
                    ),
                    (
                        "cache_creation",
                        pa.struct(counts("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")),
                    ),
                ]
            ),
        ),
    ],
    "generate_content": [
        *TEXT_ANSWER,
        ("media_paths", LIST_OF_TEXT),
        *counts("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"),
        (
            "usage",
            pa.struct(
                [
                    *counts(
                        "promptTokenCount",
                        "candidatesTokenCount",
                        "totalTokenCount",
                        "cachedContentTokenCount",
                        "thoughtsTokenCount",
                    ),
                    ("promptTokensDetails", MODALITIES),
                    ("candidatesTokensDetails", MODALITIES),
                ]
            ),
        ),
    ],
    "image": [
        ("model", TEXT),
        ("finish_reason", TEXT),
        ("media_paths", LIST_OF_TEXT),
        (
            "image",
            pa.struct([("size", TEXT), ("quality", TEXT), ("output_format", TEXT), ("background", TEXT)]),
        ),
        *counts("input_tokens", "output_tokens"),
        (
            "usage",
            pa.struct(
                [
                    *counts("input_tokens", "output_tokens", "total_tokens"),
                    ("input_tokens_details", pa.struct(counts("text_tokens", "image_tokens"))),
                    ("output_tokens_details", pa.struct(counts("text_tokens", "image_tokens"))),
                ]
            ),
        ),
    ],
    "video": [("model", TEXT), ("media_paths", LIST_OF_TEXT), ("remote_id", TEXT), ("submitted_at", MOMENT)],
    "video_v1": [
        ("model", TEXT),
        ("media_paths", LIST_OF_TEXT),
        ("media_urls", LIST_OF_TEXT),
        ("task_data", TEXT),
        ("remote_id", TEXT),
        ("submitted_at", MOMENT),
    ],
    "judgment": [
        ("model", TEXT),
        *counts("input_tokens", "output_tokens"),
        ("usage", pa.struct(counts("input_tokens", "output_tokens"))),
    ],
    "web_search": [
        (
            "search_results",
            pa.list_(
                pa.struct([("title", TEXT), ("url", TEXT), ("snippet", TEXT), ("contexts", LIST_OF_TEXT)])
            ),
        )
    ],
    "reader": [("output_text", TEXT)],
}
JUDGMENT_ANSWERS = [
    ("answer_anger", pa.float64()),
    ("answer_anger_confidence", pa.float64()),
    ("answer_anger_probabilities", PROBABILITIES),
    ("answer_complaint", pa.float64()),
    ("answer_complaint_true", pa.bool_()),
    ("answer_topic", TEXT),
    ("answer_topic_confidence", pa.float64()),
    ("answer_topic_probabilities", PROBABILITIES),
]
# Null in a done row by what the emulator sends, not by construction: no cost without a spend
# guard, no error on success, counters the emulator leaves out (a real gateway may send them).
NULL_BY_DATA = {
    "cost_usd",
    "reused_from",
    "error",
    "cached_tokens:messages",
    "cached_tokens:generate_content",
    "reasoning_tokens:generate_content",
}


def one_job_per_kind() -> list:
    items = [single.model_copy(update={"job": single.kind}) for single in every_kind()]
    reader = item(
        "web_search", {"route": "reader", "url": "https://example.org/wal"}, "reader-1", job="reader"
    )
    return [*items, reader]


@pytest.fixture
async def exported(store: CheckpointStore, make_client: ClientFactory, tmp_path: Path) -> dict[str, pa.Table]:
    store.add_items(one_job_per_kind())
    summary = await execute(store, make_client(), settings=FAST)
    assert summary.counts == {"done": 10}
    return {path.stem: pq.read_table(path) for path in export_results(store, tmp_path / "results")}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_each_kind_has_exactly_its_typed_columns(exported: dict[str, pa.Table], kind: str) -> None:
    table = exported[kind]
    answers = JUDGMENT_ANSWERS if kind == "judgment" else []

    assert table.schema == pa.schema([*HEAD, *EXPECTED[kind], *TAIL, *answers])
    [row] = table.to_pylist()
    empty = {
        name
        for name, value in row.items()
        if value is None and name not in NULL_BY_DATA and f"{name}:{row['kind']}" not in NULL_BY_DATA
    }
    assert empty == set()


async def test_values_of_the_typed_columns(exported: dict[str, pa.Table], store: CheckpointStore) -> None:
    chat = exported["chat"].to_pylist()[0]
    assert chat["usage"]["prompt_tokens"] == chat["input_tokens"] > 0
    assert chat["usage"]["completion_tokens_details"] == {"reasoning_tokens": chat["reasoning_tokens"]}
    assert chat["tool_calls"] == []
    assert chat["finished_at"].tzinfo is not None

    judgment = exported["judgment"].to_pylist()[0]
    # Keyed by the criteria's labels, in the levels' order, not by "0", "1".
    assert [label for label, _ in judgment["answer_anger_probabilities"]] == ["calm", "angry"]
    assert {label for label, _ in judgment["answer_topic_probabilities"]} == {"billing", "delivery"}
    assert judgment["answer_topic"] in ("billing", "delivery")

    [search] = exported["web_search"].to_pylist()
    hits = search["search_results"]
    assert hits and all(hit["title"] and hit["url"].startswith("https://") and hit["snippet"] for hit in hits)
    assert hits[0]["contexts"][0].startswith("Passage 1")
    assert exported["reader"].to_pylist()[0]["output_text"].startswith("# wal")

    [v1] = exported["video_v1"].to_pylist()
    [saved] = v1["media_paths"]
    assert (store.path.parent / saved).read_bytes()[4:8] == b"ftyp"
    assert v1["media_urls"] == [json.loads(v1["task_data"])["video_url"]]
    assert v1["submitted_at"] <= v1["finished_at"]


def test_a_job_of_several_kinds_gets_the_union_of_their_columns(
    store: CheckpointStore, tmp_path: Path
) -> None:
    chat, messages = every_kind()[0], every_kind()[2]
    store.add_items([chat, messages])
    answers = {
        chat.key: {
            "output_text": "a",
            "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1}},
        },
        messages.key: {"output_text": "b", "usage": {"input_tokens": 2, "cache_read_input_tokens": 5}},
    }
    store.apply([Change(key, "sending") for key in answers])
    store.apply([Change(key, "done", {"result": result}) for key, result in answers.items()])

    [path] = export_results(store, tmp_path)
    table = pq.read_table(path)

    usage = table.schema.field("usage").type
    assert {field.name for field in usage} >= {"prompt_tokens", "input_tokens", "cache_read_input_tokens"}
    assert "reasoning_tokens" in table.schema.names  # chat has it, messages does not
    assert [row["usage"]["prompt_tokens"] for row in table.to_pylist()] == [3, None]
    assert [row["usage"]["cache_read_input_tokens"] for row in table.to_pylist()] == [None, 5]


def test_a_value_that_does_not_fit_its_type_is_null_not_a_failed_export(
    store: CheckpointStore, tmp_path: Path
) -> None:
    chat = every_kind()[0]
    store.add_items([chat])
    store.transition(chat.key, "sending")
    bad = {"output_text": "ok", "usage": {"prompt_tokens": "many"}, "tokens": {"input_tokens": "x"}}
    store.transition(chat.key, "done", result=bad, finished_at="yesterday")

    [row] = pq.read_table(export_results(store, tmp_path)[0]).to_pylist()

    assert (row["output_text"], row["usage"], row["input_tokens"], row["finished_at"]) == (
        "ok",
        None,
        None,
        None,
    )


def test_tool_calls_of_every_family_share_one_shape(store: CheckpointStore, tmp_path: Path) -> None:
    chat = every_kind()[0]
    store.add_items([chat])
    store.transition(chat.key, "sending")
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"type": "function_call", "id": "fc", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "tool_use", "id": "c3", "name": "h", "input": {"b": [1]}},
        {"name": "k", "args": {"c": True}},
    ]
    store.transition(chat.key, "done", result={"output_text": None, "tool_calls": calls})

    [row] = pq.read_table(export_results(store, tmp_path)[0]).to_pylist()

    assert row["tool_calls"] == [
        {"id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"id": "c2", "name": "g", "arguments": "{}"},
        {"id": "c3", "name": "h", "arguments": '{"b": [1]}'},
        {"id": None, "name": "k", "arguments": '{"c": true}'},
    ]


def test_unfinished_items_have_null_results_and_a_noul_question_has_no_confidence(
    store: CheckpointStore, tmp_path: Path
) -> None:
    request = {
        "model": "relay-judge-1",
        "state": "s",
        "questions": {"spam": {"type": "noul", "instructions": "Spam?"}},
    }
    store.add_items([item("judgment", request, "j-1")])

    table = pq.read_table(export_results(store, tmp_path)[0])

    assert [name for name in table.schema.names if name.startswith("answer_")] == [
        "answer_spam",
        "answer_spam_true",
    ]
    [row] = table.to_pylist()
    assert row["state"] == "pending" and row["usage"] is None and row["answer_spam"] is None


def test_score_probabilities_take_the_legend_labels_in_level_order() -> None:
    answer = {
        "score": 0.4,
        "legend": {"0": "calm", "1": {"label": "cross", "hint": "raised voice"}},
        "probabilities": {"0": 0.6, "1": 0.4, "2": 0.0},
        "confidence": 0.2,
    }

    value, confidence, probabilities = answer_values(answer, "score")

    # A level described by an object is keyed by its JSON; one missing from the legend keeps its index.
    assert (value, confidence) == (0.4, 0.2)
    assert probabilities == [("calm", 0.6), ('{"hint": "raised voice", "label": "cross"}', 0.4), ("2", 0.0)]
    assert answer_values(None, "choice") == [None, None, None]
    assert answer_values({"noul": 0.9, "confidence": 1.0}, "noul") == [0.9, True]
    assert answer_values({"noul": 0.3}, "noul") == [0.3, False]
    assert answer_values({"noul": 0.3}, "noul", threshold=0.25) == [0.3, True]


def test_every_column_and_usage_counter_is_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text(encoding="utf-8")
    results = docs[docs.index("## Results") :]
    columns = [column.name for column in ITEM_COLUMNS + RESULT_COLUMNS + RUN_COLUMNS]
    counters = {field.name for usage in USAGE_TYPES.values() for field in usage}

    kinds = [kind.replace(READER, "reader") for kind in KIND_COLUMNS]
    missing = [name for name in [*columns, *kinds] if f"`{name}`" not in results]
    missing += [name for name in counters if name not in results]
    assert missing == []
