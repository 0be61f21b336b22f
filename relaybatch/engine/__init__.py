"""The engine: checkpointed execution of items against the gateway, and its outputs."""

from relaybatch.engine.outputs import export_results, write_parquet_atomically
from relaybatch.engine.runner import RunSummary, execute
from relaybatch.engine.store import TERMINAL_STATES, CheckpointStore

__all__ = [
    "TERMINAL_STATES",
    "CheckpointStore",
    "RunSummary",
    "execute",
    "export_results",
    "write_parquet_atomically",
]
