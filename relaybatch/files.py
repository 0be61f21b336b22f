"""Files written whole: every file relaybatch writes (results, ledger, media, dashboards) appears
under its final name complete or not at all, so a crash never leaves half a file that looks done."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary name beside ``path`` to write to; on success it is renamed to ``path``
    (``os.replace`` is atomic within one folder), on an error it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_bytes_atomically(path: Path, content: bytes) -> Path:
    with replaced_atomically(path) as temporary:
        temporary.write_bytes(content)
    return path


def write_text_atomically(path: Path, text: str) -> Path:
    with replaced_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return path


def abandoned_temporaries(folder: Path, pattern: str) -> Iterator[Path]:
    """Temporary files of ``replaced_atomically`` in ``folder`` (matching ``pattern``) whose writer
    is gone (a crash half-way): those of a live process are another export writing right now
    (`relaybatch export` beside a run's own export), not to be removed under it."""
    for temporary in folder.glob(pattern) if folder.is_dir() else []:
        pid = temporary.name.rpartition(".tmp-")[2]
        if not (pid.isdigit() and _alive(int(pid))):
            yield temporary


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process writes one file at a time: a leftover of its own is abandoned
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A private temporary folder (``<tmp>/<prefix><pid>-<random>``), removed afterwards.

    A process killed outright (SIGKILL, the OOM killer) cannot remove its own, so each new one first
    removes those that processes now gone left behind: a nightly job killed while planning a million
    items leaves some 50 MB in the temporary folder, not 50 MB more every night."""
    parent = Path(tempfile.gettempdir())
    owner = re.compile(re.escape(prefix) + r"(\d+)-[^/]+")
    for leftover in parent.glob(f"{glob.escape(prefix)}*"):
        found = owner.fullmatch(leftover.name)
        pid = int(found[1]) if found else os.getpid()  # this process may plan twice at once
        if pid != os.getpid() and leftover.is_dir() and not _alive(pid):
            shutil.rmtree(leftover, ignore_errors=True)  # another user's stays: not ours to remove
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-") as folder:
        yield Path(folder)
