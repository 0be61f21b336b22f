"""Generated hostile and messy inputs for the property tests: every format, one fault each.

A case is the files to write, the file to validate, and what must come out: the (file, line) of
each problem (one message per problem), or, for inputs that are messy but valid (byte-order
marks, UTF-16), the item ids. Rows are chat calls on the shipped emulator's models.
"""

from __future__ import annotations

import codecs
import io
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

FORMATS = ("yaml", "csv", "jsonl", "parquet", "batch")
FAULTS = ("aliases", "depth", "latin1", "bom", "empty", "family")
DEEP = st.sampled_from([65, 200, 5_000, 50_000])  # nesting levels; the limit is 64


@dataclass
class Case:
    format: str
    fault: str
    files: dict[str, bytes]
    target: str
    problems: list[tuple[str, int]] = field(default_factory=list)  # (file name, line), in order
    ids: list[str] = field(default_factory=list)  # for valid cases: the item ids, in order

    @property
    def valid(self) -> bool:
        return not self.problems


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _row(number: int) -> dict[str, Any]:
    return {
        "id": f"r{number}",
        "model": "relay-chat-small",
        "prompt": f"question {number} é",
        "max_tokens": 16,
    }


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = [",".join(columns)]
    lines += [",".join(str(row.get(column, "")) for column in columns) for row in rows]
    return "\n".join(lines) + "\n"


def _parquet(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {column: pa.array([str(row.get(column, "")) for row in rows], pa.string()) for column in columns}
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _batch_line(row: dict[str, Any]) -> str:
    url = "/v1/messages" if row.get("kind") == "messages" else "/v1/chat/completions"
    body: dict[str, Any] = {
        "model": row["model"],
        "messages": [{"role": "user", "content": row["prompt"]}],
        "max_tokens": int(row["max_tokens"]),
    }
    if "metadata" in row:
        body["metadata"] = "__DEEP__"
    line = json.dumps(
        {"custom_id": row["id"], "method": "POST", "url": url, "body": body}, ensure_ascii=False
    )
    return line.replace('"__DEEP__"', row["metadata"]) if "metadata" in row else line


def _bom(text: str, encoding: str) -> bytes:
    if encoding == "utf-16-be":
        return codecs.BOM_UTF16_BE + text.encode("utf-16-be")
    return text.encode(encoding)


@st.composite
def table_cases(draw: st.DrawFn, fmt: str) -> Case:
    """A table shortcut (CSV, JSONL, Parquet) or an OpenAI Batch file with one fault."""
    fault = draw(
        st.sampled_from(
            [f for f in FAULTS if f != "aliases" and not (fmt == "parquet" and f in ("latin1", "bom"))]
        )
    )
    count = draw(st.integers(1, 30))
    at = draw(st.integers(0, count - 1))
    rows = [_row(number) for number in range(count)]
    columns = ["id", "model", "prompt", "max_tokens"]
    name = {"csv": "rows.csv", "jsonl": "rows.jsonl", "parquet": "rows.parquet", "batch": "batch.jsonl"}[fmt]
    first_line = 2 if fmt == "csv" else 1  # CSV rows start after the header; Parquet counts rows
    encoding = "utf-8"
    if fault == "depth":
        rows[at]["metadata"] = _deep(draw(DEEP) if fmt != "csv" else draw(st.sampled_from([65, 200])))
        columns.append("metadata")
    elif fault == "family":
        rows[at].update(kind="messages", model="relay-chat-small")  # messages on a chat-family model
        columns.insert(1, "kind")
    elif fault == "bom":
        encoding = draw(st.sampled_from(["utf-8-sig", "utf-16", "utf-16-be"]))
    if fault == "empty":
        rows = []
    if fmt == "parquet":
        content = _parquet(rows, columns)  # a cell of JSON text is parsed like a CSV cell
    elif fmt == "csv":
        text = "" if fault == "empty" and draw(st.booleans()) else _csv(rows, columns)
        content = _bom(text, encoding)
    elif fmt == "jsonl":
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        if fault == "depth":
            text = text.replace(json.dumps(rows[at]["metadata"]), rows[at]["metadata"])
        content = _bom(text, encoding)
    else:
        content = _bom("".join(_batch_line(row) + "\n" for row in rows), encoding)
    if fault == "latin1":
        content = content.decode("utf-8").encode("latin-1")  # every prompt has an é: the first row fails
        return Case(fmt, fault, {name: content}, name, problems=[(name, first_line)])
    if fault == "bom":
        return Case(fmt, fault, {name: content}, name, ids=[row["id"] for row in rows])
    if fault == "empty":
        return Case(fmt, fault, {name: content}, name, problems=[(name, 1)])
    return Case(fmt, fault, {name: content}, name, problems=[(name, first_line + at)])


@st.composite
def yaml_cases(draw: st.DrawFn) -> Case:
    """A YAML manifest with inline rows and one fault."""
    fault = draw(st.sampled_from(FAULTS))
    count = draw(st.integers(1, 20))
    lines = ["run: {name: prop}", "jobs:", "  - name: ask", "    kind: chat", "    model: relay-chat-small"]
    lines += ["    prompt: '{q}'", "    request:", "      max_tokens: 16"]
    problems: list[tuple[str, int]] = []
    if fault == "aliases":
        lines.append("      a0: &a0 [x, x, x, x, x, x, x, x, x, x]")
        for level in range(1, draw(st.integers(5, 9))):
            lines.append(f"      a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
            if level == 4:  # 12,330 values repeated before this line; its eighth alias crosses 100,000
                problems.append(("m.yaml", len(lines)))
    elif fault == "depth":
        lines.append(f"      nested: {_deep(draw(DEEP))}")
        problems.append(("m.yaml", len(lines)))
    elif fault == "family":
        lines[4] = "    model: relay-claude-haiku"
        problems.append(("m.yaml", 5))
    lines.append("    items:" if fault != "empty" else "    items: []")
    if fault == "empty":
        problems.append(("m.yaml", len(lines)))
    else:
        lines += [f"      - {{q: question {number} é, id: r{number}}}" for number in range(count)]
    text = "\n".join(lines) + "\n"
    if fault == "latin1":
        first = next(number for number, line in enumerate(lines, start=1) if "é" in line)
        problems.append(("m.yaml", first))
        return Case("yaml", fault, {"m.yaml": text.encode("latin-1")}, "m.yaml", problems=problems)
    if fault == "bom":
        encoding = draw(st.sampled_from(["utf-8-sig", "utf-16", "utf-16-be"]))
        return Case(
            "yaml", fault, {"m.yaml": _bom(text, encoding)}, "m.yaml", ids=[f"r{n}" for n in range(count)]
        )
    return Case("yaml", fault, {"m.yaml": text.encode()}, "m.yaml", problems=problems)


def any_case() -> st.SearchStrategy[Case]:
    return st.one_of(yaml_cases(), *(table_cases(fmt) for fmt in ("csv", "jsonl", "parquet", "batch")))
