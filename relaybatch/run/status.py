"""What `relaybatch status RUN` shows: counts per state and job, why the run stopped, uncertain items."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from relaybatch.console import table as folding_table
from relaybatch.engine.states import ALL_STATES, UNCERTAIN
from relaybatch.engine.store import CheckpointStore

# Enough to act on without flooding a terminal; `relaybatch export` has every row.
UNCERTAIN_LISTED = 50


def counts_table(store: CheckpointStore) -> Table:
    per_job = store.count_by_job_and_state()
    states = [state for state in ALL_STATES if any(state in counts for counts in per_job.values())]
    table = folding_table("job", *states, "total", title="items per state")
    totals = dict.fromkeys(states, 0)
    for job, counts in per_job.items():
        table.add_row(job, *(str(counts.get(state, 0)) for state in states), str(sum(counts.values())))
        for state in states:
            totals[state] += counts.get(state, 0)
    if len(per_job) > 1:
        table.add_row(
            "all", *(str(totals[state]) for state in states), str(sum(totals.values())), style="bold"
        )
    return table


def uncertain_table(store: CheckpointStore, limit: int = UNCERTAIN_LISTED) -> Table | None:
    rows = list(store.iter_items(states=[UNCERTAIN], columns=["job", "item_id", "last_error"], limit=limit))
    if not rows:
        return None
    table = folding_table(
        "job", "item", "why", title="uncertain items (sent, answer never recorded; not resent)"
    )
    for row in rows:
        table.add_row(row["job"], row["item_id"], row["last_error"] or "")
    return table


def status_view(store: CheckpointStore) -> Group:
    parts: list[Table | Text] = [counts_table(store)]
    stopped = store.stop_reason()
    if stopped:
        parts.append(Text(f"last execution stopped early: {stopped}"))
    uncertain = uncertain_table(store)
    if uncertain is not None:
        parts.append(uncertain)
        total = store.count_by_state().get(UNCERTAIN, 0)
        if total > UNCERTAIN_LISTED:
            parts.append(Text(f"... and {total - UNCERTAIN_LISTED} more; `relaybatch export` lists them all"))
        parts.append(
            Text(
                "Check these in the gateway console before resending; set `uncertain: resend` in the "
                "manifest's run settings to send them again."
            )
        )
    return Group(*parts)
