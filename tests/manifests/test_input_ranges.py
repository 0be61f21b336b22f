"""Partitions by input range: every row in exactly one partition, numbered as a whole read numbers it.

Whatever the split, the partitions' items together are the manifest's items, in order, with the
same keys, ids and lines: a partition reads only its own rows and names them as the whole would.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from relaybatch.manifests import open_manifest
from relaybatch.manifests.ranges import from_json, split, to_json


def whole_and_parts(
    manifest_path: Path, count: int
) -> tuple[list[tuple[str, str, str]], list[list[tuple[str, str, str]]]]:
    manifest = open_manifest(manifest_path)
    assert manifest.validate().ok
    whole = [(item.key, item.item_id, str(item.source)) for item in manifest.iter_items()]
    parts = []
    for ranges in split(manifest, count):
        ranges = from_json(to_json(ranges))  # as they travel to a worker
        again = open_manifest(manifest_path)
        assert again.validate(starts=ranges).ok
        parts.append([(item.key, item.item_id, str(item.source)) for item in again.iter_items(ranges)])
    return whole, parts


def csv_rows(rows: int) -> str:
    lines = ["id_free,prompt"]
    for n in range(rows):
        if n % 7 == 3:
            lines.append(f'x{n},"a cell over\ntwo lines, with ""quotes"" {n}"')
        elif n % 11 == 5:
            lines.append("")  # a blank line: no row
            lines.append(f"x{n},after a blank line {n}")
        else:
            lines.append(f"x{n},plain row {n}")
    return "\n".join(lines) + "\n"


def yaml_for(data: str) -> str:
    return (
        f"jobs:\n  - {{name: j, kind: chat, model: relay-chat-small, prompt: '{{prompt}}', data: {data}}}\n"
    )


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 60])
def test_csv_byte_ranges_with_quoted_line_breaks_and_blank_lines(tmp_path: Path, count: int) -> None:
    (tmp_path / "d.csv").write_text(csv_rows(40))
    (tmp_path / "m.yaml").write_text(yaml_for("d.csv"))

    whole, parts = whole_and_parts(tmp_path / "m.yaml", count)

    assert len(parts) == count
    assert [row for part in parts for row in part] == whole  # each row once, in order, same ids and lines
    assert len(whole) == 40


@pytest.mark.parametrize("count", [1, 3, 7])
def test_jsonl_byte_ranges(tmp_path: Path, count: int) -> None:
    lines = [f'{{"prompt": "row {n}"}}' if n % 5 else "" for n in range(30)]
    (tmp_path / "d.jsonl").write_text("\r\n".join(lines))  # CRLF, no line break at the end
    (tmp_path / "m.yaml").write_text(yaml_for("d.jsonl"))

    whole, parts = whole_and_parts(tmp_path / "m.yaml", count)

    assert [row for part in parts for row in part] == whole
    assert len(whole) == 24


@pytest.mark.parametrize("count", [1, 2, 4, 9])
def test_parquet_row_groups(tmp_path: Path, count: int) -> None:
    table = pa.table({"prompt": [f"row {n}" for n in range(50)]})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=8)  # 7 row groups
    (tmp_path / "m.yaml").write_text(yaml_for("d.parquet"))

    whole, parts = whole_and_parts(tmp_path / "m.yaml", count)

    assert [row for part in parts for row in part] == whole
    if count == 4:
        assert [len(part) for part in parts] == [8, 16, 16, 10]  # whole row groups: 1, 2, 2, 2 of 7


def test_inline_items_and_a_csv_manifest(tmp_path: Path) -> None:
    items = ", ".join(f"{{prompt: 'item {n}'}}" for n in range(10))
    (tmp_path / "m.yaml").write_text(
        "jobs:\n  - {name: j, kind: chat, model: relay-chat-small, prompt: '{prompt}', "
        f"items: [{items}]}}\n"
    )
    (tmp_path / "c.csv").write_text(
        "model,prompt\n" + "".join(f"relay-chat-small,prompt {n}\n" for n in range(13))
    )

    for manifest in ("m.yaml", "c.csv"):
        whole, parts = whole_and_parts(tmp_path / manifest, 4)
        assert [row for part in parts for row in part] == whole
        assert all(parts)  # every partition has rows
