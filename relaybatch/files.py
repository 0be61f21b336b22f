"""Files written whole: every file relaybatch writes (results, ledger, media, dashboards) appears
under its final name complete or not at all, so a crash never leaves half a file that looks done."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

# A temporary of ``replaced_atomically``: ``.<final name>.tmp-<pid of its writer>``.
_TEMPORARY = re.compile(r"\..+\.tmp-(\d+)")
_GUARD = threading.Lock()
_WRITING: set[Path] = set()  # temporaries this process is writing now (media downloads overlap)
_SWEPT: set[Path] = set()  # folders this process has cleared of abandoned temporaries


def resolved_path(path: Path) -> Path:
    """``path`` made absolute with its symlinks resolved; as it is (absolute) when it cannot be
    resolved (a symlink loop), so the read that follows reports it where it is, not a traceback."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError on a loop, later ones OSError
        return Path(os.path.abspath(path))


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary name beside ``path`` to write to; on success it is renamed to ``path``
    (``os.replace`` is atomic within one folder), on an error it is removed. The folder's
    temporaries that a process killed outright left behind are removed first (``_clear_abandoned``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with _GUARD:
        _WRITING.add(temporary.absolute())
    try:
        _clear_abandoned(path.parent.absolute())
        yield temporary
        os.replace(temporary, path)
    finally:
        with _GUARD:
            _WRITING.discard(temporary.absolute())
        temporary.unlink(missing_ok=True)


def _clear_abandoned(folder: Path) -> None:
    """Remove ``folder``'s (an absolute path) temporaries whose writer is gone (SIGKILL, the OOM
    killer: no ``finally`` runs), once per folder and process: a media folder holds a file per item,
    and listing it before every write would cost a million listings of up to a million names.
    Those of a live process are kept: another export writing right now (`relaybatch export` beside
    a run's own export), whose rename would fail at its end; so are this process's own in progress
    (another thread's, an overlapping download's). One of this pid that this process is not writing
    was left by an earlier process given the same pid (a container restarted)."""
    with _GUARD:
        if folder in _SWEPT:
            return
        _SWEPT.add(folder)
    with os.scandir(folder) as entries:
        names = [entry.name for entry in entries if entry.name.startswith(".") and ".tmp-" in entry.name]
    for name in names:
        found = _TEMPORARY.fullmatch(name)
        if found is None or _alive(int(found[1])):
            continue
        with _GUARD:  # a write of this process starting now adds its name first, then creates it
            if folder / name not in _WRITING:
                (folder / name).unlink(missing_ok=True)


def write_bytes_atomically(path: Path, content: bytes) -> Path:
    with replaced_atomically(path) as temporary:
        temporary.write_bytes(content)
    return path


def write_text_atomically(path: Path, text: str) -> Path:
    with replaced_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return path


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # callers skip what this process is writing: the rest of its pid is a leftover
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
