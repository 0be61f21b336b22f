"""`relaybatch run` never loads pandas (about 50 MB), yet code that wants pandas still gets it."""

import subprocess
import sys

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


def test_the_run_layer_keeps_pandas_out_until_someone_asks_for_it() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
