"""relaybatch: a batch job runner for the Model Relay Gateway.

From Python (a notebook): ``relaybatch.Run`` runs a manifest, or a table with its ``relaybatch.Job``
described in Python, and gives plan, status, results and ledger back as pandas DataFrames
(docs/python-api.md). They are imported when first used: `relaybatch run` never loads them.
"""

from typing import TYPE_CHECKING, Any

from relaybatch.arrow_memory import prefer_system_allocator

prefer_system_allocator()  # before anything imports pyarrow (arrow_memory.py says why)

__version__ = "0.1.0"

__all__ = ["Job", "Run", "__version__"]

if TYPE_CHECKING:
    from relaybatch.api import Job, Run


def __getattr__(name: str) -> Any:
    # The API (and the run layer under it) only for who asks: the CLI imports this package first.
    if name in ("Job", "Run"):
        import relaybatch.api

        return getattr(relaybatch.api, name)
    raise AttributeError(f"module 'relaybatch' has no attribute {name!r}")
