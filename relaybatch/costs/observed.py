"""Answers' real lengths, from earlier runs' ledgers: what `relaybatch plan` expects a job to write.

Without them a plan can only assume (cost_model/expected.py: an answer is the request's cap, but
at most ``EXPECTED_ANSWER_TOKENS``), which puts a job of 500-word essays at a tenth of its bill.
With them, a job's calls to a model are expected to write what that job's earlier calls to that
model wrote on average (output and reasoning tokens of every charged call, wasted re-asks
included), over every run under the runs folder, and an item is expected to take as many calls as
the earlier items took (a structured job's re-asks). The plan says which it did for each job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from relaybatch.costs.ledger import CHARGED, CostStore, read_ledger
from relaybatch.folder_lock import executed_elsewhere
from relaybatch.run_folder import COST_STORE_NAME, LEDGER_NAME


@dataclass(frozen=True)
class ObservedOutput:
    """What a (job, model)'s earlier calls wrote: for how many items, how many calls, and their mean
    output and reasoning."""

    items: int
    calls: int
    output_tokens: int
    reasoning_tokens: int
    runs: int = 1

    @property
    def mean_output(self) -> int:
        return round(self.output_tokens / self.calls) if self.calls else 0

    @property
    def calls_per_item(self) -> float:
        """Above 1 for a structured job whose invalid answers were asked again."""
        return self.calls / self.items if self.items else 1.0

    @property
    def mean_reasoning(self) -> int:
        return round(self.reasoning_tokens / self.calls) if self.calls else 0

    def plus(self, other: ObservedOutput) -> ObservedOutput:
        return ObservedOutput(
            self.items + other.items,
            self.calls + other.calls,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.runs + other.runs,
        )


def _cost_stores(runs_dir: Path) -> Iterator[Path]:
    if runs_dir.is_dir():
        yield from sorted(runs_dir.glob(f"*/{COST_STORE_NAME}"))


def observed_outputs(runs_dir: Path) -> dict[tuple[str, str], ObservedOutput]:
    """Per (job, model), what the charged calls of every run under ``runs_dir`` wrote."""
    found: dict[tuple[str, str], ObservedOutput] = {}
    for path in _cost_stores(runs_dir):
        if executed_elsewhere(path.parent) is not None:  # that host's: its ledger file instead
            sums = _outputs_in_ledger(path.parent / LEDGER_NAME)
        else:
            store = CostStore.open_read_only(path)
            if store is None:
                continue
            try:
                sums = store.outputs_by_job_and_model()
            finally:
                store.close()
        for key, (items, calls, output, reasoning) in sums.items():
            seen = ObservedOutput(items, calls, output, reasoning)
            found[key] = found[key].plus(seen) if key in found else seen
    return found


def _outputs_in_ledger(ledger: Path) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """``CostStore.outputs_by_job_and_model`` from a ledger Parquet file (as of its export): for a
    run's store that an execution on another host holds, never opened from here (DESIGN.md 11)."""
    items: dict[tuple[str, str], set[str]] = {}
    sums: dict[tuple[str, str], list[int]] = {}
    columns = ("job", "model", "item_key", "outcome", "output_tokens", "reasoning_tokens")
    for record in read_ledger(ledger, columns):
        if record["outcome"] != CHARGED:
            continue
        key = (str(record["job"]), str(record["model"]))
        items.setdefault(key, set()).add(str(record["item_key"]))
        calls = sums.setdefault(key, [0, 0, 0])
        calls[0] += 1
        calls[1] += int(record["output_tokens"] or 0)
        calls[2] += int(record["reasoning_tokens"] or 0)
    return {
        key: (len(items[key]), calls, output, reasoning) for key, (calls, output, reasoning) in sums.items()
    }
