"""The plan fingerprint: what a plan read and learnt, so the next run decides cheaply whether to plan.

A plan keeps, in the transaction that plans its items (``CheckpointStore.plan_items``):

- every file it read: the manifest, each job's data file, and every image file a row named, with
  its size and sha256; a CSV or JSONL data file also with its lines and rows, whether it ended
  with a newline, and (CSV) whether its quote marks pair up (the end is not inside a quoted cell);
- what validation learnt that later checks need: items per (job, kind, model), and each text
  route with where it is first named (the gateway-catalog check, ``check_routes``);
- 64-bit digests of every row's request key and item id, with its line (``plan_rows``), so rows
  appended later are checked for repeats of the planned ones without reading those again.

The next ``relaybatch run`` of the manifest (``compare``) finds one of:

- ``unchanged``: the same relaybatch, the same files at the same paths, each of the same size and
  sha256. Nothing is validated or planned; the catalog check runs on the recorded routes.
- ``appended``: the YAML and every other input unchanged, and each changed file a CSV or JSONL
  data file that only grew: its first recorded-size bytes hash to the recorded sha256 and it
  ended with a newline. Only the new rows are validated (repeats of planned rows included) and
  planned, with the line and row numbers a read of the whole file gives them.
- ``whole``: anything else (an edit in the middle, a truncated file, a file replaced by one of
  equal size, a Parquet file or the YAML changed, an image changed, a newer fingerprint format,
  no record): the whole manifest is validated and planned as on a first run (edits supersede).

Modification times are never trusted: a file of the recorded size is hashed. The cost of the
decision is one read of each input (sha256 at several hundred MB/s) instead of expanding every row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relaybatch import __version__
from relaybatch.engine import CheckpointStore
from relaybatch.engine.store import PLANNED_ID, PLANNED_KEY, PlanRecord
from relaybatch.files import resolved_path
from relaybatch.manifests import Manifest, Validation, seen_rows
from relaybatch.manifests.converters import Route
from relaybatch.manifests.duplicates import EarlierRows, Where
from relaybatch.manifests.images import noting_image_reads
from relaybatch.manifests.sources import APPENDABLE_SUFFIXES, RowsFrom

# Bump when what a plan produces from the same files changes (keys, requests, checks): a record
# of another format is not trusted, and the next run plans the whole manifest.
FORMAT = 1
UNCHANGED, APPENDED, WHOLE = "unchanged", "appended", "whole"
MANIFEST, DATA, IMAGE = "manifest", "data", "image"
_BLOCK = 1 << 20
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16 and UTF-32: not read from a byte offset


@dataclass(frozen=True)
class FileState:
    """A file as a plan read it: size and sha256; a text table also its lines and how it ends."""

    path: str
    role: str
    size: int
    sha256: str
    text_table: bool = False  # a UTF-8 CSV or JSONL file: rows appended to it can be read alone
    lines: int = 0  # newlines in it (\n, \r\n or a lone \r, as the readers count lines)
    ends_with_newline: bool = True
    quotes_even: bool = True  # CSV: an even number of '"', so the end is not inside a quoted cell

    @property
    def appendable(self) -> bool:
        return self.text_table and self.ends_with_newline and self.quotes_even

    def detail(self, rows: int | None) -> str:
        if not self.text_table:
            return "{}"
        values = {"lines": self.lines, "ends_with_newline": self.ends_with_newline}
        values |= {"quotes_even": self.quotes_even, "rows": rows or 0}
        return json.dumps(values, sort_keys=True)


@dataclass
class _Reading:
    """sha256 and line counts of a file read a block at a time; a snapshot at ``prefix`` bytes."""

    count_lines: bool
    digest: Any = field(default_factory=hashlib.sha256)
    size: int = 0
    newlines: int = 0
    quotes: int = 0
    last: bytes = b""

    def update(self, block: bytes) -> None:
        self.digest.update(block)
        self.size += len(block)
        if self.count_lines and block:
            # \n, \r\n and a lone \r each end a line; a \r\n split across two blocks counts once.
            crlf = block.count(b"\r\n") + (self.last == b"\r" and block[:1] == b"\n")
            self.newlines += block.count(b"\n") + block.count(b"\r") - crlf
            self.quotes += block.count(b'"')
            self.last = block[-1:]


def read_file(path: Path, role: str, prefix: int | None = None) -> tuple[FileState, str | None]:
    """The file's state now, and with ``prefix`` the sha256 of its first ``prefix`` bytes (None
    when it is not longer than that). One read of the file."""
    suffix = path.suffix.lower()
    reading = _Reading(count_lines=suffix in APPENDABLE_SUFFIXES)
    prefix_sha: str | None = None
    head = b""
    with path.open("rb") as handle:
        if prefix is not None:
            remaining = prefix
            while remaining > 0 and (block := handle.read(min(_BLOCK, remaining))):
                head = head or block[:4]
                reading.update(block)
                remaining -= len(block)
            if remaining == 0 and handle.read(1):
                prefix_sha = reading.digest.hexdigest()
                handle.seek(prefix)
        while block := handle.read(_BLOCK):
            head = head or block[:4]
            reading.update(block)
    text_table = reading.count_lines and not head.startswith(_WIDE_BOMS)
    state = FileState(
        path=str(path),
        role=role,
        size=reading.size,
        sha256=reading.digest.hexdigest(),
        text_table=text_table,
        lines=reading.newlines if text_table else 0,
        # A lone \r at the end is not enough: text appended after it that starts with \n would
        # make one \r\n line end with it, which a read from the offset cannot tell.
        ends_with_newline=reading.last == b"\n" or reading.size == 0,
        quotes_even=suffix != ".csv" or reading.quotes % 2 == 0,
    )
    return state, prefix_sha


@dataclass(frozen=True)
class Recorded:
    """A store's recorded fingerprint."""

    summary: dict[str, Any]
    files: dict[str, tuple[str, int, str, dict[str, Any]]]  # path -> role, size, sha256, detail (no images)


