"""A job described in Python, and the manifest the API writes for a table and its jobs.

The API does not run tables by a path of its own: it writes the table as a Parquet file and a YAML
manifest naming it into the run's folder (``<run>/input/``), and runs that manifest as
`relaybatch run` would. So keys, validation, planning and exactly-once are the CLI's, and the same
run can be resumed from a terminal with `relaybatch run <run>/input/manifest.yaml`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from relaybatch.files import replaced_atomically

# The column the API adds to every input row: its position in the table, carried to the results
# (``input__row``) so that answers join back to the rows they came from, whatever the ids.
ROW = "_row"
MANIFEST_NAME = "manifest.yaml"
INPUT_NAME = "input"


@dataclass(frozen=True)
class Job:
    """What each row of a table becomes: one gateway call of ``kind`` (a YAML job's fields,
    docs/manifests.md). ``prompt``, ``system``, ``id`` and string values in ``request`` are
    templates over the table's columns, e.g. ``"Review: {text}"``."""

    kind: str
    model: str | None = None
    prompt: str | None = None
    request: Mapping[str, Any] = field(default_factory=dict)
    system: str | None = None
    image: str | Sequence[str] | None = None
    id: str | None = None
    carry: Sequence[str] = ()
    name: str | None = None  # default: the kind
    via: str = "native"
    budget_usd: Decimal | str | None = None
    provider: str | None = None

    @property
    def job_name(self) -> str:
        return self.name or self.kind

    def as_manifest_job(self, data: str) -> dict[str, Any]:
        """The job as YAML would give it, reading ``data`` (a Parquet file beside the manifest)."""
        job: dict[str, Any] = {"name": self.job_name, "kind": self.kind, "data": data}
        optional = {
            "model": self.model,
            "prompt": self.prompt,
            "system": self.system,
            "id": self.id,
            "provider": self.provider,
            "image": self.image if isinstance(self.image, str) or self.image is None else list(self.image),
            "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
        }
        job.update({name: value for name, value in optional.items() if value is not None})
        if self.request:
            job["request"] = dict(self.request)
        if self.via != "native":
            job["via"] = self.via
        job["carry"] = [*self.carry, ROW]
        return job


def write_manifest(folder: Path, run: Mapping[str, Any], jobs: Sequence[Job], data: str) -> Path:
    """``folder/manifest.yaml`` for ``jobs`` over the Parquet file ``data`` (beside it); written only
    when its text changes, so a rerun of the same cell reads the same file."""
    names = [job.job_name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"two jobs share a name ({', '.join(names)}): give each a name=")
    document = {"run": dict(run), "jobs": [job.as_manifest_job(data) for job in jobs]}
    text = "# Written by relaybatch's Python API (relaybatch.Run.from_table).\n"
    text += yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    path = folder / MANIFEST_NAME
    write_if_changed(path, text.encode())
    return path


def write_if_changed(path: Path, content: bytes) -> bool:
    """``content`` to ``path`` (whole: a temporary name, then a rename) unless it holds it already."""
    if path.is_file() and path.read_bytes() == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as temporary:
        temporary.write_bytes(content)
    return True
