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
from it does) still carries it. So an export asked for by the user (`relaybatch export`) passes
``rewrite=True`` to the writers (``export_results``, ``write_ledger``): they trust no mark and
write every file again from the store. A parameter, not a context variable: a task started inside
a context would carry the rewrite on after it, and nothing at the call would show it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relaybatch import __version__

MARK_KEY = b"relaybatch.export"


def marked(schema: Any, kind: str, mark: str) -> Any:
    """``schema`` (a pyarrow Schema) with the export's mark in its metadata."""
    metadata = dict(schema.metadata or {})
    metadata[MARK_KEY] = _mark_text(kind, mark).encode()
    return schema.with_metadata(metadata)


def is_current(path: Path, kind: str, mark: str) -> bool:
    """Whether ``path`` is an export of ``kind`` written by this relaybatch from a store at ``mark``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return False
    try:
        metadata = pq.read_metadata(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return metadata.get(MARK_KEY) == _mark_text(kind, mark).encode()


def _mark_text(kind: str, mark: str) -> str:
    return json.dumps({"kind": kind, "mark": mark, "relaybatch": __version__}, sort_keys=True)