@dataclass(frozen=True)
class Decision:
    """What the next plan has to do, and the inputs as they are now."""

    status: str
    reason: str
    manifest_sha256: str
    files: dict[str, FileState]  # the manifest and data files now
    starts: dict[int, RowsFrom] = field(default_factory=dict)  # appended: job index -> new rows
    recorded: Recorded | None = None

    def whole(self, reason: str) -> Decision:
        return replace(self, status=WHOLE, reason=reason, starts={})


def input_paths(manifest: Manifest) -> dict[str, str]:
    """Resolved path -> role of the manifest and every job's data file (images are found by rows)."""
    paths = {str(manifest.path.resolve()): MANIFEST}
    for job in manifest.jobs:
        paths.setdefault(str(resolved_path(Path(job.file))), DATA)
    return paths


def compare(store_path: Path, manifest: Manifest) -> Decision:
    """Compare the manifest's inputs with the plan recorded in the store at ``store_path``."""
    recorded = _recorded(store_path)
    paths = input_paths(manifest)
    files: dict[str, FileState] = {}
    grown: dict[str, FileState] = {}
    reason = ""
    for path, role in paths.items():
        before = recorded.files.get(path) if recorded else None
        if before is None or not Path(path).is_file():
            if Path(path).is_file():
                files[path] = read_file(Path(path), role)[0]
            if not recorded:
                reason = reason or "no plan recorded"
            else:
                missing = not Path(path).is_file()
                reason = reason or f"{path} {'is missing' if missing else 'was not read by the last plan'}"
            continue
        _, size, sha256, detail = before
        state, prefix_sha = read_file(Path(path), role, prefix=size)
        files[path] = state
        if (state.size, state.sha256) == (size, sha256):
            continue
        if state.text_table and prefix_sha == sha256 and _appendable(detail):
            grown[path] = state  # it only grew: the rows after the recorded size are new
            continue
        reason = reason or f"{path} changed"
    manifest_sha = files[str(manifest.path.resolve())].sha256
    decision = Decision(WHOLE, reason, manifest_sha, files, recorded=recorded)
    if recorded is None or reason:
        return decision.whole(reason or "no plan recorded")
    if not _same_format(recorded.summary):
        return decision.whole("the last plan was recorded by another relaybatch version")
    if set(recorded.files) != set(paths):
        return decision.whole("the manifest reads other files than the last plan did")
    image = _changed_image(store_path)
    if image:
        return decision.whole(f"image {image} changed")
    if not grown:
        return replace(decision, status=UNCHANGED, reason="nothing changed")
    starts = _starts(manifest, recorded, grown)
    if starts is None:
        return decision.whole("a grown file is read by a job that cannot read from an offset")
    return replace(decision, status=APPENDED, reason="rows were appended", starts=starts)


def planned_since(store_path: Path, decision: Decision) -> bool:
    """Whether the store's recorded plan is no longer the one ``decision`` was made against."""
    recorded = _recorded(store_path)
    before = decision.recorded
    return (recorded is None) != (before is None) or (
        recorded is not None and before is not None and recorded.summary != before.summary
    )


def _appendable(detail: Mapping[str, Any]) -> bool:
    return bool(detail) and bool(detail.get("ends_with_newline")) and bool(detail.get("quotes_even", True))


def _same_format(summary: Mapping[str, Any]) -> bool:
    return summary.get("format") == FORMAT and summary.get("relaybatch") == __version__


def _recorded(store_path: Path) -> Recorded | None:
    if not store_path.exists():
        return None
    with CheckpointStore.open_read_only(store_path) as store:
        summary = store.plan_summary()
        if summary is None:
            return None
        files = {
            path: (role, size, sha256, detail)
            for path, role, size, sha256, detail in store.plan_inputs()
            if role != IMAGE
        }
    return Recorded(summary, files)


def recorded_images(store_path: Path) -> dict[str, str]:
    """Path -> sha256 of every image file the recorded plan embedded."""
    if not store_path.exists():
        return {}
    with CheckpointStore.open_read_only(store_path) as store:
        return {path: sha256 for path, role, _, sha256, _ in store.plan_inputs() if role == IMAGE}


