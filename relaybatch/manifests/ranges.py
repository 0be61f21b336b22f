"""A manifest's rows split into N input ranges, so a partition reads and plans only its own.

Each job's rows are cut into ``count`` contiguous ranges, one per partition:

- CSV and JSONL data files by bytes: partition k starts at the first record that begins at or
  after ``size * (k - 1) / count`` bytes. One binary pass over the file finds those offsets with
  the lines and rows before each (a CSV record ends at a line break outside quotes: an even number
  of quote marks so far), so a partition opens the file at its offset and numbers its rows and
  lines as a read of the whole file does (item ids by row number stay the same);
- Parquet data files by row groups (the writer's row-group size decides how fine the split is;
  the row counts come from the file's footer, nothing else is read);
- inline YAML items by position.

A job whose rows cannot be cut (a UTF-16 text file) is read whole by the first partition. A range
may be empty (more partitions than row groups, or than rows): its partition plans nothing for
that job. The split is made once, by whoever submits the partitions; each partition gets its
ranges (``RowsFrom`` per job index, JSON-able) and never reads the rest of a file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from relaybatch.manifests.manifest import Manifest
from relaybatch.manifests.sources import RowsFrom

# A range per job: job index -> where its rows begin and end (None: the whole job).
Ranges = dict[int, RowsFrom | None]
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")


def split(manifest: Manifest, count: int) -> list[Ranges]:
    """The manifest's rows as ``count`` partitions' ranges (each partition: one range per job)."""
    partitions: list[Ranges] = [{} for _ in range(count)]
    for index, job in enumerate(manifest.jobs):
        cuts = _cuts(Path(job.file), manifest, index, count) if job.rows_from is not None else None
        for number, ranges in enumerate(partitions):
            if cuts is None:
                if number == 0:
                    ranges[index] = None
                continue
            ranges[index] = cuts[number]
    return partitions


def to_json(ranges: Ranges) -> dict[str, Any]:
    """A partition's ranges as flow-parameter JSON."""
    return {
        str(index): None if start is None else [start.offset, start.lines, start.rows, start.until]
        for index, start in ranges.items()
    }


def from_json(value: dict[str, Any]) -> Ranges:
    return {
        int(index): None if start is None else RowsFrom(int(start[0]), int(start[1]), int(start[2]), start[3])
        for index, start in value.items()
    }


def _cuts(path: Path, manifest: Manifest, index: int, count: int) -> list[RowsFrom] | None:
    suffix = path.suffix.lower()
    if path == manifest.path.resolve() and suffix in (".yaml", ".yml"):
        return _item_cuts(manifest, index, count)
    if suffix == ".parquet":
        return _parquet_cuts(path, count)
    if suffix in (".csv", ".jsonl"):
        return _text_cuts(path, count, csv=suffix == ".csv")
    return None


def _item_cuts(manifest: Manifest, index: int, count: int) -> list[RowsFrom]:
    items = sum(1 for _ in manifest.jobs[index].rows())
    bounds = [items * number // count for number in range(count + 1)]
    return [RowsFrom(bounds[k], 0, bounds[k], bounds[k + 1]) for k in range(count)]


def _parquet_cuts(path: Path, count: int) -> list[RowsFrom] | None:
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(path).metadata
    except Exception:
        return None
    groups = metadata.num_row_groups
    rows = [metadata.row_group(group).num_rows for group in range(groups)]
    bounds = [groups * number // count for number in range(count + 1)]
    return [RowsFrom(bounds[k], 0, sum(rows[: bounds[k]]), bounds[k + 1]) for k in range(count)]


def _text_cuts(path: Path, count: int, csv: bool) -> list[RowsFrom] | None:
    """Record starts at or after each k/count of the file's size, with lines and rows before."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            if handle.read(2) in _WIDE_BOMS:
                return None
    except OSError:
        return None
    targets = [size * number // count for number in range(1, count)]
    starts = [RowsFrom(0, 0, 0)]
    for offset, lines, rows in _record_starts(path, csv):
        while targets and targets[0] <= offset:
            targets.pop(0)
            starts.append(RowsFrom(offset, lines, rows))
        if not targets:
            break
    starts += [RowsFrom(size, 0, 0)] * len(targets)  # past the last record: empty ranges
    cuts = []
    for number, start in enumerate(starts):
        after = starts[number + 1] if number + 1 < count else None
        # The last range with rows reads to the end (a last line without a line break included).
        until = None if after is None or after.offset >= size else after.lines
        cuts.append(RowsFrom(start.offset, start.lines, start.rows, until))
    return cuts


def _record_starts(path: Path, csv: bool) -> Iterator[tuple[int, int, int]]:
    """(byte offset, lines before, rows before) of every line start inside the file that begins a
    record: after the header (CSV), after a line break outside quotes; in order.

    Lines end at \\n, \\r\\n or a lone \\r, as the readers count them; a record starts only after a
    \\n here. A blank line is no row (the readers skip it)."""
    size = path.stat().st_size
    offset = lines = rows = 0
    quotes_odd = False
    header = csv
    blank = True  # the CSV record read so far holds nothing but line breaks
    with path.open("rb") as handle:
        for chunk in handle:  # each ends after a b"\n", but the file's last one may not
            offset += len(chunk)
            ends = chunk.endswith(b"\n")
            lines += chunk.count(b"\r") - (1 if chunk.endswith(b"\r\n") else 0) + (1 if ends else 0)
            if csv:
                quotes_odd ^= chunk.count(b'"') % 2 == 1
                blank = blank and not chunk.strip(b"\r\n")
                if quotes_odd or not ends:
                    continue
                if not blank:
                    rows += 0 if header else 1
                    header = False
                blank = True
            else:
                parts = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
                rows += sum(1 for part in parts if part.strip())
            if not header and ends and offset < size:
                yield offset, lines, rows
