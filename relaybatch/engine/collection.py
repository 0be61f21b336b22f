"""Fewer garbage collections while a run executes.

CPython starts a young-generation collection every 700 net allocations of container objects. A
busy run allocates a few hundred per item (requests, answers, futures, rows), and with dozens of
requests in flight many of them survive a collection or two, so the collector keeps re-scanning
objects that are about to die anyway: about a fifth of the runner's CPU per chat item on the
end-to-end benchmark (benchmarks/RESULTS.md). Raising the young threshold for the length of a run
cuts that to almost nothing; memory stays bounded because the collector still runs, every
20,000 allocations instead of every 700. The previous thresholds come back when the last
concurrent run in the process ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD_DURING_RUNS = 20_000

_lock = threading.Lock()
_active = 0
_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            young, middle, old = _saved
            gc.set_threshold(max(young, YOUNG_THRESHOLD_DURING_RUNS), middle, old)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
