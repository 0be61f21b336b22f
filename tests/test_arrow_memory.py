"""Arrow allocates through the system allocator in relaybatch's processes, unless the user chose."""

import os
import subprocess
import sys

SCRIPT = """
import relaybatch.run
import pyarrow as pa
print(pa.default_memory_pool().backend_name)
"""


def backend(**environment: str) -> str:
    inherited = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}
    command = [sys.executable, "-c", SCRIPT]
    environment = {**inherited, **environment}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_system_allocator_by_default_and_the_users_choice_when_made() -> None:
    assert backend() == "system"
    assert backend(ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc"


def _thread_names() -> set[str]:
    import threading

    return {thread.name for thread in threading.enumerate()}


def test_the_row_group_writer_writes_what_parquets_own_writer_writes_and_ends_its_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from relaybatch.arrow_memory import RowGroupWriter

    schema = pa.schema([("n", pa.int64()), ("text", pa.string())])
    parts = [
        pa.table({"n": list(range(i, i + 5)), "text": [f"t{j}" for j in range(i, i + 5)]}, schema)
        for i in (0, 5, 10)
    ]
    with RowGroupWriter(tmp_path / "threaded.parquet", schema) as writer:
        for part in parts:
            writer.write_table(part)
        assert any(name.startswith("parquet-writer") for name in _thread_names())
    with pq.ParquetWriter(tmp_path / "plain.parquet", schema) as plain:
        for part in parts:
            plain.write_table(part)

    threaded, expected = (
        pq.ParquetFile(tmp_path / "threaded.parquet"),
        pq.ParquetFile(tmp_path / "plain.parquet"),
    )
    assert threaded.metadata.num_row_groups == expected.metadata.num_row_groups == 3
    assert threaded.read().equals(expected.read())
    assert not any(name.startswith("parquet-writer") for name in _thread_names())


def test_an_interrupted_row_group_writer_still_closes_its_file_and_ends_its_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from relaybatch.arrow_memory import RowGroupWriter

    schema = pa.schema([("n", pa.int64())])
    with pytest.raises(KeyboardInterrupt), RowGroupWriter(tmp_path / "cut.parquet", schema) as writer:
        writer.write_table(pa.table({"n": [1, 2, 3]}, schema))
        raise KeyboardInterrupt
    assert pq.read_table(tmp_path / "cut.parquet").column("n").to_pylist() == [1, 2, 3]
    assert not any(name.startswith("parquet-writer") for name in _thread_names())
    with pytest.raises(AssertionError, match="after close"):
        writer.write_table(pa.table({"n": [4]}, schema))
