"""Kills and stops of `relaybatch run` at 120 requests a minute, counted on the gateway's side.

Issue 25's bar, measured: the shipped emulator's `rb-standard-key` (120 requests a minute) served
behind a recorder of every request that reaches it and when (tests/proof/proof_stop.py).

- Kills: SIGKILL the run at ``--kills`` seeded moments (0 to ``--longest`` s after its first request
  reached the gateway), for V2 videos and for chat; after each, the **phantoms** (items left
  ``sending`` or ``uncertain`` whose create never reached the gateway; target 0), then a resume to
  the end with the default policy (every item never sent must be made; none sent twice).
- Stops: SIGINT and SIGTERM, ``--stops`` times each, once the gateway has received a seeded number
  of creates: **late requests** (reaching the gateway > 0.5 s after the signal; target 0), **seconds
  to exit** (target < 1 s with only queued work, < 10 s always), exit code (130), items left
  ``sending``/``uncertain`` (target 0), and the resume (exit 0, sends exactly the items not done).
  One more stop unlimited with 3 s creates on the wire at the signal (they get the grace period).

    .venv/bin/python benchmarks/stop_at_the_limit.py                  # 20 kills per kind, 3 stops per signal
    .venv/bin/python benchmarks/stop_at_the_limit.py --kills 5 --stops 1
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "proof"))

from proof_served import config_with, served_emulator
from proof_stop import (
    RUN_NAME,
    STANDARD_KEY,
    UNLIMITED_KEY,
    creates,
    environment,
    finish,
    kill_campaign,
    manifest,
    received_items,
    start,
    states,
    stop_once,
)

SLOW_CREATES = {
    "seed": 3,
    "rules": [{"fault": "latency=3.0", "rate": 1.0, "paths": ["/v1/chat/completions"]}],
}


def kills(kind: str, count: int, items: int, seed: int, longest: float) -> list[str]:
    """One kill campaign; its figures printed, its problems returned."""
    with tempfile.TemporaryDirectory(prefix="relaybatch-kills-") as folder:
        root = Path(folder)
        path, run_dir = manifest(root, kind, items), root / "runs" / RUN_NAME
        with served_emulator(config_with()) as served:
            started = time.monotonic()
            result = kill_campaign(
                path,
                run_dir,
                served,
                environment(root, served, STANDARD_KEY),
                kind,
                kills=count,
                seed=seed,
                longest_delay=longest,
            )
            received = len(creates(served, kind))
    phantoms = result.phantoms_per_kill
    print(
        f"{kind}: {len(phantoms)} kills at 120 rpm ({items} items, {time.monotonic() - started:.0f} s): "
        f"phantoms per kill {phantoms} (total {sum(phantoms)}); items left sending per kill "
        f"{result.sending_per_kill}; after the resume {dict(result.final_states)} "
        f"(exit {result.resume_code}), "
        f"{received} creates received, {len(result.twice)} items sent twice",
        flush=True,
    )
    problems = []
    if sum(phantoms) or result.final_phantoms:
        problems.append(f"{kind}: phantoms {phantoms}, after the resume {result.final_phantoms}")
    if result.twice or set(result.final_states) - {"done", "uncertain"}:
        problems.append(f"{kind}: sent twice {result.twice}; final states {dict(result.final_states)}")
    if len(phantoms) < count:
        problems.append(f"{kind}: the run finished after {len(phantoms)} kills: give it more items")
    return problems


def one_stop(signum: int, key: str, faults: dict | None, after: int, label: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="relaybatch-stop-") as folder:
        root = Path(folder)
        path, run_dir = manifest(root, "chat", 40), root / "runs" / RUN_NAME
        with served_emulator(config_with(faults=faults)) as served:
            env = environment(root, served, key)
            stop = stop_once(path, run_dir, served, env, "chat", signum=signum, after=after)
            sent = len(creates(served, "chat"))
            left = sum(n for state, n in stop.states.items() if state != "done")
            code, _ = finish(start(path, env))
            resumed = len(creates(served, "chat")) - sent
            twice = sum(1 for n in received_items(served, "chat").values() if n > 1)
            final = Counter(states(run_dir).values())
    maybe_billed = stop.states.get("sending", 0) + stop.states.get("uncertain", 0)
    print(
        f"{stop.signal_name} {label}: after {after} creates; "
        f"exit {stop.exit_code} in {stop.seconds_to_exit:.2f} s; "
        f"requests after the signal {stop.after_signal} (late, > 0.5 s: {stop.late_requests}); "
        f"left {dict(stop.states)}; resume exit {code}, sent {resumed} for {left} not done, {twice} twice",
        flush=True,
    )
    problems = []
    if stop.late_requests or maybe_billed or stop.exit_code != 130 or stop.seconds_to_exit >= 10:
        problems.append(f"{stop.signal_name} {label}: {stop}")
    if code != 0 or resumed != left or twice or set(final) != {"done"}:
        problems.append(f"{stop.signal_name} {label}: resume exit {code}, sent {resumed} for {left}, {final}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per kind")
    parser.add_argument("--items", type=int, default=160, help="Items per kill campaign")
    parser.add_argument(
        "--longest", type=float, default=6.0, help="Latest kill, seconds after the first request"
    )
    parser.add_argument("--stops", type=int, default=3, help="Stops per signal at 120 rpm")
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    started, rng, problems = time.monotonic(), random.Random(args.seed), []
    for kind in ("video", "chat"):
        problems += kills(kind, args.kills, args.items, args.seed, args.longest)
    for signum in (signal.SIGINT, signal.SIGTERM):
        for _ in range(args.stops):
            problems += one_stop(
                signum, STANDARD_KEY, None, rng.randint(3, 12), "at 120 rpm, queued work only"
            )
    problems += one_stop(signal.SIGINT, UNLIMITED_KEY, SLOW_CREATES, 8, "unlimited, 3 s creates in flight")
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"{'PASS' if not problems else 'FAIL'}; total {time.monotonic() - started:.0f} s")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
