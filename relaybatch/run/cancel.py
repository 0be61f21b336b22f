"""`relaybatch cancel RUN [ITEM...] [--job NAME] [--all-open]`: cancel a run's remote work at the
gateway (V2 videos still rendering) and record it.

Each chosen item that is open remote work (``submitted`` or ``polling``) is asked about first: a
render that finished meanwhile is left alone (the next run downloads it: it is paid for), one the
gateway no longer knows is left for the next run to record, and one still running is cancelled
(``DELETE /v2/videos/{id}``) and recorded ``cancelled`` with the reason. V1 tasks have no cancel
route in the interface: they are named and kept. Cancelling is free; the render's quote was
charged at its create and is not refunded (the gateway's rule).

The caller holds the run's lock (an execution polling the same items would race this).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relaybatch.engine.kinds import CALLS, VIDEO_TERMINAL_STATUSES
from relaybatch.engine.states import CANCELLED, POLLING, SUBMITTED
from relaybatch.engine.store import Change, CheckpointStore, now_ms
from relaybatch.gateway import GatewayClient, GatewayError, NotFound

CANCELLED_BY_COMMAND = (
    "cancelled with `relaybatch cancel`: the remote render was stopped (DELETE) before it finished"
)


@dataclass
class CancelReport:
    cancelled: list[str] = field(default_factory=list)
    # item id -> why it was not cancelled (finished meanwhile, no cancel route, not open, an error)
    kept: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        named = f": {', '.join(self.cancelled[:10])}" if self.cancelled else ""
        more = f" and {len(self.cancelled) - 10} more" if len(self.cancelled) > 10 else ""
        return [
            f"cancelled {len(self.cancelled)} remote render(s){named}{more}",
            *(f"kept {item}: {why}" for item, why in self.kept.items()),
        ]


def chosen_items(
    store: CheckpointStore, items: Sequence[str], job: str | None, all_open: bool
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The open remote items chosen, and why each named item that is not one is left out."""
    columns = ["key", "item_id", "job", "kind", "state", "remote_id"]
    wanted = set(items)
    chosen, left_out = [], {}
    rows = store.iter_items(job=job, states=[] if wanted else [SUBMITTED, POLLING], columns=columns)
    for row in rows:
        if wanted and row["item_id"] not in wanted:
            continue
        if row["state"] in (SUBMITTED, POLLING):
            chosen.append(row)
        elif wanted:
            left_out[row["item_id"]] = f"not open remote work (it is {row['state']})"
        wanted.discard(row["item_id"])
    for missing in sorted(wanted):
        left_out[missing] = "no such item in this run" + (f"'s job {job}" if job else "")
    del all_open  # --all-open only says "every open item" out loud; no filter is the same
    return chosen, left_out


async def cancel_remote_work(
    store: CheckpointStore, client: GatewayClient, rows: list[dict[str, str]]
) -> CancelReport:
    report = CancelReport()
    for row in rows:
        item, calls = row["item_id"], CALLS.get(row["kind"])
        if calls is None or calls.cancel is None:
            report.kept[item] = "the gateway has no cancel route for this kind (V1 tasks): kept and polled"
            continue
        try:
            status = (await client.video_get(row["remote_id"])).status
            if status in VIDEO_TERMINAL_STATUSES:
                report.kept[item] = f"it is {status} at the gateway now: the next run records it"
                continue
            await calls.cancel(client, row["remote_id"])
        except NotFound:
            report.kept[item] = f"the gateway no longer knows {row['remote_id']}: the next run records it"
            continue
        except GatewayError as error:
            report.kept[item] = f"the gateway refused: {error}"
            continue
        fields = {"last_error": CANCELLED_BY_COMMAND, "finished_at": now_ms()}
        store.apply([Change(row["key"], CANCELLED, fields, CANCELLED_BY_COMMAND)])
        report.cancelled.append(item)
    return report
