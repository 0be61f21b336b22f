"""Run identity: which inputs a run belongs to (DESIGN.md invariant 8).

A run is made from a manifest and everything it reads: the YAML (or the CSV, JSONL or Parquet
file that is the manifest), each job's data file and every image file a row names. Its identity
is one sha256 over each of those files' content and its path as the manifest names it (relative
to the manifest's folder), kept in the run's store beside the manifest's resolved path.

- The same manifest path is the same run, whatever changed: edits (to the YAML or to a file it
  reads) supersede the items they change.
- Another path is the same run only when its identity is equal: a copy of the manifest moved
  elsewhere together with the files it reads. A copy of the YAML next to other data is another
  run, refused naming both, so an item done from one data set is never superseded by another's.

A store from before data files were part of the identity recorded the YAML's sha256 alone; a
copy of that YAML is still accepted into it, as it was then.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from relaybatch.engine import CheckpointStore
from relaybatch.errors import UserError
from relaybatch.run_folder import RunPaths


def identity_of(manifest_path: Path, files: Mapping[str, str], images: Mapping[str, str]) -> str:
    """The identity of a manifest at ``manifest_path`` reading ``files`` and ``images`` (resolved
    path -> sha256 each; ``files`` holds the manifest itself)."""
    folder = manifest_path.parent
    named = {
        "manifest": files.get(str(manifest_path), ""),
        "files": sorted((os.path.relpath(path, folder), sha) for path, sha in files.items()),
        "images": sorted((os.path.relpath(path, folder), sha) for path, sha in images.items()),
    }
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()


def recorded_identity(folders: list[RunPaths], own: RunPaths | None = None) -> tuple[str, str] | None:
    """(manifest path, identity) recorded by the first of the run's stores in ``folders`` that has
    one: the store this process writes (``own``) from itself, any other from the handoff its owner
    left (run/handoff.py: never another host's SQLite)."""
    from relaybatch.run.handoff import recorded_manifest

    for folder in folders:
        if not folder.checkpoint.exists():
            continue
        if own is not None and folder.root == own.root:
            with CheckpointStore.open_read_only(folder.checkpoint) as store:
                recorded = store.manifest()
        else:
            recorded = recorded_manifest(folder)
        if recorded is not None:
            return recorded
    return None


def check_identity(
    run: RunPaths,
    folders: list[RunPaths],
    manifest_path: Path,
    identity: str,
    manifest_sha256: str,
    own: RunPaths | None = None,
) -> None:
    """Refuse to plan a manifest into a run made from other inputs, naming both manifests."""
    recorded = recorded_identity(folders, own)
    if recorded is None:
        return
    path, digest = recorded
    if path == str(manifest_path) or digest in (identity, manifest_sha256):
        return
    raise UserError(
        f"run '{run.name}' belongs to {path}, and {manifest_path} is a different manifest "
        "(its YAML, or a data or image file it reads, differs from the run's). "
        f"Give it its own run: relaybatch run {manifest_path} --run-name NAME "
        "(or set run.name in its YAML)"
    )
