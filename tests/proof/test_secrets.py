"""The API key never lands in a file: a full demo through the real CLI, then every file it wrote is searched.

The runner is ``relaybatch run`` in a subprocess (the same Prefect flow a user gets) with a
recognisable key, talking over a socket to an emulator that accepts only that key. Its private
Prefect home, runs folder, temp folder and working folder all sit under one test folder, and
every byte under it is searched: raw bytes of every file (SQLite with its WAL and shared-memory
files, Parquet, media, reports, logs, Prefect's own database with artifacts and logs), the
decoded contents of SQLite tables and Parquet columns (compression could hide a match), and every
file name (media names).
"""

from __future__ import annotations

import gzip
import sqlite3
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from proof_served import PYTHON, REPO_ROOT, config_with, runner_environment, served_emulator

CANARY_KEY = "rb-canary-9f8e7d6c5b4a3210-SECRET"
RUN_TIMEOUT_SECONDS = 600
# A fresh Prefect home migrates its database on the first start: slow on a busy two-core machine.
PREFECT_STARTUP_SECONDS = "300"


def portable_manifest(source: Path, folder: Path) -> Path:
    """A copy of a YAML manifest whose relative data paths point at the originals and whose
    outputs go to the runs folder (not the repository's data/runs). Its video jobs expect renders
    of a second, as the served emulator's are (FAST_MEDIA): polled then, not at half the default
    guess of 50-60 s."""
    manifest = yaml.safe_load(source.read_text(encoding="utf-8"))
    manifest.get("run", {}).pop("output", None)
    for job in manifest.get("jobs", []):
        data = job.get("data")
        if isinstance(data, str) and not Path(data).is_absolute():
            job["data"] = str((source.parent / data).resolve())
        if job.get("kind") in ("video", "video_v1"):
            job.setdefault("video", {"expected_render_seconds": 1})
    copy = folder / source.name
    copy.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return copy


def run_cli(manifest: Path, home: Path, base_url: str) -> subprocess.CompletedProcess[str]:
    environment = runner_environment(
        home,
        api_key=CANARY_KEY,
        base_url=base_url,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=PREFECT_STARTUP_SECONDS,
    )
    return subprocess.run(
        [PYTHON, "-m", "relaybatch", "run", str(manifest)],
        cwd=home,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )


def sqlite_text(path: Path) -> str:
    """Every value of every table, decoded; the raw file scan covers the WAL and free pages."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


def decoded_views(path: Path, raw: bytes) -> list[str]:
    views: list[str] = []
    if raw.startswith(b"SQLite format 3"):
        views.append(sqlite_text(path))
    elif raw.startswith(b"PAR1"):
        views.append(str(pq.read_table(path).to_pylist()))
    elif raw.startswith(b"\x1f\x8b"):
        views.append(gzip.decompress(raw).decode("utf-8", "replace"))
    return views


def files_holding(root: Path, secret: str) -> tuple[list[str], int]:
    """Paths (relative to root) whose name, bytes or decoded contents contain the secret."""
    hits, scanned = [], 0
    needle = secret.encode()
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if secret in relative:
            hits.append(f"{relative} (name)")
        if not path.is_file():
            continue
        scanned += 1
        raw = path.read_bytes()
        if needle in raw or any(secret in view for view in decoded_views(path, raw)):
            hits.append(relative)
    return hits, scanned


def test_a_full_demo_writes_the_api_key_nowhere(tmp_path: Path) -> None:
    manifests = [REPO_ROOT / "configs" / "demo.csv"]
    manifests.append(portable_manifest(REPO_ROOT / "configs" / "manifests" / "everything.yaml", tmp_path))
    outputs = ""
    with served_emulator(config_with(demo_key=CANARY_KEY)) as emulator:
        for manifest in manifests:
            done = run_cli(manifest, tmp_path, emulator.url)
            assert done.returncode == 0, f"{manifest.name}: {done.stderr[-3000:]}"
            outputs += done.stdout + done.stderr
        billed_routes = {charge.route for charge in emulator.state.ledger}

    # Every kind billed something, so every code path that handles a key and an answer ran.
    assert len(billed_routes) >= 6, f"too few routes billed to prove anything: {billed_routes}"
    runs = tmp_path / "runs"
    assert {path.parent.name for path in runs.rglob("checkpoint.sqlite")} >= {"demo", "everything"}
    assert list(runs.rglob("*.parquet")), f"the runs wrote no Parquet under {runs}"
    assert CANARY_KEY not in outputs

    hits, scanned = files_holding(tmp_path, CANARY_KEY)
    assert scanned >= 10
    assert hits == [], f"the API key was written to: {hits}"


def test_the_scan_finds_a_planted_key(tmp_path: Path) -> None:
    """The scanner itself can fail: a key hidden in SQLite, compressed Parquet and a name is found."""
    import pyarrow as pa

    connection = sqlite3.connect(tmp_path / "store.sqlite")
    connection.execute("create table t (v text)")
    connection.execute("insert into t values (?)", [f"Bearer {CANARY_KEY}"])
    connection.commit()
    connection.close()
    pq.write_table(pa.table({"v": [CANARY_KEY] * 1000}), tmp_path / "out.parquet", compression="zstd")
    (tmp_path / f"media-{CANARY_KEY}.png").write_bytes(b"\x89PNG")

    hits, _ = files_holding(tmp_path, CANARY_KEY)

    assert "store.sqlite" in hits
    assert "out.parquet" in hits
    assert any(hit.endswith("(name)") for hit in hits)
