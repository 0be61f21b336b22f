"""Bytes per item a run leaves on disk: per file, and per SQLite table and index (``dbstat``).

For each SQLite store under the folder (``checkpoint.sqlite``, ``costs.sqlite``, a shard's too),
every table and index with its payload, unused and total bytes divided by the run's items; other
files (results and ledger Parquet) by size. ``cli_end_to_end.py`` prints this after its first run.

    .venv/bin/python benchmarks/disk_per_item.py data/runs/NAME            # items read from the store
    .venv/bin/python benchmarks/disk_per_item.py data/runs/NAME --items 20000
"""

from __future__ import annotations

import argparse
import sqlite3
from collections import Counter
from pathlib import Path


def store_items(folder: Path) -> int:
    """Items of the run, counted in its checkpoint stores."""
    total = 0
    for path in folder.rglob("checkpoint.sqlite"):
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
            total += connection.execute("select count(*) from items").fetchone()[0]
    return total


def table_bytes(path: Path) -> list[tuple[str, int, int, int]]:
    """(table or index, payload, unused, total bytes) of one SQLite file, largest first."""
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "select name, sum(payload), sum(unused), sum(pgsize) from dbstat group by name order by 4 desc"
        ).fetchall()
    finally:
        connection.close()
    return [(str(name), int(payload), int(unused), int(size)) for name, payload, unused, size in rows]


def file_bytes(folder: Path) -> Counter[str]:
    """Bytes per kind of file (SQLite side files counted with their database)."""
    use: Counter[str] = Counter()
    for path in folder.rglob("*"):
        if path.is_file():
            name = path.name.split(".sqlite")[0] + ".sqlite" if ".sqlite" in path.name else path.suffix
            use[name] += path.stat().st_size
    return use


def report(folder: Path, items: int) -> str:
    lines = []
    use = file_bytes(folder)
    total = sum(use.values())
    lines.append(f"{items:,} items, {total / items:,.0f} bytes per item on disk")
    lines.append("| file | B/item |")
    lines.append("|---|---|")
    lines += [f"| {name} | {size / items:,.0f} |" for name, size in use.most_common()]
    for path in sorted(folder.rglob("*.sqlite")):
        lines.append("")
        lines.append(f"{path.relative_to(folder)} (dbstat, bytes per item)")
        lines.append("| table or index | payload | unused | total |")
        lines.append("|---|---|---|---|")
        for name, payload, unused, size in table_bytes(path):
            lines.append(f"| {name} | {payload / items:,.0f} | {unused / items:,.0f} | {size / items:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="A run folder, or a runs folder holding one run")
    parser.add_argument(
        "--items", type=int, default=0, help="Items of the run (default: counted in its stores)"
    )
    args = parser.parse_args()
    items = args.items or store_items(args.folder)
    if not items:
        raise SystemExit(f"{args.folder}: no items found; pass --items")
    print(report(args.folder, items))


if __name__ == "__main__":
    main()
