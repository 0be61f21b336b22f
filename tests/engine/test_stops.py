"""402 stops new billed work at once while paid work is still polled; 401 stops the run; budgets."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from engine_fakes import FAST, ClientFactory
from engine_items import chat, video
from starlette.applications import Starlette

from relaybatch.emulator.config import AccountConfig
from relaybatch.engine import BilledCall, CheckpointStore, execute
from relaybatch.engine.spend import Refused

ONE_AT_A_TIME = replace(FAST, concurrency=1)


def add_account(app: Starlette, name: str, balance: str) -> str:
    from relaybatch.emulator.state import Account

    key = f"rb-{name}-key"
    account = Account.from_config(AccountConfig(name=name, api_keys=[key], balance_usd=Decimal(balance)))
    state = app.state.emulator
    state.accounts[name] = account
    state.accounts_by_key[key] = account
    return key


async def test_402_stops_new_billed_work_polls_paid_videos_and_resumes_after_top_up(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    key = add_account(fast_app, "one-video", "0.45")  # one 4 s video at 0.10/s, then nothing
    store.add_items([video(1), video(2), chat(1), chat(2)])

    summary = await execute(store, make_client(key), settings=ONE_AT_A_TIME)

    assert summary.stopped is not None and "402" in summary.stopped and "resume" in summary.stopped
    assert store.item(video(1).key)["state"] == "done"  # paid before the 402: polled to the end
    assert summary.counts == {"done": 1, "pending": 3}  # nothing failed, nothing lost
    assert fast_app.state.emulator.request_count("POST", "/v1/chat/completions") == 0  # stopped at once
    assert store.stop_reason() == summary.stopped

    fast_app.state.emulator.top_up("one-video", Decimal("10"))
    resumed = await execute(store, make_client(key), settings=ONE_AT_A_TIME)

    assert resumed.stopped is None and store.stop_reason() is None
    assert resumed.counts == {"done": 4}
    assert fast_app.state.emulator.request_count("POST", "/v2/videos") == 3  # 1 paid + 1 refused + 1 paid


async def test_401_stops_the_run_and_leaves_every_item_resumable(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items([chat(n) for n in range(20)])

    summary = await execute(store, make_client("rb-revoked-key"), settings=FAST)

    assert summary.stopped is not None and "401" in summary.stopped
    assert summary.counts == {"pending": 20}
    assert fast_app.state.emulator.total_requests <= FAST.concurrency  # no spinning on a bad key

    resumed = await execute(store, make_client(), settings=FAST)
    assert resumed.counts == {"done": 20}


class Budget:
    """A spend guard allowing ``limit`` calls at a fixed price each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self.settled: list[str] = []
        self.released: list[str] = []
        self.commits = 0

    def reserve(self, call: BilledCall) -> bool:
        if self.reserved >= self.limit:
            return False
        self.reserved += 1
        return True

    def sending(self, call: BilledCall) -> None:
        pass

    def settle(self, call: BilledCall, result: dict[str, Any] | None) -> Decimal | None:
        self.settled.append(call.key)
        return Decimal("0.001")

    def release(self, call: BilledCall) -> None:
        self.released.append(call.key)
        self.reserved -= 1

    def commit(self) -> None:
        self.commits += 1

    def refusal(self, call: BilledCall) -> Refused:
        return Refused("budget of the run reached", job=None)  # the run's, for good


async def test_a_spend_guard_that_says_no_stops_submissions_and_costs_are_stored(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([chat(n) for n in range(5)] + [chat(99, model="relay-no-such-model")])
    guard = Budget(limit=4)

    summary = await execute(store, make_client(), settings=ONE_AT_A_TIME, spend=guard)

    assert summary.stopped == "budget of the run reached"
    assert summary.counts == {"done": 4, "pending": 2}
    assert summary.spent_usd == Decimal("0.004")
    done = [row for row in store.iter_items(states=["done"])]
    assert {row["cost_usd"] for row in done} == {"0.001"}
    assert len(guard.settled) == 4 and guard.released == []


async def test_a_refused_call_releases_its_reservation(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([chat(1, model="relay-no-such-model")])
    guard = Budget(limit=10)

    await execute(store, make_client(), settings=FAST, spend=guard)

    assert guard.released == [chat(1, model="relay-no-such-model").key]
    assert guard.settled == [] and guard.reserved == 0
