"""Exports that know what they were written from, so an unchanged store is not exported again.

A results or ledger Parquet file carries, in its footer's key-value metadata, the change mark of
the store it was exported from (``CheckpointStore.change_mark``, ``CostStore.change_mark``: text
that moves with every write that can change what the export reads), the kind of export and the
relaybatch version that wrote it. Exporting again from a store whose mark is the one a file
carries would write the same rows, so the file is kept: a no-op re-run of a finished
million-item run reads two footers instead of rewriting a gigabyte. Any doubt (no mark, an
unreadable footer, another relaybatch version) means the file is written again.

The mark says what the file was exported from, not that it is unchanged since: a file edited in
place by a tool that keeps the footer's metadata (``pyarrow.parquet.write_table`` of a table read
from it does) still carries it. So an export asked for by the user (`relaybatch export`) is made
under ``rewriting()``, which trusts no mark: every file is written again from the store.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from relaybatch import __version__

MARK_KEY = b"relaybatch.export"
# Set by ``rewriting()``: the exports made meanwhile (in this thread or task) keep no file.
_REWRITING = contextvars.ContextVar("relaybatch_export_rewriting", default=False)


@contextlib.contextmanager
def rewriting() -> Iterator[None]:
    """Exports made inside write every file again, whatever mark it carries (a rebuild)."""
    token = _REWRITING.set(True)
    try:
        yield
    finally:
        _REWRITING.reset(token)


def marked(schema: Any, kind: str, mark: str) -> Any:
    """``schema`` (a pyarrow Schema) with the export's mark in its metadata."""
    metadata = dict(schema.metadata or {})
    metadata[MARK_KEY] = _mark_text(kind, mark).encode()
    return schema.with_metadata(metadata)


def is_current(path: Path, kind: str, mark: str) -> bool:
    """Whether ``path`` is an export of ``kind`` written by this relaybatch from a store at ``mark``
    (always False inside ``rewriting()``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if _REWRITING.get() or not path.is_file():
        return False
    try:
        metadata = pq.read_metadata(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return metadata.get(MARK_KEY) == _mark_text(kind, mark).encode()


def _mark_text(kind: str, mark: str) -> str:
    return json.dumps({"kind": kind, "mark": mark, "relaybatch": __version__}, sort_keys=True)
