"""Label summaries: per answer column of a run's results, the distribution or the mean.

Reads the results Parquet files (one per job) column by column in record batches, so memory stays
flat whatever the number of rows. Every ``answer_*`` column is summarised by its type:

- a string (an enum, a choice question) or a boolean (a structured field, a noul question's
  ``_true``): the count and share of each answer, the most frequent first (at most ``MAX_VALUES``;
  the rest counted as "other");
- a number named ``*confidence``: its mean and the share below the threshold (the unsure answers);
- another number (a score, a noul P(true), a structured number): its mean.

Lists, structs, probability maps and ``answer_json`` are left out: they are not one answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from relaybatch.structured.columns import RAW_COLUMN

MAX_VALUES = 12
BATCH_ROWS = 65_536
CONFIDENCE_SUFFIX = "confidence"


@dataclass
class AnswerSummary:
    """One answer column of one job: its answers counted, or its numbers averaged."""

    job: str
    column: str
    answered: int = 0  # rows with a value
    rows: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    total: float = 0.0
    below: int = 0  # numbers below the threshold (confidence columns)
    confidence: bool = False
    numeric: bool = False

    @property
    def mean(self) -> float | None:
        return self.total / self.answered if self.numeric and self.answered else None

    @property
    def share_below(self) -> float | None:
        return self.below / self.answered if self.confidence and self.answered else None

    def distribution(self) -> list[tuple[str, int, float]]:
        """(answer, count, share of the answered) for the most frequent, then "other"."""
        if self.numeric or not self.answered:
            return []
        top = self.counts.most_common(MAX_VALUES)
        rest = self.answered - sum(count for _, count in top)
        lines = [(value, count, count / self.answered) for value, count in top]
        return [*lines, ("other", rest, rest / self.answered)] if rest else lines


def _summarised(column: pa.Field) -> bool:
    kind = column.type
    if not column.name.startswith("answer_") or column.name == RAW_COLUMN:
        return False
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return (
        pa.types.is_string(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
    )


def _add(summary: AnswerSummary, values: pa.Array, threshold: float) -> None:
    summary.rows += len(values)
    present = values.drop_null()
    summary.answered += len(present)
    if summary.numeric:
        numbers = present.cast(pa.float64()).to_pylist()
        summary.total += sum(numbers)
        if summary.confidence:
            summary.below += sum(number < threshold for number in numbers)
        return
    if pa.types.is_dictionary(present.type):
        present = present.cast(present.type.value_type)
    for value, count in zip(*_value_counts(present), strict=True):
        summary.counts[str(value).lower() if isinstance(value, bool) else str(value)] += count


def _value_counts(values: pa.Array) -> tuple[list[object], list[int]]:
    counted = values.value_counts()
    return counted.field("values").to_pylist(), counted.field("counts").to_pylist()


def summarize_results(results: Iterable[Path], threshold: float = 0.5) -> list[AnswerSummary]:
    """Every answer column of every results file (named ``<job>.parquet``), in file and column order."""
    summaries: list[AnswerSummary] = []
    for path in results:
        parquet = pq.ParquetFile(path)
        columns = [column for column in parquet.schema_arrow if _summarised(column)]
        if not columns:
            continue
        found = {}
        for column in columns:
            kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
            numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
            found[column.name] = AnswerSummary(
                path.stem,
                column.name,
                numeric=numeric,
                confidence=numeric and column.name.endswith(CONFIDENCE_SUFFIX),
            )
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(found)):
            for name, summary in found.items():
                _add(summary, batch.column(name), threshold)
        summaries += found.values()
    return summaries
