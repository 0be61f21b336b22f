"""Drive every item of a run to a terminal state, checkpointing each step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from relaybatch.engine.kinds import CALLS
from relaybatch.engine.store import DONE, FAILED, PENDING, SENDING, UNCERTAIN, CheckpointStore
from relaybatch.gateway import GatewayClient, GatewayError


@dataclass(frozen=True)
class RunSummary:
    sent: int
    counts: dict[str, int]


def mark_interrupted_sends_uncertain(store: CheckpointStore) -> int:
    """Items left in `sending` by a crash may have been billed: never resend them blindly."""
    keys = store.keys_in_state(SENDING)
    for key in keys:
        store.transition(key, UNCERTAIN, last_error="interrupted between send and answer")
    return len(keys)


async def _run_item(store: CheckpointStore, client: GatewayClient, key: str) -> None:
    item = store.item(key)
    store.transition(key, SENDING, attempts=item["attempts"] + 1)
    try:
        result = await CALLS[item["kind"]](client, item["request"])
    except GatewayError as exc:
        store.transition(key, FAILED, last_error=str(exc))
        return
    store.transition(key, DONE, result=result)


async def execute(store: CheckpointStore, client: GatewayClient, concurrency: int = 64) -> RunSummary:
    """Send every pending item once; done items are never sent again."""
    mark_interrupted_sends_uncertain(store)
    keys = store.keys_in_state(PENDING)
    slots = asyncio.Semaphore(concurrency)

    async def bounded(key: str) -> None:
        async with slots:
            await _run_item(store, client, key)

    await asyncio.gather(*(bounded(key) for key in keys))
    return RunSummary(sent=len(keys), counts=store.count_by_state())
