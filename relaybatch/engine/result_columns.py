"""The columns of the results Parquet: their Arrow types, which kinds have them, and their values.

The schema of a job's file is a function of the kinds it holds (and, for web search, whether it
uses the reader or a search route): a kind only gets the columns it can fill, so no column is
null by construction (an image job has no ``tool_calls``, a noul question no confidence). Every
column is typed: timestamps are UTC timestamps, usage is a struct of the family's own counters
(the union when a job mixes families), tool calls and search hits are lists of structs. The only
JSON text left is ``task_data``, a V1 task's ``data`` object, which the interface leaves opaque.
docs/engine.md ("Results") lists the columns per kind; ``columns_for`` is the rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from relaybatch.engine.normalize import result_tokens, tool_call

COST_TYPE = pa.decimal128(38, 18)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
PROBABILITIES_TYPE = pa.map_(pa.string(), pa.float64())
TOOL_CALL_TYPE = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
SEARCH_HIT_TYPE = pa.struct(
    [
        ("title", pa.string()),
        ("url", pa.string()),
        ("snippet", pa.string()),
        ("contexts", pa.list_(pa.string())),
    ]
)
IMAGE_SETTINGS_TYPE = pa.struct(
    [(name, pa.string()) for name in ("size", "quality", "output_format", "background")]
)

# The web search reader answers with page text; the other routes with hits. They are column
# groups of their own so that neither leaves a column empty.
READER = "web_search:reader"

Value = Callable[[dict[str, Any], dict[str, Any]], Any]


def _counts(*names: str, nested: tuple[tuple[str, pa.DataType], ...] = ()) -> pa.StructType:
    """A struct of int64 counters, then any nested fields."""
    return pa.struct([*((name, pa.int64()) for name in names), *nested])


_MODALITY_COUNTS = pa.list_(pa.struct([("modality", pa.string()), ("tokenCount", pa.int64())]))

# Each family's usage object as the gateway sends it (gateway/*_types.py), typed.
USAGE_TYPES: dict[str, pa.StructType] = {
    "chat": _counts(
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        nested=(
            ("prompt_tokens_details", _counts("cached_tokens")),
            ("completion_tokens_details", _counts("reasoning_tokens")),
        ),
    ),
    "responses": _counts(
        "input_tokens",
        "output_tokens",
        "total_tokens",
        nested=(
            ("input_tokens_details", _counts("cached_tokens")),
            ("output_tokens_details", _counts("reasoning_tokens")),
        ),
    ),
    "messages": _counts(
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        nested=(("cache_creation", _counts("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")),),
    ),
    "generate_content": _counts(
        "promptTokenCount",
        "candidatesTokenCount",
        "totalTokenCount",
        "cachedContentTokenCount",
        "thoughtsTokenCount",
        nested=(("promptTokensDetails", _MODALITY_COUNTS), ("candidatesTokensDetails", _MODALITY_COUNTS)),
    ),
    "image": _counts(
        "input_tokens",
        "output_tokens",
        "total_tokens",
        nested=(
            ("input_tokens_details", _counts("text_tokens", "image_tokens")),
            ("output_tokens_details", _counts("text_tokens", "image_tokens")),
        ),
    ),
    "judgment": _counts("input_tokens", "output_tokens"),
}


def merge_structs(types: Iterable[pa.StructType]) -> pa.StructType:
    """One struct holding every field of ``types``; fields of one name that are structs merge."""
    merged: dict[str, pa.DataType] = {}
    for struct in types:
        for field in struct:
            known = merged.get(field.name)
            if known is None:
                merged[field.name] = field.type
            elif pa.types.is_struct(known) and pa.types.is_struct(field.type):
                merged[field.name] = merge_structs([known, field.type])
            elif known != field.type:
                raise TypeError(f"usage field {field.name} is {known} in one family, {field.type} in another")
    return pa.struct(list(merged.items()))


# -- values -------------------------------------------------------------------------------------


def _remote(result: dict[str, Any]) -> dict[str, Any]:
    remote = result.get("remote")
    return remote if isinstance(remote, dict) else {}


def _model(item: dict[str, Any], result: dict[str, Any]) -> Any:
    return result.get("model") or _remote(result).get("model")


def _tool_calls(item: dict[str, Any], result: dict[str, Any]) -> Any:
    return [tool_call(call) for call in result.get("tool_calls") or [] if isinstance(call, dict)]


def _search_results(item: dict[str, Any], result: dict[str, Any]) -> Any:
    search = result.get("search") or {}
    hits = []
    for hit in search.get("results") or []:
        if not isinstance(hit, dict):
            continue
        contexts = [
            text.get("text") if isinstance(text, dict) else text for text in hit.get("contexts") or []
        ]
        hits.append(
            {
                "title": hit.get("title"),
                "url": hit.get("url") or hit.get("link"),
                "snippet": hit.get("snippet"),
                "contexts": contexts,
            }
        )
    return hits


def _task_data(item: dict[str, Any], result: dict[str, Any]) -> Any:
    data = _remote(result).get("data")
    return None if data is None else json.dumps(data, ensure_ascii=False)


def _result_key(name: str, empty: Any = None) -> Value:
    def value(item: dict[str, Any], result: dict[str, Any]) -> Any:
        found = result.get(name)
        return empty if found is None and empty is not None else found

    return value


def _token(name: str) -> Value:
    def value(item: dict[str, Any], result: dict[str, Any]) -> Any:
        if not result:
            return None
        tokens = result.get("tokens")
        if not isinstance(tokens, dict):  # read from the usage once per row, kept for the next column
            tokens = result["tokens"] = result_tokens(item["kind"], result) or {}
        return tokens.get(name)

    return value


def _cost(item: dict[str, Any], result: dict[str, Any]) -> Any:
    cost = item.get("cost_usd")
    return Decimal(cost) if cost is not None and cost != "" else None


@dataclass(frozen=True)
class Column:
    """One output column; ``value`` reads it from the item row and its decoded result (``{}``
    when the item has none, in which case result columns are written null)."""

    name: str
    type: pa.DataType
    value: Value
    from_result: bool = True


ITEM_COLUMNS = [
    Column("item_id", pa.string(), lambda item, result: item["item_id"], False),
    Column("item_key", pa.string(), lambda item, result: item["key"], False),
    Column("kind", pa.string(), lambda item, result: item["kind"], False),
    Column("state", pa.string(), lambda item, result: item["state"], False),
]
RESULT_COLUMNS = [
    Column("model", pa.string(), _model),
    Column("output_text", pa.string(), _result_key("output_text")),
    Column("tool_calls", pa.list_(TOOL_CALL_TYPE), _tool_calls),
    Column("finish_reason", pa.string(), _result_key("finish_reason")),
    Column("search_results", pa.list_(SEARCH_HIT_TYPE), _search_results),
    Column("media_paths", pa.list_(pa.string()), _result_key("media_paths", [])),
    Column("media_urls", pa.list_(pa.string()), _result_key("media_urls", [])),
    Column("task_data", pa.string(), _task_data),
    Column("image", IMAGE_SETTINGS_TYPE, _result_key("image")),
    Column("remote_id", pa.string(), lambda item, result: item.get("remote_id"), False),
    # When the billed create was answered; with finished_at, how long the remote work took.
    Column("submitted_at", TIMESTAMP_TYPE, lambda item, result: item.get("submitted_at"), False),
    Column("input_tokens", pa.int64(), _token("input_tokens")),
    Column("output_tokens", pa.int64(), _token("output_tokens")),
    Column("cached_tokens", pa.int64(), _token("cached_tokens")),
    Column("reasoning_tokens", pa.int64(), _token("reasoning_tokens")),
    Column("usage", pa.struct([]), _result_key("usage")),  # typed per job: usage_type()
]
RUN_COLUMNS = [
    # Send-to-answer of the request that succeeded; the limiter wait before it is its own column.
    Column("latency_ms", pa.float64(), lambda item, result: item.get("latency_ms"), False),
    Column("limiter_wait_ms", pa.float64(), lambda item, result: item.get("limiter_wait_ms"), False),
    Column("attempts", pa.int64(), lambda item, result: item["attempts"], False),
    Column(
        "error",
        pa.string(),
        lambda item, result: item["last_error"] if item["state"] != "done" else None,
        False,
    ),
    Column("cost_usd", COST_TYPE, _cost, False),
    # Timestamps are read as text and cast to TIMESTAMP_TYPE per batch (outputs.py).
    Column("finished_at", TIMESTAMP_TYPE, lambda item, result: item.get("finished_at"), False),
    # "<run>:<item id>" of the run whose done answer this item took instead of sending (run/reuse.py).
    Column("reused_from", pa.string(), _result_key("reused_from")),
    # The execution (its id in the run's store) that last changed the item: a night's new rows are
    # the rows of that night's execution (docs/costs.md, "One night's rows").
    Column("execution", pa.int64(), lambda item, result: item.get("execution"), False),
]

_TEXT = {"model", "output_text", "tool_calls", "finish_reason", "input_tokens", "output_tokens", "usage"}
KIND_COLUMNS: dict[str, frozenset[str]] = {
    "chat": frozenset(_TEXT | {"cached_tokens", "reasoning_tokens"}),
    "responses": frozenset(_TEXT | {"cached_tokens", "reasoning_tokens"}),
    "messages": frozenset(_TEXT | {"cached_tokens"}),
    "generate_content": frozenset(_TEXT | {"cached_tokens", "reasoning_tokens", "media_paths"}),
    "image": frozenset(
        {"model", "finish_reason", "media_paths", "image", "input_tokens", "output_tokens", "usage"}
    ),
    "video": frozenset({"model", "media_paths", "remote_id", "submitted_at"}),
    "video_v1": frozenset({"model", "media_paths", "media_urls", "task_data", "remote_id", "submitted_at"}),
    "judgment": frozenset({"model", "input_tokens", "output_tokens", "usage"}),
    "web_search": frozenset({"search_results"}),
    READER: frozenset({"output_text"}),
}


def columns_for(groups: Iterable[str]) -> list[Column]:
    """The columns of a file holding these kinds (``READER`` for web search reader items), in a
    fixed order; ``usage`` typed as the union of the kinds' usage structs."""
    groups = set(groups)
    wanted = set().union(*(KIND_COLUMNS.get(group, frozenset()) for group in groups))
    chosen = list(ITEM_COLUMNS)
    for column in RESULT_COLUMNS:
        if column.name not in wanted:
            continue
        if column.name == "usage":
            usage = merge_structs(USAGE_TYPES[kind] for kind in sorted(groups) if kind in USAGE_TYPES)
            column = Column("usage", usage, column.value)
        chosen.append(column)
    return chosen + RUN_COLUMNS


