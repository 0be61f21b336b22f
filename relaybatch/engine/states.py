"""The item state machine (DESIGN.md): states, and which moves between them are allowed.

    pending -> sending -> done | failed | submitted | uncertain | pending (retryable, not billed)
    pending -> done                                         (reused: another run's done answer to
                                                             the same request key, ``run.reuse``)
    submitted -> polling | done | failed | cancelled        (async kinds: V2 video, V1 tasks)
    polling -> done | failed | cancelled
    uncertain -> pending                                    (the run's policy resends, or the bill
                                                             shows no charge: `relaybatch resolve`)
    uncertain -> failed                                     (the bill shows a charge: paid, its answer
                                                             never recorded; `relaybatch resolve`)
    failed -> pending                                       (a later run retries retryable failures)
    failed -> polling                                       (a later run re-polls paid work whose
                                                             polls failed: never created again)
    pending | failed | uncertain | done -> superseded       (the manifest no longer produces the item)
    superseded -> pending | done                            (an edit was undone: the item is back)

Some writes keep their state and only change columns: a structured answer asked again stays
``sending`` and counts the re-ask in its attempts (``sending -> sending`` **only with more attempts
than the item has**, ``is_reask``: a second claim of an item already sending, which carries the
attempts it read, is still refused; engine/reasks.py); a submitted or polling item whose polls
keep failing records the reason (``submitted -> submitted``, ``polling -> polling``), and a done
item of a polled kind whose media files are missing gets them, or the reason it could not
(``done -> done``; poller.py, "Missing media").

Every transition is one SQLite write, checked against ``ALLOWED`` where it is written
(``CheckpointStore.apply``): an illegal move raises ``IllegalTransition`` and nothing of its
transaction is kept.
"""

from __future__ import annotations

PENDING, SENDING, SUBMITTED, POLLING = "pending", "sending", "submitted", "polling"
DONE, FAILED, CANCELLED, UNCERTAIN = "done", "failed", "cancelled", "uncertain"
SUPERSEDED = "superseded"

# Not an item state: the name of the run-level checkpoint event that records the limiter's limit
# and 429 count when they change (the dashboard draws them over time).
LIMITER_EVENT = "limiter"

ALL_STATES = (PENDING, SENDING, SUBMITTED, POLLING, DONE, FAILED, CANCELLED, UNCERTAIN, SUPERSEDED)
# Nothing more will happen to these items in this execution (a progress bar counts them as finished).
TERMINAL_STATES = frozenset({DONE, FAILED, CANCELLED, UNCERTAIN, SUPERSEDED})
# Remote work exists and is paid for: these items are polled, never created again.
REMOTE_STATES = frozenset({SUBMITTED, POLLING})
# Work is or may be under way at the gateway: such an item is never superseded (it would be lost).
IN_FLIGHT_STATES = frozenset({SENDING, SUBMITTED, POLLING})
SUPERSEDABLE_STATES = frozenset({PENDING, FAILED, UNCERTAIN, CANCELLED, DONE})
# Done, paid for, or possibly paid for: no other store of the run may send these again.
SETTLED_STATES = frozenset({DONE, SENDING, SUBMITTED, POLLING, UNCERTAIN})

ALLOWED: dict[str, frozenset[str]] = {
    PENDING: frozenset({SENDING, SUPERSEDED, DONE}),
    SENDING: frozenset({DONE, FAILED, SUBMITTED, UNCERTAIN, PENDING}),
    SUBMITTED: frozenset({SUBMITTED, POLLING, DONE, FAILED, CANCELLED}),
    POLLING: frozenset({POLLING, DONE, FAILED, CANCELLED}),
    UNCERTAIN: frozenset({PENDING, FAILED, SUPERSEDED}),
    FAILED: frozenset({PENDING, POLLING, SUPERSEDED}),
    DONE: frozenset({DONE, SUPERSEDED}),
    CANCELLED: frozenset({SUPERSEDED}),
    SUPERSEDED: frozenset({PENDING, DONE}),
}


class IllegalTransition(RuntimeError):
    """A write tried a move the state machine forbids: a programming error, never user input."""

    def __init__(self, key: str, old: str | None, new: str) -> None:
        self.key, self.old, self.new = key, old, new
        where = f"from '{old}'" if old is not None else "(no such item)"
        super().__init__(f"item {key}: illegal state change {where} to '{new}'")


def is_allowed(old: str, new: str) -> bool:
    return new in ALLOWED.get(old, frozenset())


def is_reask(old: str, new: str, old_attempts: int, new_attempts: object) -> bool:
    """``sending -> sending`` that counts one more request: a structured answer asked again. Not in
    ``ALLOWED``: the write path checks it beside the table, attempts and all."""
    return old == SENDING and new == SENDING and isinstance(new_attempts, int) and new_attempts > old_attempts


def allowed_pairs() -> list[str]:
    """Every allowed move as ``"old>new"``: the store checks writes against this list in SQL."""
    return sorted(f"{old}>{new}" for old, targets in ALLOWED.items() for new in targets)


# The ``retryable`` column of a failed item: what the next execution does with it.
RETRY_SEND = 1  # send it again (the gateway refused it with a retryable error: not billed)
RETRY_POLL = 2  # poll it again (its paid remote work exists; only the poll answers failed)
