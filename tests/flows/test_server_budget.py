"""The budget and the render cap held by the Prefect server (relaybatch/fleet/), against the test
harness's real server: what each store holds is the server's, a dead holder's count survives, and
two holders never pass one budget or one cap."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import random
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from relaybatch.fleet.budget import UNIT_USD, ServerBudget, ServerBudgetSpec, units_up
from relaybatch.fleet.renders import ServerRenderSlots
from relaybatch.server_limits import ServerLimits

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
async def limits() -> AsyncIterator[ServerLimits]:
    from prefect.settings import PREFECT_API_URL

    limits = ServerLimits(str(PREFECT_API_URL.value()))
    try:
        yield limits
    finally:
        await limits.aclose()


def _spec(run: str, holder: str, usd: str = "0.01") -> ServerBudgetSpec:
    return ServerBudgetSpec("run", run, Decimal(usd), holder)


async def test_two_holders_never_pass_one_budget_and_each_holds_what_it_counts(limits: ServerLimits) -> None:
    run = f"two-{random.randrange(10**9)}"
    budget = Decimal("0.01")
    holders = [ServerBudget(limits, _spec(run, f"{run}:part-{n}-of-2")) for n in (1, 2)]
    for holder in holders:
        await holder.open(Decimal(0))
    rng = random.Random(7)
    spent = [Decimal(0), Decimal(0)]

    async def send(index: int) -> None:
        holder = holders[index]
        while True:
            worst = Decimal(rng.randrange(50, 400)) * UNIT_USD
            if not await holder.make_room(worst, worst * 5):
                await holder.give_back()
                return
            holder.set_aside -= worst  # the call reserves it
            holder.used += worst
            await asyncio.sleep(0)
            actual = (worst * Decimal(rng.randrange(10, 100)) / 100).quantize(Decimal("0.00000001"))
            holder.used += actual - worst  # settled below its worst case
            spent[index] += actual

    await asyncio.gather(send(0), send(1))
    assert sum(spent) <= budget
    assert sum(spent) > budget * Decimal("0.9")  # the room went to calls, not lost between holders
    for holder in holders:
        await holder.reconcile()
        state = await limits.read(holder.spec.holder_name)
        assert state is not None and state.active_slots == units_up(holder.used)
    total = await limits.read(holders[0].spec.name)
    assert total is not None and total.active_slots == sum(units_up(h.used) for h in holders)


async def test_a_dead_holders_count_survives_and_its_next_open_gives_back_only_the_unused_room(
    limits: ServerLimits,
) -> None:
    spec = _spec(f"dead-{random.randrange(10**9)}", "dead:part-1-of-1")
    first = ServerBudget(limits, spec)
    await first.open(Decimal(0))
    assert await first.make_room(Decimal("0.0003"), Decimal("0.003"))  # a call in flight
    first.set_aside, first.used = Decimal(0), Decimal("0.0003")
    # The process dies here: nothing given back. The server still counts all it took.
    state = await limits.read(spec.name)
    assert state is not None and state.active_slots == units_up(Decimal("0.003"))
    # Its next execution: the call in flight is an unknown outcome at its worst case in the ledger.
    again = ServerBudget(limits, spec)
    await again.open(Decimal("0.0003"))
    state = await limits.read(spec.name)
    assert state is not None and state.active_slots == 300 == again.held
    # Resolved as not charged (relaybatch resolve): the next execution gives it back.
    resolved = ServerBudget(limits, spec)
    await resolved.open(Decimal(0))
    state = await limits.read(spec.name)
    assert state is not None and state.active_slots == 0


async def test_a_store_that_counts_more_than_the_budget_has_room_for_sends_nothing(
    limits: ServerLimits,
) -> None:
    run = f"short-{random.randrange(10**9)}"
    other = ServerBudget(limits, _spec(run, f"{run}:a"))
    await other.open(Decimal("0.009"))
    late = ServerBudget(limits, _spec(run, f"{run}:b"))
    await late.open(Decimal("0.002"))  # spent before the server held the budget
    assert late.short
    assert not await late.make_room(Decimal("0.000001"), Decimal("0.00001"))


async def test_two_render_slot_holders_share_one_cap_and_a_dead_ones_renders_keep_their_slots(
    limits: ServerLimits,
) -> None:
    model = f"relay-video-{random.randrange(10**9)}"
    one = ServerRenderSlots(limits, "r:part-1-of-2", {model: 3})
    two = ServerRenderSlots(limits, "r:part-2-of-2", {model: 3})
    await one.open()
    await two.open()
    taken = [await one.take("v", model), await one.take("v", model), await two.take("v", model)]
    assert taken == [True, True, True]
    assert not await two.take("v", model) and not await one.take("v", model)
    one.release("v", model)
    await one.sync()
    assert await two.take("v", model)
    state = await limits.read(one.name(model))
    assert state is not None and state.active_slots == 3
    # two dies with 2 renders in flight; its next execution finds 1 still rendering.
    again = ServerRenderSlots(limits, "r:part-2-of-2", {model: 3})
    await again.open()
    assert again.held[model] == 2
    again.occupy("v", model)
    await again.sync()
    state = await limits.read(one.name(model))
    assert state is not None and state.active_slots == 2  # one's render and the one still rendering
    one.release("v", model)  # one's last render ends: it closes with nothing in flight
    for slots in (one, again):
        await slots.close()
    if two._syncer is not None:  # the dead one: stopped, nothing given back
        two._syncer.cancel()
    # A holder closed with nothing in flight is gone from the server; one still rendering stays.
    assert await limits.read(one.holder_name(model)) is None
    held = await limits.read(again.holder_name(model))
    assert held is not None and held.active_slots == 1
    reopened = ServerRenderSlots(limits, "r:part-1-of-2", {model: 3})
    await reopened.open()  # created again, empty
    assert reopened.held[model] == 0 and await reopened.take("v", model)
    reopened.release("v", model)
    await reopened.close()
    assert await limits.read(one.holder_name(model)) is None


async def test_spend_of_the_runs_other_stores_is_counted_once_from_their_ledger_files(
    limits: ServerLimits, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from relaybatch.fleet.setup import other_stores
    from relaybatch.run_folder import RunPaths

    run = f"seeded-{random.randrange(10**9)}"
    root = RunPaths(tmp_path / run)
    money = pa.decimal128(38, 18)
    for folder, rows in (
        (root, [("0.001", "0.001", None, "a"), (None, "0", "0.0005", "b")]),
        (root.partition(2, 2), []),
    ):
        folder.root.mkdir(parents=True, exist_ok=True)
        folder.cost_store.touch()
        columns = {
            name: pa.array([Decimal(row[i]) if row[i] else None for row in rows], money)
            for i, name in enumerate(("usd", "known_usd", "reserved_usd"))
        }
        columns["job"] = pa.array([row[3] for row in rows], pa.string())
        pq.write_table(pa.table(columns), folder.ledger)
    others = other_stores(root.partition(1, 2), run)
    assert {holder: read(None) for holder, read in others.items()} == {
        run: Decimal("0.0015"),
        f"{run}:part-2-of-2": Decimal(0),
    }
    assert others[run]("a") == Decimal("0.001") and others[run]("b") == Decimal("0.0005")
    assert others[run]("c") == 0

    for _ in range(2):  # two partitions open: the run's own store is counted once
        budget = ServerBudget(limits, _spec(run, f"{run}:part-1-of-2"))
        await budget.open(Decimal(0))
        for holder, read in others.items():
            assert await budget.seed(holder, functools.partial(read, None))
    state = await limits.read(budget.spec.name)
    assert state is not None and state.active_slots == 1500
    full = ServerBudget(limits, _spec(f"full-{run}", "x", usd="0.001"))
    await full.open(Decimal(0))
    assert not await full.seed("before", lambda: Decimal("0.002")) and full.short


class _Store:
    def __init__(self) -> None:
        self.counted = Decimal(0)

    def spent(self) -> tuple[Decimal, dict[str, Decimal]]:
        return self.counted, {}


class _Ledger:
    """The run's own guard, as far as the server budget uses it: every call's worst case 100
    millionths, charged 40."""

    def __init__(self) -> None:
        self.store = _Store()
        self.execution: int | None = None

    def worst_case(self, call: object) -> Decimal:
        return Decimal("0.0001")

    def reserve(self, call: object) -> bool:
        self.store.counted += Decimal("0.0001")
        return True

    def sending(self, call: object) -> None:
        pass

    def settle_counting(self, call: object, result: object) -> tuple[Decimal, Decimal]:
        self.store.counted += Decimal("0.00004") - Decimal("0.0001")
        return Decimal("0.00004"), Decimal("0.00004")

    def release(self, call: object) -> None:
        self.store.counted -= Decimal("0.0001")

    def commit(self) -> None:
        pass


async def test_room_a_process_stops_asking_for_goes_back_to_the_server(limits: ServerLimits) -> None:
    from relaybatch.engine.spend import BilledCall
    from relaybatch.fleet.budget import IDLE_SECONDS, FleetSettings, ServerBudgetGuard

    run = f"idle-{random.randrange(10**9)}"
    budget = ServerBudget(limits, _spec(run, f"{run}:part-1-of-1"))
    ledger = _Ledger()
    guard = ServerBudgetGuard(ledger, [budget], limits, FleetSettings(budget_block_calls=20))  # type: ignore[arg-type]
    await guard.open()
    try:
        call = BilledCall("k1", "i1", "job", "chat", {}, 1)
        assert await guard.room_for(call) is None
        assert guard.reserve(call)
        state = await limits.read(budget.spec.name)
        assert state is not None and state.active_slots == 2000  # 20 worst cases taken at once
        guard.settle(call, {})
        await asyncio.sleep(IDLE_SECONDS * 2.5)
        state = await limits.read(budget.spec.name)
        assert state is not None and state.active_slots == 40  # the charge; the unused room went back
    finally:
        await guard.close()
    state = await limits.read(budget.spec.holder_name)
    assert state is not None and state.active_slots == 40


async def test_a_process_waiting_for_room_gets_what_a_busy_process_holds_beyond_its_calls(
    limits: ServerLimits,
) -> None:
    """A busy process took room in blocks and keeps sending; another, with nothing in flight, finds
    the budget full. It says it waits, and the busy one gives back what its calls do not need and
    takes one call at a time from then on, so the waiter sends within a few seconds, long before
    the busy process ends (without the signal it would wait for that)."""
    from relaybatch.engine.spend import BilledCall
    from relaybatch.fleet.budget import IDLE_SECONDS, FleetSettings, ServerBudgetGuard

    run = f"want-{random.randrange(10**9)}"
    guards = [
        ServerBudgetGuard(
            _Ledger(),  # type: ignore[arg-type]
            [ServerBudget(limits, _spec(run, f"{run}:part-{n}-of-2", usd="0.0030"))],  # 30 worst cases
            limits,
            FleetSettings(budget_block_calls=30, budget_wait_seconds=60),
        )
        for n in (1, 2)
    ]
    busy, waiter = guards
    for guard in guards:
        await guard.open()
    stop = asyncio.Event()
    sent = [0, 0]

    async def keep_sending() -> None:  # one call at a time, each answered 4xx (nothing charged)
        n = 0
        while not stop.is_set():
            n += 1
            call = BilledCall(f"b{n}", f"b{n}", "job", "chat", {}, 1)
            if await busy.room_for(call) is None and busy.reserve(call):
                sent[0] += 1
                await asyncio.sleep(0.05)
                busy.release(call)
            else:
                await asyncio.sleep(0.05)

    try:
        first = BilledCall("b0", "b0", "job", "chat", {}, 1)
        assert await busy.room_for(first) is None and busy.reserve(first)
        state = await limits.read(busy.budgets[0].spec.name)
        assert state is not None and state.limit - state.active_slots < 100  # all taken at once
        sending = asyncio.create_task(keep_sending())
        started = asyncio.get_running_loop().time()
        call = BilledCall("w1", "w1", "job", "chat", {}, 1)
        assert await waiter.room_for(call) is None  # room came back while the busy one still sends
        waited = asyncio.get_running_loop().time() - started
        assert waiter.reserve(call)
        sent[1] += 1
        assert not sending.done() and waited < 60
        assert waited >= IDLE_SECONDS / 2  # it did wait: the room was all with the busy process
        stop.set()
        await sending
        waiter.settle(call, {})
        busy.settle(first, {})
    finally:
        stop.set()
        for guard in guards:
            await guard.close()
    state = await limits.read(busy.budgets[0].spec.name)
    holders = [await limits.read(guard.budgets[0].spec.holder_name) for guard in guards]
    assert state is not None and all(holder is not None for holder in holders)
    assert state.active_slots == sum(holder.active_slots for holder in holders if holder)
    assert state.active_slots <= 3000 and sent[1] == 1 and sent[0] >= 1


class _JobLedger(_Ledger):
    """As _Ledger, and what it counts per job (a job's budget on the server counts only its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_job: dict[str, Decimal] = {}
        self.store.spent = lambda: (self.store.counted, dict(self.by_job))  # type: ignore[method-assign]

    def reserve(self, call: object) -> bool:
        job = call.job  # type: ignore[attr-defined]
        self.by_job[job] = self.by_job.get(job, Decimal(0)) + Decimal("0.0001")
        return super().reserve(call)

    def settle_counting(self, call: object, result: object) -> tuple[Decimal, Decimal]:
        self.by_job[call.job] += Decimal("0.00004") - Decimal("0.0001")  # type: ignore[attr-defined]
        return super().settle_counting(call, result)


async def test_a_jobs_budget_on_the_server_holds_its_calls_across_partitions_and_no_other_jobs(
    limits: ServerLimits,
) -> None:
    from relaybatch.engine.spend import BilledCall
    from relaybatch.fleet.budget import FleetSettings, ServerBudgetGuard, budget_specs

    run = f"jobs-{random.randrange(10**9)}"
    settings = FleetSettings(budget_wait_seconds=0, budget_block_calls=1)  # room one call at a time
    guards = []
    for n in (1, 2):  # two partitions of one run; job "a" may spend 5 worst cases in all
        specs = budget_specs(run, f"{run}:part-{n}-of-2", None, settings, {"a": Decimal("0.0005")})
        budgets = [ServerBudget(limits, spec) for spec in specs]
        guards.append(ServerBudgetGuard(_JobLedger(), budgets, limits, settings))  # type: ignore[arg-type]
    first, second = guards
    for guard in guards:
        await guard.open()
    try:
        calls = [BilledCall(f"a{n}", f"a{n}", "a", "chat", {}, 1) for n in range(6)]
        for call in calls[:3]:
            assert await first.room_for(call) is None and first.reserve(call)
        for call in calls[3:5]:
            assert await second.room_for(call) is None and second.reserve(call)
        refused = await second.room_for(calls[5])  # 5 of job a in flight: its budget is full
        assert refused is not None and "job a's budget of 0.0005 USD" in refused.message
        other = BilledCall("b1", "b1", "b", "chat", {}, 1)
        assert await second.room_for(other) is None and second.reserve(other)  # no budget of its own
        first.settle(calls[0], {})  # charged 40 of its 100: room for none more than before
        state = await limits.read(f"relaybatch-budget:job:{run}:a")
        assert state is not None and state.limit == 500 and state.active_slots <= 500
        for call in calls[1:3]:
            first.settle(call, {})
        for call in calls[3:5]:
            second.settle(call, {})
        second.settle(other, {})
    finally:
        for guard in guards:
            await guard.close()
    state = await limits.read(f"relaybatch-budget:job:{run}:a")
    assert state is not None and state.active_slots == 5 * 40  # job a's five charges, b's none
    assert await limits.read(f"relaybatch-budget:job:{run}:b") is None


async def test_status_shows_the_runs_budget_as_the_server_counts_it(
    limits: ServerLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relaybatch.fleet.setup import server_budget_lines

    run = f"status-{random.randrange(10**9)}"
    budget = ServerBudget(limits, _spec(run, run))
    await budget.open(Decimal("0.0025"))
    monkeypatch.setenv("PREFECT_API_URL", limits.api_url)
    lines = await asyncio.to_thread(server_budget_lines, run)
    assert lines == [
        f"run budget held by the Prefect server (relaybatch-budget:run:{run}): 0.002500 of 0.010000 USD "
        "counted there by every process, 0.007500 left"
    ]
    assert await asyncio.to_thread(server_budget_lines, f"never-{run}") == []
    job = ServerBudget(limits, ServerBudgetSpec("job", f"{run}:docs", Decimal("0.002"), run, "docs"))
    await job.open(Decimal("0.0005"))
    lines = await asyncio.to_thread(server_budget_lines, run, ["docs", "other"])
    assert lines[1:] == [
        f"job docs's budget held by the Prefect server (relaybatch-budget:job:{run}:docs): 0.000500 of "
        "0.002000 USD counted there by every process, 0.001500 left"
    ]


class _LateServer(httpx.AsyncBaseTransport):
    """The real server behind a network that is late, as a loaded one is: the ``n``-th request to a
    path (counted from 1) is either applied by the server only ``late`` seconds after it was sent,
    whatever the client does meanwhile (it gives up, or is cancelled: the server still applies it),
    or applied at once with its answer ``late`` (``answer_late``), or applied with its answer lost
    (``lost``: a read timeout). ``applied[path]`` is set once such a request is applied."""

    def __init__(self, plan: dict[tuple[str, int], str], late: float = 0.6) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.plan = dict(plan)
        self.late = late
        self.seen: Counter[str] = Counter()
        self.applied: dict[str, asyncio.Event] = {path: asyncio.Event() for path, _ in plan}
        self.background: set[asyncio.Task[httpx.Response]] = set()

    async def _forward(self, request: httpx.Request, delay: float = 0.0) -> httpx.Response:
        await asyncio.sleep(delay)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rsplit("/", 1)[-1]
        self.seen[path] += 1
        how = self.plan.pop((path, self.seen[path]), None)
        if how is None:
            return await self._forward(request)
        await request.aread()
        if how == "late":
            applied = asyncio.create_task(self._forward(request, self.late))  # the server's own pace
            self.background.add(applied)
            applied.add_done_callback(lambda _: self.applied[path].set())
            return await asyncio.shield(applied)
        response = await self._forward(request)
        self.applied[path].set()
        if how == "lost":
            raise httpx.ReadTimeout("the answer was lost", request=request)
        await asyncio.sleep(self.late)  # "answer_late"
        return response

    async def aclose(self) -> None:
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.inner.aclose()


def _late_limits(transport: _LateServer) -> ServerLimits:
    from prefect.settings import PREFECT_API_URL

    return ServerLimits(str(PREFECT_API_URL.value()), transport=transport, out=io.StringIO())


async def test_a_render_slot_given_back_as_the_execution_closes_is_given_back_once(
    limits: ServerLimits,
) -> None:
    """The background give-back of a render's slot is still on its way to the server when the
    execution closes: the other store's renders keep their slots (closing used to cancel it and
    give the slot back a second time, so another store could create one render past the cap)."""
    model = f"relay-video-{random.randrange(10**9)}"
    other = ServerRenderSlots(limits, "r:part-2-of-2", {model: 3})
    await other.open()
    assert [await other.take("v", model), await other.take("v", model)] == [True, True]
    transport = _LateServer({("decrement", 1): "late"})
    late = _late_limits(transport)
    one = ServerRenderSlots(late, "r:part-1-of-2", {model: 3})
    try:
        await one.open()
        assert await one.take("v", model)
        one.release("v", model)  # the render ended: its slot goes back in the background...
        await asyncio.sleep(0.2)  # ...and the request is on its way
        await one.close()
        await transport.applied["decrement"].wait()
    finally:
        await transport.aclose()
        await late.aclose()
    state = await limits.read(one.name(model))
    assert state is not None and state.active_slots == 2  # other's two renders, nothing less
    assert await limits.read(one.holder_name(model)) is None
    other.release("v", model)
    other.release("v", model)
    await other.close()


async def test_a_take_answered_while_the_holder_is_read_again_is_counted_once(limits: ServerLimits) -> None:
    """A take's answer is lost (the slot counted anyway), so the holder is read again; the take
    sent again is counted by the server before its answer arrives. The read waits for that answer,
    so the slot is not counted twice, and a sync never gives back a slot a render still uses."""
    model = f"relay-video-{random.randrange(10**9)}"
    transport = _LateServer({("increment", 1): "lost", ("increment", 2): "answer_late"}, late=1.0)
    late = _late_limits(transport)
    one = ServerRenderSlots(late, "r:part-1-of-1", {model: 3})
    try:
        await one.open()
        take = asyncio.create_task(one.take("v", model))
        await transport.applied["increment"].wait()  # the first, lost
        transport.applied["increment"].clear()
        await transport.applied["increment"].wait()  # the second, counted, its answer on its way
        await one.sync()  # the holder read again meanwhile
        assert await take
        await one.sync()
        state = await limits.read(one.name(model))
        # Two slots counted for one render: the lost take's comes back; the render keeps its own.
        assert state is not None and state.active_slots == one.in_flight(model) == 1
        one.release("v", model)
        await one.close()
    finally:
        await transport.aclose()
        await late.aclose()
    state = await limits.read(one.name(model))
    assert state is not None and state.active_slots == 0


async def test_room_given_back_late_is_given_back_once_and_the_server_never_counts_less(
    limits: ServerLimits,
) -> None:
    """A give-back whose request reaches the server late (a loaded network) while the process
    stops waiting for it: the holder is not read again before it may have landed, so the room is
    given back once, and the server never counts less than the store's ledger."""
    run = f"late-{random.randrange(10**9)}"
    other = ServerBudget(limits, _spec(run, f"{run}:part-2-of-2"))
    await other.open(Decimal("0.004"))  # another store's spend: 4,000 slots
    transport = _LateServer({("decrement", 1): "late"})
    late = _late_limits(transport)
    one = ServerBudget(late, _spec(run, f"{run}:part-1-of-2"))
    try:
        await one.open(Decimal(0))
        assert await one.make_room(Decimal("0.002"), Decimal("0.005"))  # 5,000 slots taken
        one.set_aside -= Decimal("0.002")
        one.used += Decimal("0.001")  # a call settled at half its worst case
        give_back = asyncio.create_task(one.give_back())
        await asyncio.sleep(0.2)  # on its way to the server...
        give_back.cancel()  # ...when the process stops waiting (an execution's end)
        with contextlib.suppress(asyncio.CancelledError):
            await give_back
        await one.reconcile()
        await transport.applied["decrement"].wait()
    finally:
        await transport.aclose()
        await late.aclose()
    total = await limits.read(one.spec.name)
    assert total is not None and total.active_slots == 4000 + 1000  # both ledgers, nothing less
