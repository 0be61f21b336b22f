"""Manifest expansion memory: does peak memory stay flat from 100,000 to 1,000,000 rows?

Generates a CSV and a Parquet data file in a temporary folder, points a YAML chat job with
templates and carried columns at each, and runs `Manifest.validate()` (the full streaming pass:
every row expanded into an item, gateway checks, keys, duplicate detection) and then counts
`Manifest.iter_items()`. Each measurement runs in a fresh child process, so ru_maxrss (the
process's peak resident memory) belongs to that measurement alone.

    .venv/bin/python benchmarks/manifest_expand.py            # 100k and 1M rows, CSV and Parquet
    .venv/bin/python benchmarks/manifest_expand.py --rows 20000 200000 --formats csv
    .venv/bin/python benchmarks/manifest_expand.py --mode iterate    # expansion only, as the engine streams

Target: peak RSS at 1M rows within 1.10x of the peak at 100k rows (flat memory).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TARGET_RATIO = 1.10
MANIFEST = """
jobs:
  - name: bulk
    kind: chat
    model: relay-chat-small
    request: {{max_tokens: 64, temperature: 0.2}}
    system: "You answer {{topic}} questions in one sentence."
    prompt: "Question {{id}}: {{question}}"
    data: rows.{suffix}
    carry: [id, topic]
"""


def write_data(folder: Path, rows: int, suffix: str) -> Path:
    """A data file of `rows` distinct rows, written in chunks so the generator stays small too."""
    path = folder / f"rows.{suffix}"
    chunk = 50_000

    def columns(start: int, stop: int) -> dict[str, list[str]]:
        return {
            "id": [f"r{i}" for i in range(start, stop)],
            "topic": [f"topic {i % 97}" for i in range(start, stop)],
            "question": [
                f"What is {i} times {i % 13 + 2}, and why does it matter?" for i in range(start, stop)
            ],
        }

    if suffix == "csv":
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("id,topic,question\n")
            for start in range(0, rows, chunk):
                data = columns(start, min(start + chunk, rows))
                handle.writelines(f'{a},{b},"{c}"\n' for a, b, c in zip(*data.values(), strict=True))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([("id", pa.string()), ("topic", pa.string()), ("question", pa.string())])
        with pq.ParquetWriter(path, schema) as writer:
            for start in range(0, rows, chunk):
                writer.write_table(pa.table(columns(start, min(start + chunk, rows)), schema=schema))
    (folder / f"manifest-{suffix}.yaml").write_text(textwrap.dedent(MANIFEST.format(suffix=suffix)))
    return folder / f"manifest-{suffix}.yaml"


def measure(manifest: Path, trace: bool, mode: str) -> dict[str, float]:
    """Run in the child: validate and/or iterate; report counts, seconds and peak memory."""
    import tracemalloc

    from relaybatch.manifests import Validation, open_manifest

    if trace:
        tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    opened = open_manifest(manifest)
    validation = opened.validate() if mode in ("validate", "both") else Validation()
    validated, cpu_validated = time.perf_counter(), time.process_time()
    items = sum(1 for _ in opened.iter_items()) if mode in ("iterate", "both") else validation.total
    finished = time.perf_counter()
    traced_peak = tracemalloc.get_traced_memory()[1] if trace else 0
    return {
        "items": items,
        "problems": len(validation.problems),
        "validate_s": validated - started,
        # CPU seconds of the validation: comparable between runs on a shared machine, wall seconds not.
        "validate_cpu_s": cpu_validated - cpu_started,
        "iterate_s": finished - validated,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        "tracemalloc_peak_mib": traced_peak / 2**20,
    }


def run_child(manifest: Path, trace: bool, mode: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", str(manifest), "--mode", mode] + (
        ["--trace"] if trace else []
    )
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs=2, default=[100_000, 1_000_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--formats", nargs="+", default=["csv", "parquet"], choices=["csv", "parquet"])
    parser.add_argument(
        "--trace", action="store_true", help="also report the tracemalloc peak (about ten times slower)"
    )
    parser.add_argument(
        "--mode",
        choices=["iterate", "validate", "both"],
        default="both",
        help="iterate: iter_items() only (what the engine streams); validate: validate() only; both",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.trace, args.mode)))
        return
    small, large = args.rows
    header = ("format", "rows", "items", "validate s", "CPU s", "iterate s", "peak RSS MiB", "traced MiB")
    print("{:8} {:>9} {:>9} {:>11} {:>8} {:>10} {:>13} {:>11}".format(*header))
    verdicts = []
    for suffix in args.formats:
        peaks = []
        for rows in (small, large):
            with tempfile.TemporaryDirectory(prefix="relaybatch-bench-") as folder:
                result = run_child(write_data(Path(folder), rows, suffix), args.trace, args.mode)
            assert result["items"] == rows and result["problems"] == 0, result
            peaks.append(result["peak_rss_mib"])
            print(
                f"{suffix:8} {rows:>9,} {result['items']:>9,.0f} {result['validate_s']:>11.1f} "
                f"{result['validate_cpu_s']:>8.1f} "
                f"{result['iterate_s']:>10.1f} {result['peak_rss_mib']:>13.1f} "
                f"{result['tracemalloc_peak_mib']:>11.2f}",
                flush=True,
            )
        ratio = peaks[1] / peaks[0]
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        verdicts.append(verdict)
        label = f"{suffix} ({args.mode})"
        print(
            f"{label}: peak RSS {large:,} rows / {small:,} rows = {ratio:.3f} (target <= {TARGET_RATIO})",
            verdict,
        )
    sys.exit(0 if all(verdict == "PASS" for verdict in verdicts) else 1)


if __name__ == "__main__":
    main()
