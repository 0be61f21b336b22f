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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_system_allocator() -> None:
    """Before pyarrow is imported: make the system allocator its default pool, unless chosen."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault(ARROW_POOL_VARIABLE, "system")


def release_unused() -> None:
    """Give memory that Arrow's pool holds free back to the system (cheap: once per row group)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


class RowGroupWriter:
    """A Parquet writer that does all its work on a thread of its own, one row group at a time.

    A Parquet writer keeps every row group's metadata (about 55 KB for the ledger's 61 columns)
    until the footer is written. Made on the thread that also converts rows and reads SQLite, those
    small long-lived pieces land between that thread's short-lived buffers, and the C heap's pages
    can no longer be given back as the buffers are freed: writing a million-row ledger in 101 row
    groups left 11 MB more resident than twenty thousand rows, 5.5 of them the metadata itself. The
    C library gives each thread its own heap (arena), so the writer's thread keeps its metadata
    apart: 7 MB with the sort, 5.5 without (benchmarks/RESULTS.md, issue 19 target 2). A write
    waits for the thread, so memory holds one row group at a time as before.
    """

    def __init__(self, where: Path, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-writer")
        try:
            made = self._thread.submit(pq.ParquetWriter, where, schema)
            self._writer: pq.ParquetWriter | None = made.result()
        except BaseException:
            self._thread.shutdown()
            raise

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        assert self._writer is not None, "written after close"
        self._thread.submit(self._writer.write_table, table, row_group_size).result()

    def close(self) -> None:
        """Write the footer on the writer's thread, then end the thread. Also on an interruption
        (Ctrl-C while a row group is written): the thread finishes that row group first (a write
        cannot be cut short), then the file is closed."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                self._thread.submit(writer.close).result()
        finally:
            self._thread.shutdown(wait=True)

    def __enter__(self) -> RowGroupWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
