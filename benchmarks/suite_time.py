"""The test suite's time (target: near 10 minutes of pytest for the whole suite on the 2-core machine).

Runs pytest as `make test` does (the addopts of pyproject.toml: two xdist workers), from the
repository root, and prints pytest's own figure, the CPU seconds of pytest and of what it waited
for (workers, servers, the tests' subprocesses) and the ratio of pytest's figure to the target.
Extra arguments go to pytest: `-n 0` gives the one-process figure to compare with, a path a part
of the suite.
Run the whole suite only when nothing else heavy runs (it takes 10-20 minutes and both cores).

    .venv/bin/python benchmarks/suite_time.py [PYTEST ARGS...]
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 600.0


def main(args: list[str]) -> int:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = re.search(r" in ([\d.]+)s", summary)
    if found is None:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        print(f"no pytest summary line (exit {done.returncode})")
        return 1
    pytest_seconds = float(found.group(1))
    print(summary)
    print(
        f"pytest {pytest_seconds:.0f} s ({wall:.0f} s with start-up), "
        f"CPU {children.ru_utime + children.ru_stime:.0f} s; "
        f"ratio to the {TARGET_SECONDS:.0f} s target: {pytest_seconds / TARGET_SECONDS:.2f}x"
    )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
