"""`relaybatch validate` as a user runs it: peak memory at 20,000 and 1,000,000 rows, and the ratio.

Generates a table-shortcut CSV (id, model, prompt, max_tokens, temperature) of each size in a
temporary folder, runs `python -m relaybatch validate FILE` as a separate process, and reads that
process's own peak resident memory from os.wait4 (ru_maxrss, KiB on Linux): start-up, imports, the
streaming pass, duplicate detection and the printed plan all count.

    .venv/bin/python benchmarks/validate_memory.py                  # 20,000 and 1,000,000 rows
    .venv/bin/python benchmarks/validate_memory.py --rows 2000 50000  # a quick try
    .venv/bin/python benchmarks/validate_memory.py --offline        # without the model-catalog read

Target (issue 19, validation's share of "peak RSS of relaybatch run"): the large figure within
1.10x of the small one, and both well under 250 MB. Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.10
TARGET_MIB = 250


def write_csv(path: Path, rows: int) -> None:
    """`rows` distinct chat rows, written in chunks so the generator stays small."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("id,model,prompt,max_tokens,temperature\n")
        chunk = 50_000
        for start in range(0, rows, chunk):
            handle.writelines(
                f'r{i},relay-chat-small,"Question {i}: what is {i} times {i % 13 + 2}?",64,0.2\n'
                for i in range(start, min(start + chunk, rows))
            )


def measure(path: Path, offline: bool) -> tuple[float, float, float, str]:
    """(peak RSS MiB, wall seconds, CPU seconds, last output line) of one `relaybatch validate` process.

    CPU seconds (user + system, from os.wait4) compare runs on a shared machine; wall seconds do not."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "relaybatch", "validate", *(["--offline"] if offline else []), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"validate failed ({process.returncode}):\n{output}")
    summary = next((line for line in output.splitlines() if "valid," in line), output.strip())
    return usage.ru_maxrss / 1024, seconds, usage.ru_utime + usage.ru_stime, summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs=2, default=[20_000, 1_000_000], metavar=("SMALL", "LARGE"))
    parser.add_argument(
        "--offline", action="store_true", help="validate --offline: the pass alone, without the catalog read"
    )
    args = parser.parse_args()
    peaks = []
    print(f"{'rows':>10} {'peak RSS MiB':>13} {'wall s':>8} {'CPU s':>8}  output")
    with tempfile.TemporaryDirectory(prefix="relaybatch-validate-") as folder:
        for rows in args.rows:
            path = Path(folder) / f"rows-{rows}.csv"
            write_csv(path, rows)
            peak, seconds, cpu, summary = measure(path, args.offline)
            path.unlink()
            peaks.append(peak)
            print(f"{rows:>10,} {peak:>13.1f} {seconds:>8.1f} {cpu:>8.1f}  {summary}")
    ratio = peaks[1] / peaks[0]
    verdict = "meets" if ratio <= TARGET_RATIO and max(peaks) <= TARGET_MIB else "MISSES"
    print(
        f"ratio {ratio:.3f} (target <= {TARGET_RATIO}); largest {max(peaks):.1f} MiB "
        f"(target <= {TARGET_MIB}): {verdict} the target"
    )


if __name__ == "__main__":
    main()
