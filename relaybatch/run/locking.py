"""One writer per store: an execution (or a merge) holds its folder's lock while it works.

A checkpoint store is written by one execution at a time: two executions of the same store would
both read the same pending items and send them twice, and a ``merge`` folding shard stores into a
run that an unsharded execution is working on would race it. So each of them holds an OS file lock
(``flock``) on ``execution.lock`` in the folder of the store it writes (the run's folder, or a
shard's), and whoever comes second is refused at once with a message naming the holder: its pid,
host, command and start time, and what to do. The lock belongs to the open file, so the OS drops
it when the holder exits in any way, SIGKILL included: there is never a stale lock to clean up. The
file itself stays (deleting a lock file races with the next opener); its content describes the last
holder and means something only while the lock is held. ``flock`` works on local disks and on NFS
(Linux maps it onto NFS byte-range locks), where shard folders of several machines may live.

Each execution also holds the run's ``sending.lock`` (``sending``): exclusively when it executes the
run whole, shared when it executes a shard. A shard's items are the run's too, and the run executed
whole folds its shards' stores and sends what is pending there; so the shards of a split execute
side by side, but never beside the whole run, which would send their items a second time.

Within one process the lock is re-entrant: `relaybatch run` holds it from planning to export, and
the steps inside (``plan_run``, ``execute_run``, the export) take it again without waiting on
themselves. Not ``filelock``: it truncates the lock file on every attempt, which would erase the
holder's description that the refusal quotes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from relaybatch.errors import UserError
from relaybatch.folder_lock import Holder, lock_holder
from relaybatch.folder_lock import read_holder as _read_holder
from relaybatch.run_folder import SENDING_LOCK_NAME, SHARDS_NAME, RunPaths, partition_of_folder

# A look at the lock lasts microseconds; a real holder keeps it for the whole execution.
LOOK_TRIES = 5
LOOK_PAUSE_SECONDS = 0.02

# Locks this process holds: (lock file, shared?) -> (open lock file, how many holds are nested).
_HELD: dict[tuple[Path, bool], tuple[int, int]] = {}
_GUARD = threading.Lock()


class RunBusy(UserError):
    """Another process is executing (or merging) the store this one wants to write."""


def lock_path(folder: Path) -> Path:
    return RunPaths(folder).lock


def refusal(folder: Path, advice: str) -> RunBusy:
    """What a process refused ``folder``'s lock is told: who holds it, and what to do. A momentary
    holder (a report rewriting the ledger, a call being settled) lets go within seconds: whatever
    the refused one wanted, it only has to run its command again in a moment. A merge sends nothing
    and lets go once it has folded the shards' stores and exported the run's results: the refused
    one runs its command again after it."""
    holder = _read_holder(lock_path(folder))
    who = holder.describe() if holder else "another process (it has not said which yet)"
    if holder is not None and holder.momentary:
        advice = MOMENT_ADVICE
    elif holder is not None and holder.merging:
        advice = MERGING_ADVICE
    return RunBusy(f"{folder} is in use by {who}. {advice}")


def holder_of(folder: Path) -> Holder | None:
    """Who holds the folder's lock now; None when nobody does (or the folder has no lock file)."""
    path = lock_path(folder)
    if (path.resolve(), False) in _HELD:
        return _read_holder(path)
    return lock_holder(path)


@contextlib.contextmanager
def holding(
    folder: Path, activity: str, advice: str, momentary: bool = False, merge: bool = False
) -> Iterator[None]:
    """Hold ``folder``'s lock while the block runs, or raise ``RunBusy`` at once.

    ``activity`` is what this process does (written for whoever is refused, e.g. "executing run
    'big'"), ``momentary`` whether it lets go within seconds (whoever is refused is told to retry
    in a moment), ``merge`` whether it is a merge (whoever is refused is told to wait for the merge,
    not for an execution); ``advice`` ends the refusal this process gets when another holds the lock.
    """
    folder.mkdir(parents=True, exist_ok=True)
    described = (activity, momentary, merge)
    with _held(lock_path(folder), lambda: refusal(folder, advice), activity=described):
        yield


@contextlib.contextmanager
def _held(
    path: Path,
    refused: Callable[[], RunBusy],
    activity: tuple[str, bool, bool] | None = None,
    shared: bool = False,
) -> Iterator[None]:
    """``path`` locked (exclusively, or ``shared``) while the block runs, or ``refused()`` raised at
    once; an exclusive holder describes itself (``activity``: what it does, whether it lets go
    within seconds, whether it is a merge) in the file for whoever it refuses."""
    key = (path.resolve(), shared)
    with _GUARD:
        if key in _HELD:  # nested in this process: the lock is already ours
            descriptor, depth = _HELD[key]
            _HELD[key] = (descriptor, depth + 1)
        else:
            _HELD[key] = (_acquire(path, refused, activity, shared), 1)
    try:
        yield
    finally:
        with _GUARD:
            descriptor, depth = _HELD[key]
            if depth > 1:
                _HELD[key] = (descriptor, depth - 1)
            else:
                del _HELD[key]
                os.close(descriptor)  # closing the only descriptor releases the lock


