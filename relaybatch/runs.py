"""Where a run keeps its files: one folder per run under the runs folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from relaybatch.errors import UserError


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def for_run(cls, runs_dir: Path, name: str) -> RunPaths:
        return cls(runs_dir / name)

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.sqlite"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def require_existing(self) -> RunPaths:
        if not self.checkpoint.exists():
            raise UserError(f"no run at {self.root}: run a manifest first (relaybatch run FILE)")
        return self
