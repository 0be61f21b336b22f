"""Keeping pandas out of `relaybatch run`: two libraries the stores and exports use import it
when it is installed, for features relaybatch never uses.

pandas is not a dependency of relaybatch (nothing in it uses pandas), but it is often installed
beside it (a notebook environment, a data team's virtualenv); both libraries work without it.

- sqlite-utils imports pandas (and numpy) when it is first imported, to convert their values on
  insert; the stores never insert any.
- pyarrow imports pandas the first time it converts Python values (``pa.array``), to ask whether
  they are a pandas object; the exports only ever hand it lists.

pandas costs the process about 50 MB of resident memory and half a second of CPU on a loaded
machine: the largest single item of `relaybatch run`'s peak (benchmarks/RESULTS.md, "End to
end"). Both are answered "no pandas here" once; code that really uses pandas later in the same
process (``Table.to_pandas()``, ``import pandas``) still gets it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator
from types import ModuleType


class _NoPandas(importlib.abc.MetaPathFinder):
    """A finder that answers "not installed" for pandas."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextlib.contextmanager
def pandas_hidden() -> Iterator[None]:
    """``import pandas`` raises ImportError inside (unless pandas is already imported)."""
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def import_sqlite_utils() -> ModuleType:
    """sqlite-utils, imported without pandas."""
    with pandas_hidden():
        import sqlite_utils
    return sqlite_utils


def arrow_without_pandas() -> None:
    """Let pyarrow ask its once-per-process question about pandas now, with pandas hidden."""
    import pyarrow as pa

    with pandas_hidden():
        pa.array([])
