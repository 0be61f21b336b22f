"""The engine: checkpointed execution of items against the gateway, and its outputs.

The API for flows is documented at the top of docs/engine.md.
"""

from relaybatch.engine.limiter import AdaptiveTokenBucket
from relaybatch.engine.outputs import export_results, write_parquet_atomically
from relaybatch.engine.poller import PollSettings
from relaybatch.engine.progress import ProgressReporter, RichProgress, Snapshot
from relaybatch.engine.runner import EngineSettings, RunSummary, execute, mark_interrupted_sends
from relaybatch.engine.spend import BilledCall, SpendGuard
from relaybatch.engine.states import ALL_STATES, REMOTE_STATES, TERMINAL_STATES
from relaybatch.engine.store import Change, CheckpointStore

__all__ = [
    "ALL_STATES",
    "REMOTE_STATES",
    "TERMINAL_STATES",
    "AdaptiveTokenBucket",
    "BilledCall",
    "Change",
    "CheckpointStore",
    "EngineSettings",
    "PollSettings",
    "ProgressReporter",
    "RichProgress",
    "RunSummary",
    "Snapshot",
    "SpendGuard",
    "execute",
    "export_results",
    "mark_interrupted_sends",
    "write_parquet_atomically",
]
