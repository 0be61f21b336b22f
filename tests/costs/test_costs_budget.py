"""The budget is never crossed, however many calls are in flight."""

from __future__ import annotations

import asyncio
import random
import threading
from decimal import Decimal

from relaybatch.cost_model import Budget

D = Decimal


def test_admits_while_worst_cases_fit_and_counts_reservations_in_flight() -> None:
    budget = Budget(run_limit=D("1.00"))
    assert budget.reserve("a", "job", D("0.60")) is None
    refusal = budget.reserve("b", "job", D("0.50"))
    assert refusal is not None
    assert refusal.scope == "run"
    assert refusal.in_flight == D("0.60")
    assert refusal.only_in_flight
    assert "held for calls in flight" in refusal.message("job/2")
    budget.settle("a", "job", D("0.60"))
    spent_out = budget.reserve("c", "job", D("0.50"))
    assert spent_out is not None and not spent_out.only_in_flight
    assert "run budget of 1.00 USD reached: 0.60 USD spent" in spent_out.message("job/3")


def test_a_shards_refusal_names_its_share_of_the_runs_budget() -> None:
    budget = Budget(run_limit=D("0.15"), split=2)
    budget.settle("a", "job", D("0.15"))
    refusal = budget.reserve("b", "job", D("0.01"))
    assert refusal is not None
    assert "run budget (this shard's 1/2 share of 0.3 USD: 0.15 USD) reached" in refusal.message("job/2")


def test_a_share_that_does_not_divide_evenly_names_the_runs_budget_as_given() -> None:
    # 0.0004 / 3 is rounded to the context's 28 digits: times 3 it is 0.0003999...9, not the budget.
    budget = Budget(run_limit=D("0.0004") / 3, split=3)
    budget.settle("a", "job", D("0.0001"))
    refusal = budget.reserve("b", "job", D("0.0001"))
    assert refusal is not None
    assert "(this shard's 1/3 share of 0.0004 USD: 0.0001333" in refusal.message("job/2")


def test_settle_replaces_the_reservation_with_the_actual_charge() -> None:
    budget = Budget(run_limit=D("1.00"))
    budget.reserve("a", "job", D("0.60"))
    budget.settle("a", "job", D("0.10"))
    assert budget.spent == D("0.10")
    assert budget.in_flight == 0
    assert budget.reserve("b", "job", D("0.90")) is None
    assert budget.reserve("c", "job", D("0.000000001")) is not None


def test_release_frees_the_reservation_without_spending() -> None:
    budget = Budget(run_limit=D("1"))
    budget.reserve("a", "job", D("1"))
    budget.release("a")
    assert budget.spent == 0
    assert budget.reserve("b", "job", D("1")) is None


def test_job_budget_limits_only_its_job() -> None:
    budget = Budget(job_limits={"small": D("0.10")})
    assert budget.reserve("a", "small", D("0.08")) is None
    refusal = budget.reserve("b", "small", D("0.05"))
    assert refusal is not None and refusal.scope == "job small"
    assert budget.reserve("c", "other", D("100")) is None


def test_spend_from_an_earlier_session_counts_on_resume() -> None:
    budget = Budget(
        run_limit=D("1"), job_limits={"j": D("0.5")}, spent=D("0.9"), spent_by_job={"j": D("0.45")}
    )
    assert budget.reserve("a", "k", D("0.2")) is not None
    refusal = budget.reserve("b", "j", D("0.06"))  # run: 0.96 fits; job: 0.51 does not
    assert refusal is not None and refusal.scope == "job j"


def test_an_unbounded_call_is_refused_only_under_a_limit() -> None:
    assert Budget().reserve("a", "job", None) is None
    refusal = Budget(run_limit=D(5)).reserve("a", "job", None)
    assert refusal is not None and "cannot be bounded" in refusal.message("x")


async def test_many_concurrent_calls_never_overshoot_a_tight_budget() -> None:
    limit = D("0.50")
    budget = Budget(run_limit=limit, job_limits={"b": D("0.20")})
    rng = random.Random(7)
    worst = [D(rng.randint(1, 90)) / 1000 for _ in range(400)]
    observed_peak = D(0)
    refused: list[int] = []

    async def call(index: int) -> None:
        nonlocal observed_peak
        job = "b" if index % 3 == 0 else "a"
        refusal = await budget.reserve_when_possible(f"k{index}", job, worst[index])
        if refusal is not None:
            refused.append(index)
            return
        # Committed spend plus everything reserved never passes the limit, at any moment.
        assert budget.spent + budget.in_flight <= limit
        await asyncio.sleep(rng.random() / 1000)
        actual = worst[index] * D(rng.randint(0, 100)) / 100
        if index % 11 == 0:
            budget.release(f"k{index}")  # failed before it was charged
        else:
            budget.settle(f"k{index}", job, actual)
        observed_peak = max(observed_peak, budget.spent)

    await asyncio.gather(*(call(index) for index in range(400)))
    assert budget.spent <= limit
    assert budget.spent_by_job().get("b", D(0)) <= D("0.20")
    assert budget.in_flight == 0
    assert refused, "a tight budget must turn calls away"
    # Every refused call really did not fit: its worst case exceeds what was left at the end.
    assert all(worst[index] > limit - budget.spent or index % 3 == 0 for index in refused)


def test_threads_reserving_at_once_never_overshoot() -> None:
    limit = D("1.000")
    budget = Budget(run_limit=limit)
    admitted: list[Decimal] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        for index in range(200):
            if budget.reserve(f"{offset}-{index}", "job", D("0.007")) is None:
                with lock:
                    admitted.append(D("0.007"))

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) <= limit
    assert len(admitted) == 142  # floor(1.000 / 0.007)
