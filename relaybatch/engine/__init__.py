"""The engine: checkpointed execution of items against the gateway, and its outputs.

The API for flows is documented at the top of docs/engine.md. Code outside the engine imports this
face, or the store's own (``relaybatch.engine.store``); the other modules are internal: ``runner.py``
(the workers and sending), ``feeding.py`` (the feeder), ``execution_settings.py`` (its settings and summary),
``send_failures.py`` (what a failed send leaves), ``execution_progress.py`` (its figures),
``poller.py`` and ``poll_plan.py`` (async kinds), ``kinds.py`` (per-kind calls), ``states.py``
(the item state machine), ``limiter.py``, ``progress.py``, ``writer.py`` (group commits),
``outcomes.py``, ``spend.py`` (the spend seam), ``normalize.py``, ``result_columns.py`` and
``outputs.py`` (results Parquet), ``media.py``, ``reasks.py``, ``render_slots.py``,
``send_windows.py``, ``stop_waits.py``, ``collection.py``, ``resume.py``.
"""

from relaybatch.engine.limiter import AdaptiveTokenBucket
from relaybatch.engine.outputs import export_results
from relaybatch.engine.poller import PollSettings
from relaybatch.engine.progress import PlainProgress, ProgressReporter, RichProgress, Snapshot, progress_for
from relaybatch.engine.reasks import OutputCheck
from relaybatch.engine.runner import EngineSettings, RunSummary, execute, mark_interrupted_sends
from relaybatch.engine.spend import BilledCall, SpendGuard
from relaybatch.engine.states import (
    ALL_STATES,
    ALLOWED,
    CANCELLED,
    DONE,
    FAILED,
    PENDING,
    POLLING,
    REMOTE_STATES,
    SENDING,
    SUBMITTED,
    SUPERSEDED,
    TERMINAL_STATES,
    UNCERTAIN,
    IllegalTransition,
)
from relaybatch.engine.store import Change, CheckpointStore

__all__ = [
    "ALLOWED",
    "ALL_STATES",
    "CANCELLED",
    "DONE",
    "FAILED",
    "PENDING",
    "POLLING",
    "REMOTE_STATES",
    "SENDING",
    "SUBMITTED",
    "SUPERSEDED",
    "TERMINAL_STATES",
    "UNCERTAIN",
    "AdaptiveTokenBucket",
    "BilledCall",
    "Change",
    "CheckpointStore",
    "EngineSettings",
    "IllegalTransition",
    "OutputCheck",
    "PlainProgress",
    "PollSettings",
    "ProgressReporter",
    "RichProgress",
    "RunSummary",
    "Snapshot",
    "SpendGuard",
    "execute",
    "export_results",
    "mark_interrupted_sends",
    "progress_for",
]