def _changed_image(store_path: Path) -> str | None:
    """The first image file the plan embedded that is no longer the same (size, then sha256)."""
    with CheckpointStore.open_read_only(store_path) as store:
        for path, role, size, sha256, _ in store.plan_inputs():
            if role != IMAGE:
                continue
            file = Path(path)
            if not file.is_file() or file.stat().st_size != size:
                return path
            if hashlib.sha256(file.read_bytes()).hexdigest() != sha256:
                return path
    return None


def _starts(
    manifest: Manifest, recorded: Recorded, grown: Mapping[str, FileState]
) -> dict[int, RowsFrom] | None:
    """Where each job reading a grown file finds its new rows (None: a job that cannot)."""
    starts: dict[int, RowsFrom] = {}
    for index, job in enumerate(manifest.jobs):
        path = str(resolved_path(Path(job.file)))
        if path not in grown:
            continue
        if job.rows_from is None:
            return None
        _, size, _, detail = recorded.files[path]
        starts[index] = RowsFrom(offset=size, lines=int(detail["lines"]), rows=int(detail["rows"]))
    return starts


# -- what validation learnt, kept and restored -------------------------------------------------


def recorded_validation(decision: Decision) -> Validation:
    """The validation of the planned rows, as recorded: counts and routes (it found no problem)."""
    assert decision.recorded is not None
    summary = decision.recorded.summary
    validation = Validation()
    for job, kind, model, count in summary.get("counts", []):
        validation.counts[(job, kind, model)] = count
    for job, kind, model, converter, file, line in summary.get("routes", []):
        validation.routes[Route(job, kind, model, bool(converter))] = (file, line)
    return validation


def earlier_rows(store: CheckpointStore) -> EarlierRows:
    """Lookups of the planned rows' key and id digests in the store (where each was first seen)."""

    def lookup(kind: int) -> Any:
        def found(digests: list[int]) -> dict[int, Where]:
            planned = store.planned_rows(kind, digests)
            return {digest: Where(job, 0, line) for digest, (job, line) in planned.items()}

        return found

    return EarlierRows(keys=lookup(PLANNED_KEY), ids=lookup(PLANNED_ID))


class InputsMoved(Exception):
    """An input file changed size while the rows appended to it were read."""


def _size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None


class Recorder:
    """Notes the image files a plan reads, then makes its PlanRecord once its items are in."""

    def __init__(self, manifest: Manifest, decision: Decision, validation: Validation, seen_in: Path) -> None:
        self.manifest = manifest
        self.decision = decision
        self.validation = validation
        self.seen_in = seen_in
        self.images: dict[str, tuple[int, str]] = {}

    def note_image(self, path: Path, raw: bytes) -> None:
        key = str(path.resolve())
        if key not in self.images:
            self.images[key] = (len(raw), hashlib.sha256(raw).hexdigest())

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with noting_image_reads(self.note_image):
            yield

    def record(self) -> PlanRecord | None:
        """The plan's record; None (nothing recorded) when an input grew or shrank while it was
        read, since the rows read may then not be those of the sizes and hashes taken before."""
        moved = [path for path, state in self.decision.files.items() if _size(path) != state.size]
        if moved:
            if self.decision.status == APPENDED:
                raise InputsMoved(moved[0])  # nothing is written: the plan is made again, whole
            return None
        rows = self._rows_per_file()
        inputs: list[tuple[Any, ...]] = [
            (path, state.role, state.size, state.sha256, state.detail(rows.get(path)))
            for path, state in self.decision.files.items()
        ]
        inputs += [(path, IMAGE, size, sha256, "{}") for path, (size, sha256) in self.images.items()]
        summary = {
            "format": FORMAT,
            "relaybatch": __version__,
            "counts": [[*group, count] for group, count in sorted(self.validation.counts.items())],
            "routes": [
                [route.job, route.kind, route.model, route.converter, file, line]
                for route, (file, line) in self.validation.routes.items()
            ],
        }
        return PlanRecord(
            summary=summary,
            inputs=inputs,
            seen=[
                (PLANNED_KEY, seen_rows(self.seen_in, "keys")),
                (PLANNED_ID, seen_rows(self.seen_in, "ids")),
            ],
            complete=self.decision.status != APPENDED,
        )

    def _rows_per_file(self) -> dict[str, int]:
        """Rows of each text table after this plan: what its jobs read, or what was recorded."""
        rows: dict[str, int] = {}
        recorded = self.decision.recorded
        for index, job in enumerate(self.manifest.jobs):
            path = str(resolved_path(Path(job.file)))
            if self.decision.status == APPENDED and index not in self.decision.starts:
                assert recorded is not None
                rows[path] = int(recorded.files[path][3].get("rows", 0))
                continue
            start = self.decision.starts.get(index)
            rows[path] = max(job.last_row, start.rows if start else 0)
        return rows
