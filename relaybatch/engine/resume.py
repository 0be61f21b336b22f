"""Getting a store ready to resume: what a crash or an earlier stop left behind.

Items left in ``sending`` may have been billed: by default they become ``uncertain`` (never resent
blindly; ``relaybatch status`` lists them); the ``resend`` policy sends them again. Items that
failed on retryable errors after their attempts ran out are tried again (the attempt budget is per
execution; `attempts` keeps counting every request sent). Submitted remote work
is not touched here: the poller picks it up (poller.load_remote_work).
"""

from __future__ import annotations

from typing import Literal

from relaybatch.engine.states import PENDING, POLLING, RETRY_POLL, RETRY_SEND, SENDING, UNCERTAIN
from relaybatch.engine.store import Change, CheckpointStore

UncertainPolicy = Literal["report", "resend"]

REPOLL_MESSAGE = "polled again: the item failed only because of poll answers"
INTERRUPTED_MESSAGE = "interrupted between send and answer: it may have been billed, so it was not resent"


def mark_interrupted_sends(store: CheckpointStore, policy: UncertainPolicy = "report") -> int:
    """Items left in ``sending`` by a crash may have been billed: report them, or resend by policy."""
    keys = store.keys_in_state(SENDING)
    if policy == "resend":
        store.apply([Change(key, PENDING, {}, "resent by the run's uncertain policy") for key in keys])
    else:
        store.apply(
            [Change(key, UNCERTAIN, {"last_error": INTERRUPTED_MESSAGE}, INTERRUPTED_MESSAGE) for key in keys]
        )
    return len(keys)


def prepare_resume(store: CheckpointStore, policy: UncertainPolicy) -> None:
    mark_interrupted_sends(store, policy)
    if policy == "resend":
        keys = store.keys_in_state(UNCERTAIN)
        store.apply([Change(key, PENDING, {}, "resent by the run's uncertain policy") for key in keys])
    # Failures that could succeed on another try (gave up after max attempts) go again with a fresh
    # budget (counted per execution by the engine); `attempts` keeps counting every request sent.
    retry = store.retryable_failures(RETRY_SEND)
    store.apply([Change(key, PENDING, {"retryable": None, "not_before": None}) for key in retry])
    # Paid remote work whose polls kept failing is polled again (poller.load_remote_work), never
    # created again.
    repoll = store.retryable_failures(RETRY_POLL)
    store.apply(
        [Change(key, POLLING, {"retryable": None, "finished_at": None}, REPOLL_MESSAGE) for key in repoll]
    )
