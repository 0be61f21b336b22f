"""Files written whole: the final name appears complete or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relaybatch.costs.ledger import CostStore, write_ledger
from relaybatch.engine.media import MediaFiles
from relaybatch.files import replaced_atomically, write_bytes_atomically, write_text_atomically


def test_a_written_file_appears_under_its_name_and_nothing_else_is_left(tmp_path: Path) -> None:
    path = write_bytes_atomically(tmp_path / "deep" / "out.bin", b"data")

    assert path.read_bytes() == b"data"
    assert [entry.name for entry in path.parent.iterdir()] == ["out.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "results.parquet"
    path.write_bytes(b"old")

    with pytest.raises(RuntimeError), replaced_atomically(path) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("crash half way")

    assert path.read_bytes() == b"old"
    assert [entry.name for entry in tmp_path.iterdir()] == ["results.parquet"]


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(gone.stdout)


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of another process alive until the test ends (one writing a file, as it were)."""
    writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield writer.pid
    finally:
        writer.communicate()


def _write_ledger(run_dir: Path) -> Path:
    store = CostStore(run_dir / "costs.sqlite")
    try:
        return write_ledger(store, run_dir / "ledger.parquet")
    finally:
        store.close()


WRITERS: dict[str, Callable[[Path], Path]] = {
    "ledger": _write_ledger,
    "media": lambda run_dir: run_dir / MediaFiles(run_dir, "key").write(0, "png", b"\x89PNG"),
    "dashboard": lambda run_dir: write_text_atomically(run_dir / "dashboard.html", "<html></html>"),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_removes_what_a_killed_writer_left_and_keeps_a_live_one_s(
    writer: str, dead_pid: int, live_pid: int, tmp_path: Path
) -> None:
    """A process killed outright (SIGKILL, the OOM killer) runs no clean-up: its temporary stays
    beside the file until the next write into that folder removes it. The temporary of a live
    process is another writer at work (`relaybatch export` beside a run's own export): kept."""
    run_dir = tmp_path / "run"
    folder = {"media": run_dir / "media"}.get(writer, run_dir)
    folder.mkdir(parents=True)
    name = {"ledger": "ledger.parquet", "media": "key-0.png", "dashboard": "dashboard.html"}[writer]
    killed = folder / f".{name}.tmp-{dead_pid}"
    killed_elsewhere = folder / f".other.bin.tmp-{dead_pid}"
    writing = folder / f".{name}.tmp-{live_pid}"
    for path in (killed, killed_elsewhere, writing):
        path.write_bytes(b"half a file")

    written = WRITERS[writer](run_dir)

    assert written.parent == folder and written.name == name
    assert not killed.exists() and not killed_elsewhere.exists()
    assert writing.read_bytes() == b"half a file"
    assert {path.name for path in folder.iterdir() if path.name.startswith(".")} == {writing.name}


def test_a_leftover_of_this_pid_was_left_by_an_earlier_process(tmp_path: Path) -> None:
    """A container restarted gives its process the same pid: a temporary of this pid that this
    process is not writing was left by an earlier one."""
    leftover = tmp_path / f".earlier.bin.tmp-{os.getpid()}"
    leftover.write_bytes(b"half a file")
    with replaced_atomically(tmp_path / "slow.bin") as temporary:
        temporary.write_bytes(b"in progress")
        write_bytes_atomically(tmp_path / "quick.bin", b"done")
        assert temporary.read_bytes() == b"in progress"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["quick.bin", "slow.bin"]
