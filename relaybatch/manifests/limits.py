"""The bounds on what a manifest may make relaybatch load: one home for every limit.

Each limit stops a file from costing memory or time out of proportion to the work it asks for (a
YAML alias bomb, a 50,000-level nesting, a one-line 2 GB "row"), and each one is a located error
saying what to do instead. docs/manifests.md ("Limits") lists them with the same figures.
"""

from __future__ import annotations

from decimal import Decimal

# PyYAML keeps about 45 bytes of node per byte of YAML (6.8 MB of inline items took 326 MB to
# compose), so a YAML manifest stays small and rows in bulk go in a data file, which streams.
MAX_YAML_BYTES = 2 * 1024 * 1024
# Rows written inline in one job's `items:`; more belong in a data file (`data:`).
MAX_INLINE_ITEMS = 10_000
# Nesting of mappings and lists, in YAML and in JSON rows or cells. Real requests nest a handful of
# levels (a judgment's criteria is about six); Python's parsers overflow their stack in the thousands.
MAX_DEPTH = 64
# Values that aliases (`*name`) may repeat across a YAML document, counting what each alias expands
# to. Nine levels of ten aliases each ("billion laughs") would be 10^9 values.
MAX_ALIAS_VALUES = 100_000
# One request's JSON, and one line of a CSV or JSONL file. The families cap inline request bodies
# near 20 MB (inline image data included), so a bigger one could only fail at the gateway.
MAX_REQUEST_BYTES = 20 * 1024 * 1024
# The largest budget (run or job, manifest or --budget): money is shown to 1/10,000 USD within
# Decimal's 28 digits, and a budget of 1e400 USD crashed every screen that shows it.
MAX_BUDGET_USD = Decimal(1_000_000_000_000)


def megabytes(size: int) -> str:
    """A byte count as the docs write it: 2 MiB -> '2 MB'."""
    return f"{size / (1024 * 1024):g} MB"