# -- judgment answers ---------------------------------------------------------------------------


# A noul answer is true when P(true) is at least this (a job's ``noul_threshold`` changes it).
NOUL_THRESHOLD = 0.5


def answer_columns(name: str, question_type: str) -> list[pa.Field]:
    """noul: ``answer_<q>`` (P(true)) and ``answer_<q>_true`` (P(true) >= the job's threshold);
    choice: the option; score: the level index, fractional. choice and score add ``_confidence``
    and ``_probabilities`` (keyed by option / level label)."""
    value_type = pa.string() if question_type == "choice" else pa.float64()
    fields = [pa.field(f"answer_{name}", value_type)]
    if question_type == "noul":
        fields.append(pa.field(f"answer_{name}_true", pa.bool_()))
    if question_type in ("choice", "score"):
        fields += [
            pa.field(f"answer_{name}_confidence", pa.float64()),
            pa.field(f"answer_{name}_probabilities", PROBABILITIES_TYPE),
        ]
    return fields


def answer_values(answer: Any, question_type: str, threshold: float = NOUL_THRESHOLD) -> list[Any]:
    """The values of ``answer_columns`` for one answer (nulls when the question has no answer)."""
    if not isinstance(answer, dict):
        answer = {}
    value = answer.get(question_type)
    if question_type == "choice" and value is not None:
        value = str(value)
    if question_type == "noul":
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        return [value, None if number is None else number >= threshold]
    return [value, answer.get("confidence"), _labelled(answer)]


def _labelled(answer: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """Probabilities keyed by label: a score's "0", "1"... become its legend's level names."""
    probabilities = answer.get("probabilities")
    if not isinstance(probabilities, dict):
        return None
    legend = answer.get("legend")
    if not isinstance(legend, dict):
        legend = {}
    return [(_label(legend.get(key, key)), value) for key, value in probabilities.items()]


def _label(level: Any) -> str:
    return level if isinstance(level, str) else json.dumps(level, ensure_ascii=False, sort_keys=True)
