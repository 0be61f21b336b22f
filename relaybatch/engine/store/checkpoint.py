"""``CheckpointStore``: the face of the store package, one class made of its concerns."""

from __future__ import annotations

from relaybatch.engine.store.absorbing import Absorbing
from relaybatch.engine.store.executions import ExecutionRecords
from relaybatch.engine.store.reads import Reads


class CheckpointStore(Absorbing, Reads, ExecutionRecords):
    """Items, their states and results for one run, in one SQLite file.

    Opened for writing (``CheckpointStore(path)``: created, or migrated from an earlier layout) or
    read-only beside a writer (``CheckpointStore.open_read_only``): base.py. The run's row: runs.py;
    its executions: executions.py;
    state changes: writes.py; planning and the plan's fingerprint: planning.py; folding a shard's
    store: absorbing.py; reads: reads.py."""
