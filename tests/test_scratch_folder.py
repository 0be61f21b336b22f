"""Planning's scratch folder: removed after the plan, and left over by a killed process only until
the next plan starts (tests/run/test_plan_fingerprint.py covers what is kept in it)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from relaybatch.files import scratch_folder

KILLED = """
import os, signal, sys
from relaybatch.files import scratch_folder
with scratch_folder(sys.argv[1]) as folder:
    (folder / "keys.sqlite").write_bytes(b"x" * 1000)
    print(folder, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does: no clean-up runs
"""


@pytest.fixture
def prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    return "relaybatch-plan-"


def test_a_killed_plans_scratch_is_removed_by_the_next_and_a_live_ones_is_not(
    prefix: str, tmp_path: Path
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, prefix], capture_output=True, text=True, env={"TMPDIR": str(tmp_path)}
    )
    assert killed.returncode == -9, killed.stderr
    left = Path(killed.stdout.strip())
    assert left.parent == tmp_path and (left / "keys.sqlite").exists()
    other = tmp_path / "relaybatch-plan-notes"  # not a scratch folder's name: not touched

    other.mkdir()
    with scratch_folder(prefix) as first, scratch_folder(prefix) as second:
        assert not left.exists()
        assert first.is_dir() and second.is_dir()  # this process's own are live, both of them
    assert not first.exists() and not second.exists() and other.is_dir()


def test_planning_removes_what_a_killed_plan_left(prefix: str, tmp_path: Path) -> None:
    from relaybatch.run import plan_run

    killed = subprocess.run(
        [sys.executable, "-c", KILLED, prefix], capture_output=True, text=True, env={"TMPDIR": str(tmp_path)}
    )
    left = Path(killed.stdout.strip())
    assert left.is_dir()
    manifest = tmp_path / "small.csv"
    manifest.write_text("id,model,prompt\nr1,relay-chat-small,hi\n")

    planned = plan_run(manifest, tmp_path / "runs")

    assert planned.added == 1 and not left.exists()
    assert not list(tmp_path.glob(f"{prefix}*"))  # and its own is gone too
