"""Hostile and messy input, property-based: every format with aliases, depth, encodings, byte-order
marks, empty files and wrong families.

Each generated input goes to `relaybatch validate` in a fresh process (so its peak memory is its
own): a faulty one must exit 1 with one `file:line:` message per problem and no traceback, under
300 MB and 10 CPU seconds; a messy but valid one (UTF-8 or UTF-16 with a byte-order mark) must
pass with the right item ids. In-process, `validate` and `run` of the faulty ones must send
nothing (the embedded emulator's request log does not move, beyond the free catalog read) and
never enter the run flow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile_inputs import Case, any_case
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator
from relaybatch.manifests import load_items

MAX_RSS_MIB = 300
MAX_CPU_SECONDS = 10  # CPU time, not wall time: on a shared machine a slow clock must not fail this
PROCESS_SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
IN_PROCESS_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@dataclass(frozen=True)
class Finished:
    code: int
    output: str
    peak_mib: float
    cpu_seconds: float


# Linux keeps a process's peak RSS across exec, and a child forked from this test process starts
# with the test process's pages: measured directly, every command would "use" what pytest does.
# So a small helper process starts the command and reads its peak and CPU time from os.wait4.
_MEASURE = """
import json, os, subprocess, sys
out = subprocess.PIPE
process = subprocess.Popen(json.loads(sys.argv[1]), stdout=out, stderr=subprocess.STDOUT, text=True)
output = process.stdout.read()
_, status, usage = os.wait4(process.pid, 0)
cpu = usage.ru_utime + usage.ru_stime
print(json.dumps([os.waitstatus_to_exitcode(status), output, usage.ru_maxrss, cpu]))
"""


def run_measured(arguments: list[str], cwd: Path) -> Finished:
    """Run a command in a fresh process; its exit code, output, own peak RSS and CPU seconds."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("RELAYBATCH_")}
    measured = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(arguments)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        check=True,
        timeout=300,
    )
    code, output, peak_kib, cpu_seconds = json.loads(measured.stdout)
    return Finished(code, output, peak_kib / 1024, cpu_seconds)


def _write(case: Case, folder: Path) -> Path:
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    return folder / case.target


def _check_refused(case: Case, folder: Path, code: int, output: str) -> None:
    what = f"{case.format}/{case.fault}"
    assert code == 1, f"{what}: exit {code}\n{output}"
    assert "Traceback" not in output, output
    count = len(case.problems)
    assert f"error: {count} problem{'s' if count != 1 else ''} in the manifest:" in output, (
        f"{what}: {output}"
    )
    lines = output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("error: "))
    found = [line for line in lines[start + 1 :] if line.strip()]
    assert len(found) == count, f"{what}: {output}"
    for line, (name, number) in zip(found, case.problems, strict=True):
        assert line.startswith(f"{folder / name}:{number}: "), f"{what}: {line}"


@PROCESS_SETTINGS
@given(case=any_case())
def test_validate_in_a_fresh_process_names_each_fault_once_in_bounded_memory(
    case: Case, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("hostile")
    path = _write(case, folder)
    finished = run_measured([sys.executable, "-m", "relaybatch", "validate", str(path)], folder)
    if case.valid:
        assert finished.code == 0, finished.output
        assert f"valid, {len(case.ids)} items" in finished.output
    else:
        _check_refused(case, folder, finished.code, finished.output)
    what = f"{case.format}/{case.fault}"
    assert finished.peak_mib < MAX_RSS_MIB, f"{what}: {finished.peak_mib:.0f} MiB"
    assert finished.cpu_seconds < MAX_CPU_SECONDS, f"{what}: {finished.cpu_seconds:.1f} CPU s"


def _sent() -> int:
    """Requests the embedded emulator has seen, other than the free catalog read."""
    state = embedded_emulator().state.emulator
    return int(state.total_requests - state.request_count("GET", "/v1/models"))


@IN_PROCESS_SETTINGS
@given(case=any_case())
def test_faulty_input_sends_nothing_and_never_starts_a_run(
    case: Case, tmp_path_factory: pytest.TempPathFactory, no_flow: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in os.environ if name.startswith("RELAYBATCH_")]:
        monkeypatch.delenv(name)
    folder = tmp_path_factory.mktemp("hostile")
    path = _write(case, folder)
    if case.valid:
        assert [item.item_id for item in load_items(path)] == case.ids
        return
    before = _sent()
    monkeypatch.setenv("RELAYBATCH_RUNS_DIR", str(folder / "runs"))
    for command in ("validate", "run"):
        result = CliRunner().invoke(app, [command, str(path)])
        # CliRunner turns an unhandled exception into exit 1 too: only a clean exit counts.
        assert isinstance(result.exception, SystemExit), f"{command}: {result.exception!r}"
        _check_refused(case, folder, result.exit_code, result.output)
    assert _sent() == before and no_flow == []
    assert not (folder / "runs").exists() or not any((folder / "runs").rglob("*.sqlite"))
