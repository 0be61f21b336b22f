"""The run's row in the checkpoint (name, settings, manifest, executions, why it stopped) and the
prices it used."""

from __future__ import annotations

import json
from typing import Any

from relaybatch.engine.store.base import StoreBase
from relaybatch.engine.store.values import now_text


class RunRecord(StoreBase):
    """The ``runs`` row and ``price_snapshots``."""

    def run_settings(self) -> dict[str, Any]:
        row = self.db.execute("select settings from runs order by rowid limit 1").fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def save_run(self, name: str, settings: dict[str, Any] | None = None) -> None:
        """Create or update the run's row; settings given replace the stored ones."""
        stamp = now_text()
        with self.db.conn:
            self.db.execute(
                "insert into runs (name, created_at, updated_at, settings) values (?, ?, ?, ?) "
                "on conflict(name) do update set updated_at = excluded.updated_at, "
                "settings = coalesce(excluded.settings, runs.settings)",
                [name, stamp, stamp, None if settings is None else json.dumps(settings, sort_keys=True)],
            )

    def record_manifest(self, path: str, sha256: str) -> None:
        """Remember which manifest the run belongs to (its path and content hash)."""
        self._update_run({"manifest_path": path, "manifest_sha256": sha256})

    def manifest(self) -> tuple[str, str] | None:
        """(path, sha256) of the run's manifest, or None for a store that never recorded one."""
        row = self.db.execute(
            "select manifest_path, manifest_sha256 from runs order by rowid limit 1"
        ).fetchone()
        return (str(row[0]), str(row[1])) if row and row[0] else None

    def last_execution(self) -> dict[str, str | None]:
        """started_at, ended_at and stop_reason of the last execution (all None before any)."""
        row = self.db.execute(
            "select execution_started_at, execution_ended_at, stop_reason from runs order by rowid limit 1"
        ).fetchone()
        started, ended, reason = row if row else (None, None, None)
        return {"started_at": started, "ended_at": ended, "stop_reason": reason}

    def stop_reason(self) -> str | None:
        row = self.db.execute("select stop_reason from runs order by rowid limit 1").fetchone()
        return row[0] if row else None

    def run_name(self) -> str | None:
        """The run's name as recorded (a shard's store names its whole run)."""
        row = self.db.execute("select name from runs order by rowid limit 1").fetchone()
        return str(row[0]) if row and row[0] else None

    def save_price_snapshot(self, model: str, pricing: dict[str, Any], provider: str | None = None) -> None:
        """Keep the prices a run used beside its items (prices change; the snapshot does not)."""
        with self.db.conn:
            self.db.table("price_snapshots").insert(
                {
                    "model": model,
                    "provider": provider,
                    "pricing": json.dumps(pricing, sort_keys=True),
                    "fetched_at": now_text(),
                }
            )

    def price_snapshot(self, model: str, provider: str | None = None) -> dict[str, Any] | None:
        row = self.db.execute(
            "select pricing from price_snapshots where model = ? and provider is ? order by id desc limit 1",
            [model, provider],
        ).fetchone()
        return json.loads(row[0]) if row else None
