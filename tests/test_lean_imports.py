"""`relaybatch run` never loads pandas (about 50 MB), yet code that wants pandas still gets it; and
pandas is not a dependency: relaybatch runs, exports and reports where it is not installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

SCRIPT = """
import sys
import pyarrow as pa
import relaybatch.run, relaybatch.costs
from relaybatch.costs.ledger import ledger_schema, ledger_table
ledger_table([[None] * len(ledger_schema())])
pa.array([1, 2, 3])
assert "pandas" not in sys.modules, "pandas was imported"
import sqlite_utils.db
assert sqlite_utils.db.pd is None
frame = pa.table({"a": [1, 2]}).to_pandas()
assert "pandas" in sys.modules and list(frame["a"]) == [1, 2]
print("ok")
"""

# The interpreter as it would be without pandas installed: ``import pandas`` fails everywhere,
# from the first import on (not only inside relaybatch.lean_imports).
WITHOUT_PANDAS = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.argv = ["relaybatch", *sys.argv[1:]]
from relaybatch.cli import main
main()
"""


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed here")
def test_the_run_layer_keeps_pandas_out_until_someone_asks_for_it() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _relaybatch_without_pandas(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
    env["RELAYBATCH_RUNS_DIR"] = str(tmp_path / "runs")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PANDAS, *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )


def test_a_run_its_export_and_its_report_need_no_pandas(tmp_path: Path) -> None:
    manifest = tmp_path / "three.csv"
    manifest.write_text("id,model,prompt\n" + "".join(f"q{n},relay-chat-small,Say {n}\n" for n in range(3)))

    ran = _relaybatch_without_pandas(tmp_path, "run", str(manifest))
    assert ran.returncode == 0, ran.stderr
    assert pq.read_table(tmp_path / "runs" / "three" / "results" / "three.parquet").num_rows == 3

    reported = _relaybatch_without_pandas(tmp_path, "report", "three", "--dashboards-dir", "dashboards")
    assert reported.returncode == 0, reported.stderr
    assert (tmp_path / "dashboards").is_dir() and any((tmp_path / "dashboards").iterdir())
    assert "pandas" not in ran.stderr + reported.stderr


API_SCRIPT = """
import sys
import relaybatch
relaybatch.Run, relaybatch.Job
assert "pandas" not in sys.modules, "pandas was imported"
print("ok")
"""


def test_the_python_api_loads_pandas_only_for_dataframes() -> None:
    # The CLI imports the package face first: its API names must cost nothing until used.
    done = subprocess.run([sys.executable, "-c", API_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
