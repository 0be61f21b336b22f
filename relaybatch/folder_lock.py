"""Who holds a store folder's ``execution.lock``, as its holder described itself in the file.

The lock itself (taking it, nesting it, what the refused are told) is relaybatch/run/locking.py's;
this reading of it sits below the costs and the run layers, which both ask whether a store is
being written, and from which host: a store executed on another host is that host's alone
(DESIGN.md invariant 11), and is read from the files its owner writes instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from relaybatch.run_folder import RunPaths


@dataclass(frozen=True)
class Holder:
    """Who holds a folder's lock, as its holder wrote it."""

    activity: str
    pid: int | None
    host: str
    command: str
    since: str
    momentary: bool = False  # a report's or a settling's hold: seconds, not a whole execution
    merging: bool = False  # a merge's hold: no calls in flight, it lets go when its export is written

    def describe(self) -> str:
        where = f"pid {self.pid}" + (f" on {self.host}" if self.host != socket.gethostname() else "")
        started = f", since {self.since}" if self.since else ""
        command = f" (`{self.command}`)" if self.command else ""
        return f"{self.activity}: {where}{started}{command}"


def lock_holder(path: Path) -> Holder | None:
    """Who holds the lock file at ``path`` now; None when nobody does (or there is no such file).
    A holder in this very process is seen too (its lock is on another open file)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        # A shared lock conflicts only with a holder's exclusive one; an execution starting at this
        # very moment finds it taken and tries again (run/locking.py), so looking never refuses anyone.
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(path)
        return None
    finally:
        os.close(descriptor)  # releases the shared lock


def read_holder(path: Path) -> Holder | None:
    """The holder's description in the lock file (meaningful only while the lock is held)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    pid = record.get("pid")
    return Holder(
        activity=str(record.get("activity") or "another process"),
        pid=pid if isinstance(pid, int) else None,
        host=str(record.get("host") or ""),
        command=str(record.get("command") or ""),
        since=str(record.get("since") or ""),
        momentary=record.get("momentary") is True,
        merging=record.get("merging") is True,
    )


def executed_elsewhere(folder: Path) -> Holder | None:
    """The holder of ``folder``'s lock when it is an execution or a merge on another host (its
    stores are that host's while it holds them); None otherwise."""
    holder = lock_holder(RunPaths(folder).lock)
    if holder is None or holder.momentary or holder.host == socket.gethostname():
        return None
    return holder
