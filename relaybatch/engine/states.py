"""The item state machine (DESIGN.md): states, and which moves between them are allowed.

    pending -> sending -> done | failed | submitted | uncertain | pending (retryable, not billed)
    submitted -> polling | done | failed | cancelled        (async kinds: V2 video, V1 tasks)
    polling -> done | failed | cancelled
    uncertain -> pending                                    (only when the run's policy resends)
    failed -> pending                                       (a later run retries retryable failures)

Every transition is one SQLite write (see store.py).
"""

from __future__ import annotations

PENDING, SENDING, SUBMITTED, POLLING = "pending", "sending", "submitted", "polling"
DONE, FAILED, CANCELLED, UNCERTAIN = "done", "failed", "cancelled", "uncertain"

ALL_STATES = (PENDING, SENDING, SUBMITTED, POLLING, DONE, FAILED, CANCELLED, UNCERTAIN)
TERMINAL_STATES = frozenset({DONE, FAILED, CANCELLED, UNCERTAIN})
# Remote work exists and is paid for: these items are polled, never created again.
REMOTE_STATES = frozenset({SUBMITTED, POLLING})

ALLOWED: dict[str, frozenset[str]] = {
    PENDING: frozenset({SENDING}),
    SENDING: frozenset({DONE, FAILED, SUBMITTED, UNCERTAIN, PENDING}),
    SUBMITTED: frozenset({POLLING, DONE, FAILED, CANCELLED}),
    POLLING: frozenset({DONE, FAILED, CANCELLED}),
    UNCERTAIN: frozenset({PENDING}),
    FAILED: frozenset({PENDING}),
    DONE: frozenset(),
    CANCELLED: frozenset(),
}


def is_allowed(old: str, new: str) -> bool:
    return new in ALLOWED.get(old, frozenset())
