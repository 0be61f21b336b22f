"""Loading limits and encodings: each hostile or messy file is one located problem, never a traceback."""

# Expected messages are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from manifest_helpers import problems as _problems

from relaybatch.manifests import load_items
from relaybatch.manifests.limits import (
    MAX_ALIAS_VALUES,
    MAX_DEPTH,
    MAX_INLINE_ITEMS,
    MAX_REQUEST_BYTES,
    MAX_YAML_BYTES,
)

JOB = "jobs:\n  - {name: a, kind: chat, model: m, prompt: x, items: [{q: 1}]}\n"


def _alias_bomb(levels: int) -> str:
    lines = ["jobs:", "  - name: a", "    kind: chat", "    model: m", "    prompt: x", "    request:"]
    lines.append("      a0: &a0 [x, x, x, x, x, x, x, x, x, x]")
    for level in range(1, levels):
        lines.append(f"      a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
    lines.append("    items: [{q: 1}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [6, 9])
def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_limit(tmp_path: Path, levels: int) -> None:
    manifest = tmp_path / "bomb.yaml"
    manifest.write_text(_alias_bomb(levels))
    # 10 + 100 + 1,000 + 10,000 values so far; the fifth level's first alias repeats 10,000 more.
    assert _problems(manifest) == [
        f"{manifest}:11: aliases (*name) repeat more than {MAX_ALIAS_VALUES:,} values in this document; "
        "write the values out, or use fewer and smaller aliases"
    ]


def test_small_aliases_stay_usable(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "defaults: &defaults {max_tokens: 8}\n"
        "jobs:\n"
        "  - {name: a, kind: chat, model: m, prompt: x, request: *defaults, items: [{q: 1}]}\n"
        "  - {name: b, kind: chat, model: m, prompt: y, request: *defaults, items: [{q: 1}]}\n"
    )
    # `defaults` is not a manifest field: anchors belong inside the fields that use them.
    assert _problems(manifest) == [
        f"{manifest}:1: defaults: is not a manifest field; the fields here are run, jobs (docs/manifests.md)"
    ]
    manifest.write_text(
        "jobs:\n"
        "  - {name: a, kind: chat, model: m, prompt: x, request: &defaults {max_tokens: 8}, items: [{q: 1}]}\n"
        "  - {name: b, kind: chat, model: m, prompt: y, request: *defaults, items: [{q: 1}]}\n"
    )
    assert [item.request["max_tokens"] for item in load_items(manifest)] == [8, 8]


def test_an_alias_inside_itself_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("jobs:\n  - &job {name: a, kind: chat, model: m, prompt: x, items: [*job]}\n")
    assert _problems(manifest) == [
        f"{manifest}:2: alias *job refers to a value that contains it; write the value out"
    ]


def test_deep_nesting_is_refused_at_its_line(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("jobs:\n  - name: a\n    request: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert _problems(manifest) == [f"{manifest}:3: nests more than {MAX_DEPTH} levels deep; flatten it"]


def test_deep_json_in_rows_and_cells_is_a_row_problem(tmp_path: Path) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"model": "m", "prompt": "x"}\n{"model": "m", "prompt": "y", "a": ' + deep + "}\n")
    assert _problems(rows) == [
        f"{rows}:2: nests lists or objects more than {MAX_DEPTH} levels deep; flatten it"
    ]
    table = tmp_path / "table.csv"
    table.write_text(f"model,prompt,metadata\nm,x,{'[' * 70}{']' * 70}\n")
    assert _problems(table) == [
        f"{table}:2: metadata: nests lists or objects more than {MAX_DEPTH} levels deep; flatten it"
    ]


def test_a_yaml_manifest_past_its_size_limit_points_at_the_line_it_crosses(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    row = "      - {q: " + "x" * 1000 + "}\n"
    manifest.write_text(JOB.replace("items: [{q: 1}]", "items:") + row * (MAX_YAML_BYTES // len(row) + 1))
    (problem,) = _problems(manifest)
    crossing = 3 + MAX_YAML_BYTES // len(row)
    assert problem == (
        f"{manifest}:{crossing}: the YAML manifest is longer than 2 MB; "
        "put the rows in a data file (data: rows.csv, .jsonl or .parquet), which streams"
    )


def test_too_many_inline_items_is_one_problem_and_other_jobs_are_still_checked(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    rows = "".join(f"      - {{q: {n}}}\n" for n in range(MAX_INLINE_ITEMS + 1))
    manifest.write_text(
        "jobs:\n  - name: a\n    kind: chat\n    model: m\n    prompt: '{q}'\n    items:\n"
        + rows
        + "  - {name: b, kind: messages, model: m, prompt: x, items: [{q: 1}]}\n"
    )
    assert _problems(manifest) == [
        f"{manifest}:6: jobs[0].items: has {MAX_INLINE_ITEMS + 1:,} inline rows; a job holds at most "
        f"{MAX_INLINE_ITEMS:,} inline, put the rows in a data file (data: rows.csv, .jsonl or .parquet)",
        f"{manifest}:{MAX_INLINE_ITEMS + 8}: jobs[1].request.max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)",
    ]


def test_one_request_past_its_size_limit_is_refused(tmp_path: Path) -> None:
    # Each line is under the limit; the templates use its text twice, so the request is not.
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "small"}\n{"q": "' + "x" * (MAX_REQUEST_BYTES // 2 + 10) + '"}\n')
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "jobs:\n  - {name: a, kind: chat, model: m, prompt: '{q}', system: '{q}', data: rows.jsonl}\n"
    )
    (problem,) = _problems(manifest)
    assert problem.startswith(f"{rows}:2: request: is 20,971,")
    assert problem.endswith(" bytes of JSON; one request is at most 20 MB (20,971,520 bytes)")


def test_an_endless_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("model,prompt\nm," + "x" * (MAX_REQUEST_BYTES + 10))
    assert _problems(table) == [
        f"{table}:2: has a line longer than 20 MB; one row or request is at most that"
    ]


def test_a_big_cell_under_the_request_limit_is_read(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text(f"model,prompt\nm,{'x' * 200_000}\n")  # past the csv module's 128 KB default
    (item,) = load_items(table)
    assert len(item.request["messages"][0]["content"]) == 200_000


# --- encodings ---------------------------------------------------------------------------------


def test_excel_csv_utf8_with_a_byte_order_mark_reads_its_first_column(tmp_path: Path) -> None:
    table = tmp_path / "excel.csv"
    table.write_bytes(codecs.BOM_UTF8 + "id,model,prompt\r\nq1,m,café\r\n".encode())
    (item,) = load_items(table)
    assert item.item_id == "q1"
    assert item.request == {"model": "m", "messages": [{"role": "user", "content": "café"}]}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_utf16_and_bom_files_of_every_format_read_the_same(tmp_path: Path, encoding: str) -> None:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        data = text.encode(encoding)
        path.write_bytes(codecs.BOM_UTF16_BE + data if encoding == "utf-16-be" else data)
        return path

    table = write("t.csv", "id,model,prompt\nq1,m,héllo\n")
    assert [item.item_id for item in load_items(table)] == ["q1"]
    lines = write("l.jsonl", '{"id": "q1", "model": "m", "prompt": "héllo"}\n')
    assert [item.item_id for item in load_items(lines)] == ["q1"]
    batch = write(
        "b.jsonl",
        '{"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", '
        '"body": {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}}\n',
    )
    assert [item.item_id for item in load_items(batch)] == ["c1"]
    data = write("d.csv", "id,q\nq1,héllo\n")
    manifest = write("m.yaml", "jobs:\n  - {name: a, kind: chat, model: m, prompt: '{q}', data: d.csv}\n")
    assert data.exists() and [item.item_id for item in load_items(manifest)] == ["q1"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".yaml"])
def test_latin1_is_refused_at_its_first_bad_line(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"latin{suffix}"
    text = {
        ".csv": "id,model,prompt\nq1,m,fine\nq2,m,café\nq3,m,naïve\n",
        ".jsonl": '{"model": "m", "prompt": "fine"}\n{"model": "m", "prompt": "café"}\n',
        ".yaml": "jobs:\n  - {name: a, kind: chat, model: m, prompt: café, items: [{q: 1}]}\n",
    }[suffix]
    path.write_bytes(text.encode("latin-1"))
    line = {".csv": 3, ".jsonl": 2, ".yaml": 2}[suffix]
    assert _problems(path) == [
        f"{path}:{line}: is not UTF-8 text (Latin-1 or another legacy encoding?); "
        "save the file as UTF-8 (Excel: 'CSV UTF-8') and try again"
    ]


def test_a_bad_byte_deep_in_a_big_file_names_its_line(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    rows = "".join(f"q{n},m,question {n}\n" for n in range(20_000))
    table.write_bytes(b"id,model,prompt\n" + rows.encode() + b"q,m,caf\xe9\n")
    assert _problems(table)[0].startswith(f"{table}:20002: is not UTF-8 text")


def test_random_bytes_and_utf32_are_refused(tmp_path: Path) -> None:
    noise = tmp_path / "noise.yaml"
    noise.write_bytes(bytes(range(256)) * 4)  # line 1 is bytes 0 to 9, which are UTF-8
    (problem,) = _problems(noise)
    assert problem.startswith(f"{noise}:2: is not UTF-8 text")
    wide = tmp_path / "wide.csv"
    wide.write_bytes("model,prompt\nm,x\n".encode("utf-32"))
    assert _problems(wide) == [f"{wide}:1: is UTF-32 text; save it as UTF-8 and try again"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_utf16_without_a_byte_order_mark_and_nul_bytes_are_refused(tmp_path: Path, suffix: str) -> None:
    # Before, a BOM-less UTF-16 table read as UTF-8 and became rows with no model and no prompt.
    wide = tmp_path / f"wide{suffix}"
    text = {".csv": "id,model,prompt\nq1,m,x\n", ".jsonl": '{"model": "m", "prompt": "x"}\n'}[suffix]
    wide.write_bytes(text.encode("utf-16-le"))
    message = (
        "holds a NUL byte: UTF-16 without a byte-order mark, or not a text file? "
        "save it as UTF-8 (Excel: 'CSV UTF-8') and try again"
    )
    assert _problems(wide) == [f"{wide}:1: {message}"]
    table = tmp_path / f"nul{suffix}"
    table.write_bytes(text.encode() + text.splitlines()[-1].encode().replace(b"x", b"\x00x") + b"\n")
    assert _problems(table) == [f"{table}:{text.count(chr(10)) + 1}: {message}"]


# --- empty input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("e.csv", "", "is empty; a data file needs a header line and at least one row"),
        (
            "h.csv",
            "id,model,prompt\n",
            "has a header line but no rows; a data file needs a header line and at least one row",
        ),
        ("e.jsonl", "\n\n", "is empty; write one JSON object per line"),
        ("e.yaml", "", "is empty; a manifest needs `jobs:` (docs/manifests.md)"),
    ],
)
def test_empty_files_are_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert _problems(path) == [f"{path}:1: {message}"]


def test_empty_parquet_and_jobs_with_no_rows_are_errors(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = tmp_path / "e.parquet"
    pq.write_table(pa.table({"model": pa.array([], pa.string()), "prompt": pa.array([], pa.string())}), empty)
    assert _problems(empty) == [f"{empty}:1: has no rows; a data file needs at least one row"]
    (tmp_path / "h.csv").write_text("q\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "jobs:\n"
        "  - {name: a, kind: chat, model: m, prompt: x, items: []}\n"
        "  - {name: b, kind: chat, model: m, prompt: '{q}', data: h.csv}\n"
    )
    assert _problems(manifest) == [
        f"{manifest}:2: jobs[0].items: gives no rows; give at least one row",
        f"{tmp_path / 'h.csv'}:1: has a header line but no rows; a data file needs a header line and at least one row",
    ]


def test_a_parquet_column_nested_past_the_limit_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Structs: pyarrow itself refuses schemas past 100 levels, which lists (two levels each) reach first.
    nested: pa.DataType = pa.string()
    value: object = "x"
    for _ in range(MAX_DEPTH + 6):
        nested, value = pa.struct([("inner", nested)]), {"inner": value}
    table = tmp_path / "t.parquet"
    columns = {"model": pa.array(["m"]), "prompt": pa.array(["x"]), "deep": pa.array([value], nested)}
    pq.write_table(pa.table(columns), table)
    assert _problems(table) == [
        f"{table}:1: column 'deep' nests lists or objects more than {MAX_DEPTH} levels deep; flatten it"
    ]