def _acquire(
    path: Path, refused: Callable[[], RunBusy], activity: tuple[str, bool, bool] | None, shared: bool
) -> int:
    # No O_TRUNC: the holder's description must survive a refused attempt to read it.
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        _lock_or_raise(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    except BlockingIOError:
        os.close(descriptor)
        raise refused() from None
    except BaseException:
        os.close(descriptor)
        raise
    if activity is not None:
        _describe_self(descriptor, *activity)
    return descriptor


def _lock_or_raise(descriptor: int, mode: int = fcntl.LOCK_EX) -> None:
    """The lock, or BlockingIOError when a holder keeps it. A few quick tries: someone only
    looking (``holder_of``, e.g. `relaybatch status`) holds a shared lock for an instant."""
    for _ in range(LOOK_TRIES - 1):
        try:
            fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOOK_PAUSE_SECONDS)
    fcntl.flock(descriptor, mode | fcntl.LOCK_NB)


def _describe_self(descriptor: int, activity: str, momentary: bool, merge: bool) -> None:
    record = {
        "activity": activity,
        "momentary": momentary,
        "merging": merge,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "",
        "since": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), 0)


# What the one refused is told to do, per what it tried.
RUN_ADVICE = (
    "Two executions of one store would send the same items twice: wait for that one to finish, or "
    "stop it (Ctrl-C where it runs, or SIGTERM: it stops cleanly and resumably), then run this "
    "command again."
)
RESOLVE_ADVICE = (
    "Its calls in flight settle when they answer: settle a call from the bill once the execution has "
    "finished (or stop it: Ctrl-C where it runs, or SIGTERM), then run this command again."
)
EXPORT_ADVICE = (
    "It writes the results itself when its execution ends, and an export beside it would race it for "
    "the same files: wait for it to finish (or stop it: Ctrl-C where it runs, or SIGTERM), then run "
    "this command again if you still need to."
)
SHARD_ADVICE = (
    "Wait for them to finish (or stop them: Ctrl-C where each runs, or SIGTERM), then run this "
    "command again; or run the shards that are left with --shard and `relaybatch merge` after."
)
MOMENT_ADVICE = (
    "It lets go as soon as that is done (seconds, not a whole execution): run this command again in a moment."
)
MERGING_ADVICE = (
    "A merge sends nothing: it folds the shards' stores into the run's and exports the run's results, "
    "then lets go. Wait for it to finish, then run this command again."
)
MERGE_ADVICE = (
    "Merge once it has finished (or stop it: Ctrl-C where it runs, or SIGTERM, stops it cleanly and "
    "resumably), then run this command again."
)


def what_runs_in(paths: RunPaths) -> str:
    """``run 'big'`` or ``shard 1/2 of run 'big'``, from a run's or a shard's folder."""
    split = paths.shard_split
    if split:
        return f"shard {split[0]}/{split[1]} of run '{paths.root.parent.parent.name}'"
    return f"run '{paths.name}'"


@contextlib.contextmanager
def executing(paths: RunPaths) -> Iterator[None]:
    """The locks an execution of the store at ``paths`` (a run's or a shard's) holds: its store's,
    and the run's right to send its items (``sending``). Before the outermost hold lets go, the
    store's owner writes what the run's other stores need from it (run/handoff.py); an execution
    that dies first leaves it stale, and whoever needs it next writes it under the lock."""
    from relaybatch.run.handoff import leave_handoff

    key = (lock_path(paths.root).resolve(), False)
    with _GUARD:
        outermost = key not in _HELD
    with holding(paths.root, f"executing {what_runs_in(paths)}", RUN_ADVICE), sending(paths):
        yield
        if outermost:
            leave_handoff(paths)


def require_executing(paths: RunPaths) -> None:
    """Raise unless this process holds the execution lock of the store at ``paths`` (``executing``).
    An execution does not take it: whoever plans (or resumes without a plan) takes it once and keeps
    it to the export, so nothing can take the store between the plan and the execution after it."""
    key = (lock_path(paths.root).resolve(), False)
    with _GUARD:
        held = key in _HELD
    if not held:
        raise RuntimeError(f"{paths.root}: executed without its lock held by the caller (`executing`)")


