"""Results Parquet: typed columns, judgment answers flattened, media paths, atomic files, rebuildable."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_fakes import FAST, ClientFactory
from engine_items import chat, every_kind, item

from relaybatch.engine import CheckpointStore, execute, export_results, outputs
from relaybatch.engine.outputs import safe_file_name


async def test_every_kind_exports_typed_columns(
    store: CheckpointStore, make_client: ClientFactory, tmp_path: Path
) -> None:
    store.add_items(every_kind())
    await execute(store, make_client(), settings=FAST)

    [path] = export_results(store, tmp_path / "results")
    table = pq.read_table(path)
    rows = {row["kind"]: row for row in table.to_pylist()}

    assert table.schema.field("answer_complaint").type == pa.float64()
    assert table.schema.field("answer_topic").type == pa.string()
    assert table.schema.field("answer_anger").type == pa.float64()
    assert table.schema.field("cost_usd").type == pa.decimal128(38, 18)
    assert table.schema.field("input_tokens").type == pa.int64()
    assert 0.0 <= rows["judgment"]["answer_complaint"] <= 1.0
    assert rows["judgment"]["answer_topic"] in ("billing", "delivery")
    assert rows["judgment"]["answer_anger_confidence"] is not None
    assert rows["chat"]["output_text"] and rows["chat"]["input_tokens"] > 0
    assert rows["image"]["media_paths"][0].endswith(".webp") or rows["image"]["media_paths"][0].startswith(
        "media/"
    )
    assert rows["video"]["media_paths"] and rows["video"]["remote_id"]
    assert rows["chat"]["input_id"] == "chat-1"
    assert all(row["state"] == "done" and row["error"] is None for row in rows.values())


def test_carried_columns_keep_their_type_and_failures_carry_the_reason(
    store: CheckpointStore, tmp_path: Path
) -> None:
    store.add_items(
        [
            item("chat", {"model": "m", "messages": [], "n": 1}, "a").model_copy(
                update={"carry": {"n": 1, "x": 0.5}}
            ),
            item("chat", {"model": "m", "messages": [], "n": 2}, "b").model_copy(
                update={"carry": {"n": 2, "x": 2}}
            ),
        ]
    )
    key = item("chat", {"model": "m", "messages": [], "n": 2}, "b").key
    store.transition(key, "sending")
    store.transition(key, "failed", last_error="400 invalid_request_error: bad", cost_usd=Decimal("0.25"))

    [path] = export_results(store, tmp_path)
    table = pq.read_table(path)

    assert table.schema.field("input_n").type == pa.int64()
    assert table.schema.field("input_x").type == pa.float64()
    failed = next(row for row in table.to_pylist() if row["state"] == "failed")
    assert failed["error"].startswith("400")
    assert failed["cost_usd"] == Decimal("0.25")


def test_export_replaces_the_file_whole_and_clears_half_written_ones(
    store: CheckpointStore, tmp_path: Path
) -> None:
    store.add_items([chat(1, job="q/../../etc"), chat(2, job="q/../../etc")])
    results = tmp_path / "results"
    results.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    (results / f".q_.._.._etc.parquet.tmp-{int(gone.stdout)}").write_bytes(b"half a file")

    [path] = export_results(store, results)

    assert path.parent == results and path.name == "q_.._.._etc.parquet"
    assert pq.read_table(path).num_rows == 2
    assert [p.name for p in results.iterdir()] == [path.name]


def test_export_leaves_the_file_another_live_process_is_writing(
    store: CheckpointStore, tmp_path: Path
) -> None:
    # `relaybatch export` beside a run's own export: removing the run's temporary file under it
    # would make its rename fail at the end of the run.
    store.add_items([chat(1)])
    results = tmp_path / "results"
    results.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        writing = results / f".other.parquet.tmp-{writer.pid}"
        writing.write_bytes(b"being written")

        export_results(store, results)

        assert writing.read_bytes() == b"being written"
    finally:
        writer.communicate()


def test_safe_file_names() -> None:
    assert safe_file_name("../../x") == "x"
    assert safe_file_name("daily report") == "daily_report"
    assert safe_file_name("...") == "job"


def test_export_converts_bounded_batches_into_whole_row_groups(
    store: CheckpointStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python values of a few rows at a time (memory stays flat), row groups of ROWS_PER_PART."""
    monkeypatch.setattr(outputs, "CONVERT_ROWS", 3)
    monkeypatch.setattr(outputs, "ROWS_PER_PART", 7)
    converted: list[int] = []
    record_batch = outputs._Batch.record_batch

    def counted(batch: outputs._Batch) -> pa.RecordBatch:
        converted.append(batch.rows)
        return record_batch(batch)

    monkeypatch.setattr(outputs._Batch, "record_batch", counted)
    store.add_items([chat(n) for n in range(20)])

    [path] = export_results(store, tmp_path)

    assert max(converted) == 3 and sum(converted) == 20
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)] == [7, 7, 6]
    ids = pq.read_table(path, columns=["item_id"]).column("item_id").to_pylist()
    assert ids == [f"chat-{n}" for n in range(20)]
