"""Arrow's memory for the Parquet writers: the C library's allocator, and freed memory given back.

pyarrow's wheels allocate through a bundled mimalloc by default, which keeps freed memory for
reuse instead of giving it back to the system: writing a results file of 200,000 chat items in
row groups of 10,000 rows left the process's peak about 45 MB higher with mimalloc than with the
system allocator (175 against 129 MB, the same store, one process each; the ledger 150 against
132 MB; benchmarks/RESULTS.md, issue 19 target 2), and the peak of `relaybatch run` is what a
user's machine must hold. The writers hand Arrow a few megabytes at a time, so the allocator's
speed does not show (the export's CPU was the same within 5 %).

The pool is chosen once per process, when pyarrow is imported (``ARROW_DEFAULT_MEMORY_POOL``):
importing relaybatch sets that default unless pyarrow is already imported or the user chose a
pool. ``release_unused`` after each row group gives freed memory back whatever the pool is (the
system pool trims the C heap, which also returns what SQLite's page caches freed).
"""

from __future__ import annotations

import os
import sys

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_system_allocator() -> None:
    """Before pyarrow is imported: make the system allocator its default pool, unless chosen."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault(ARROW_POOL_VARIABLE, "system")


def release_unused() -> None:
    """Give memory that Arrow's pool holds free back to the system (cheap: once per row group)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