@contextlib.contextmanager
def sending(paths: RunPaths) -> Iterator[None]:
    """The run's ``sending.lock``: exclusive for an execution of the run's own store, shared for a
    shard's. Shards of a split hold disjoint items and execute side by side; the run executed whole
    sends every item, its shards' too (it folds their stores, then sends what is pending there), so
    it and any of its shards never execute at once: either would send the other's items again.
    Shards of two splits (1/2 and 1/3) share items too: a shard is refused while one of another
    split executes. Each shard holds its own store's lock before it looks at the others', so of two
    starting at once at least one is refused, never neither."""
    run = RunPaths(paths.run_root)
    lock = run.root / SENDING_LOCK_NAME
    if paths.root == run.root:
        with _held(lock, lambda: _shards_busy(run)):
            yield
        return
    with _held(lock, lambda: _run_busy(run, paths), shared=True):
        others = [
            holder.describe()
            for folder in run.store_folders()[1:]
            if _split_of(folder) != _split_of(paths) and (holder := holder_of(folder.root)) is not None
        ]
        if others:
            raise RunBusy(
                f"{what_runs_in(paths)} shares items with a shard of another split executing now "
                f"({'; '.join(others)}): both would send them. {SHARD_ADVICE}"
            )
        yield


def _split_of(folder: RunPaths) -> tuple[str, int | None]:
    """Which split a shard's or partition's folder belongs to: stores of one split hold disjoint
    items (by key hash, or by input range); stores of two splits may hold the same ones."""
    partition = partition_of_folder(folder.root.name)
    return ("partition", partition[1]) if partition else ("shard", folder.shard_count)


def _shards_busy(run: RunPaths) -> RunBusy:
    shards = run.root / SHARDS_NAME
    executing_now = [
        holder.describe()
        for folder in (sorted(shards.iterdir()) if shards.is_dir() else [])
        if (holder := holder_of(folder)) is not None
    ]
    who = "; ".join(executing_now) or "a shard of it (it has not said which yet)"
    return RunBusy(
        f"run '{run.name}' has shards executing ({who}): executed whole beside them it would send "
        f"their items a second time. {SHARD_ADVICE}"
    )


def _run_busy(run: RunPaths, shard: RunPaths) -> RunBusy:
    holder = holder_of(run.root)
    who = holder.describe() if holder else "another process (it has not said which yet)"
    return RunBusy(
        f"{what_runs_in(shard)} would send items that run '{run.name}', executed whole, is sending "
        f"now ({who}). {RUN_ADVICE}"
    )


def exporting(paths: RunPaths) -> contextlib.AbstractContextManager[None]:
    """The lock an export of the store at ``paths`` holds. An export beside an execution (or a
    merge) of the same store races the execution's own export for the same files: the slower one
    renames its files last, so older rows can replace newer ones, and each removes the job files its
    own (maybe earlier) view of the store does not list, so a job file the other has just written
    can vanish. Inside an execution of this process (``relaybatch run``) the lock is already held."""
    return holding(paths.root, f"exporting the results of {what_runs_in(paths)}", EXPORT_ADVICE)


@contextlib.contextmanager
def refreshing_ledger(folder: Path) -> Iterator[str | None]:
    """For a report (``costs.report.LedgerGuard``): the store folder's lock while the block rewrites
    its ``ledger.parquet`` (None is yielded), or, when an execution or a merge holds it, nothing held
    and who that is, with what becomes of the ledger (an execution writes it when it ends; a merge
    writes none, so the next report does). An execution's ledger is then its own: a report rewriting
    it beside an execution could rename a ledger read before the execution's last charges over the
    one it has just exported."""
    paths = RunPaths(folder)
    hold = contextlib.ExitStack()
    activity = f"a report rewriting the cost ledger of {what_runs_in(paths)}"
    try:
        hold.enter_context(holding(folder, activity, "", momentary=True))
    except RunBusy:
        holder = _read_holder(lock_path(folder))
        who = holder.describe() if holder else "another process (it has not said which yet)"
        if holder is not None and holder.merging:  # a merge folds checkpoints and writes no ledger
            yield f"{who}; it does not write {paths.ledger.name}: run the report again once it has finished"
        else:
            yield f"{who}; its {paths.ledger.name} is left for that process to write"
        return
    with hold:
        yield None


@contextlib.contextmanager
def merging(run: RunPaths, shards: list[RunPaths]) -> Iterator[None]:
    """The run's lock (merge writes its store) and each shard's (a shard still executing would
    be merged half-done), all held while the merge runs."""
    activity = f"merging the shards of run '{run.name}'"
    with contextlib.ExitStack() as held:
        for paths in [run, *shards]:
            held.enter_context(holding(paths.root, activity, MERGE_ADVICE, merge=True))
        yield
