"""A run's budget is shown once, however many shard stores hold a share of it, and each job's
budget beside that job's spend: the dashboard, `relaybatch report` and the Prefect summary's line
read them by one rule (relaybatch.costs.run_budgets)."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.cost_model import Budgets
from relaybatch.costs import budget_settings, budget_uses, run_budgets
from relaybatch.costs.dashboard import render_dashboard
from relaybatch.costs.dashboard_data import load_dashboard
from relaybatch.costs.report import display_usd, load_spend, run_spend_figures
from relaybatch.costs.terminal import budget_summary, run_budget_uses
from relaybatch.engine import CheckpointStore, Snapshot
from relaybatch.manifests import open_manifest
from relaybatch.run import RunPaths, Shard, stored_settings
from relaybatch.run.handoff import leave_handoff

D = Decimal
RUN_BUDGET, JOB_BUDGET = D("1.00"), D("0.30")


@pytest.fixture(autouse=True)
def without_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "")  # the run in this process, no Prefect server


def write_manifest(folder: Path) -> Path:
    jobs = [
        {
            "name": name,
            "kind": "chat",
            "model": "relay-chat-small",
            "request": {"max_tokens": 16},
            "prompt": f"{name} {{n}}: name a river.",
            "items": [{"id": f"{name}{n}", "n": n} for n in range(6)],
            **({"budget_usd": str(JOB_BUDGET)} if name == "capped" else {}),
        }
        for name in ("capped", "free")
    ]
    path = folder / "budgets.yaml"
    manifest = {"run": {"name": "split", "budget_usd": str(RUN_BUDGET), "concurrency": 2}, "jobs": jobs}
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), terminal_width=400)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_a_shard_enforces_its_share_and_records_the_whole_runs_budgets(tmp_path: Path) -> None:
    manifest = open_manifest(write_manifest(tmp_path))

    saved = stored_settings(manifest, Shard(2, 3))

    assert D(saved["budget_usd"]) * 3 <= RUN_BUDGET  # three shards never spend more than the run
    assert D(saved["job_budgets"]["capped"]) == JOB_BUDGET / 3
    assert saved["run_budgets"] == {"budget_usd": "1.00", "job_budgets": {"capped": "0.30"}}
    assert stored_settings(manifest, None)["budget_usd"] == "1.00"


def test_a_partition_the_server_holds_enforces_no_share_and_opens_no_other_store(tmp_path: Path) -> None:
    from relaybatch.costs.run_budgets import enforced_budgets, spent_beside
    from relaybatch.fleet.setup import whole_job_budgets, whole_run_budget

    manifest = open_manifest(write_manifest(tmp_path))
    saved = stored_settings(manifest, None, parts=3, held_by_server=True)

    assert saved["budget_usd"] is None and saved["job_budgets"] == {}  # the server holds them whole
    assert whole_run_budget(saved) == RUN_BUDGET and whole_job_budgets(saved) == {"capped": JOB_BUDGET}
    assert whole_job_budgets(stored_settings(manifest, Shard(1, 3))) == {}  # a shard keeps its share
    sibling = tmp_path / "split" / "shards" / "part-2-of-3"
    sibling.mkdir(parents=True)
    (sibling / "costs.sqlite").write_bytes(b"not a database: opening it would fail")
    limits = enforced_budgets(saved)
    assert spent_beside(tmp_path / "split" / "shards" / "part-1-of-3", limits) == (D(0), {})


def save(checkpoint: Path, settings: dict[str, object], executed: bool) -> None:
    with CheckpointStore(checkpoint) as store:
        store.save_run("split", settings)
        if executed:
            store.record_start()
    leave_handoff(RunPaths(checkpoint.parent))  # its owner lets go: a shard's is read from its files


def test_the_runs_budget_is_read_from_the_store_that_executed_last(tmp_path: Path) -> None:
    run_dir = tmp_path / "split"
    whole = Budgets(run_usd=D("10"), job_usd={"capped": D("3")})
    raised = Budgets(run_usd=D("12"), job_usd={"capped": D("3")})
    save(run_dir / "checkpoint.sqlite", budget_settings(whole), executed=True)
    assert run_budgets(run_dir) == whole
    time.sleep(0.01)  # the stores' clocks are in milliseconds
    for index in (1, 2, 3):
        save(run_dir / "shards" / f"{index}-of-3" / "checkpoint.sqlite", budget_settings(raised, 3), True)

    assert run_budgets(run_dir) == raised  # the shards ran last, with the budget raised: 12, not 3 x 4

    # A never-executed store is the oldest, whatever it says.
    save(run_dir / "shards" / "1-of-2" / "checkpoint.sqlite", budget_settings(whole, 2), executed=False)
    assert run_budgets(run_dir) == raised


def test_a_store_from_before_the_whole_budgets_were_recorded_gives_its_share_times_its_split(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "split"
    share = budget_settings(Budgets(run_usd=D("10"), job_usd={"capped": D("1")}), 3)
    del share["run_budgets"]
    save(run_dir / "shards" / "1-of-3" / "checkpoint.sqlite", share, executed=True)

    assert D(share["budget_usd"]) * 3 != D("10")  # 10 / 3 * 3 is not 10 in 28 digits
    assert run_budgets(run_dir) == Budgets(run_usd=D("10"), job_usd={"capped": D("1")})


def test_a_sharded_run_shows_its_budget_once_and_each_job_beside_its_spend(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    manifest = str(write_manifest(tmp_path))
    for shard in ("1/2", "2/2"):
        shown = run("run", manifest, "--shard", shard, "--runs-dir", str(runs))
        assert "budget $0.5000 (this shard's 1/2 of the run's, " in shown  # the progress line
    shown = run("run", manifest, "--runs-dir", str(runs))  # the run's own store too: it folds the shards
    assert "budget $1.0000 (0." in shown
    run_dir = runs / "split"
    assert (run_dir / "checkpoint.sqlite").exists() and (
        run_dir / "shards" / "2-of-2" / "costs.sqlite"
    ).exists()

    data = load_dashboard(runs, ["split"])
    spend = load_spend(runs, ["split"])

    assert data.budget_usd == RUN_BUDGET  # once: not the run's plus its shards' shares
    uses = {(use.run, use.job): use for use in data.budget_uses()}
    assert set(uses) == {("split", None), ("split", "capped")}
    by_job = spend.spent_by_run_and_job()
    assert uses["split", "capped"].budget_usd == JOB_BUDGET
    assert uses["split", "capped"].spent_usd == by_job["split", "capped"] > 0  # every shard's spend
    assert uses["split", None].spent_usd == spend.total_usd == data.total_usd
    assert run_budget_uses(run_spend_figures(run_dir), [run_dir]) == data.budget_uses()  # Prefect's line

    page = render_dashboard(data, "split")
    assert 'data-budget="split:job capped"' in page and 'data-budget="split:run"' in page
    assert "$1.000000" in page and "$0.300000" in page
    assert "$2.000000" not in page and "$1.500000" not in page  # no sum of run and shard budgets

    from relaybatch.flows.run_manifest import budget_notes  # the Prefect summary's note

    whole_run = budget_summary(data.budget_uses())
    assert budget_notes(RunPaths(run_dir)) == [f"budgets: {whole_run}"]
    shard = Shard(1, 2).paths(RunPaths(run_dir))
    assert budget_notes(shard) == [f"budgets (the whole run, every shard): {whole_run}"]

    boards = ["--runs-dir", str(runs), "--dashboards-dir", str(tmp_path / "boards")]
    report = CliRunner().invoke(app, ["report", "split", *boards], terminal_width=400).output
    capped, whole = uses["split", "capped"], uses["split", None]
    (capped_line,) = [line for line in report.splitlines() if "job capped" in line]
    for figure in (display_usd(capped.spent_usd), "$0.300000", f"{capped.percent_used:.1f}%"):
        assert figure in capped_line, (figure, capped_line)
    (run_line,) = [line for line in report.splitlines() if " run " in f" {line} " and "$1.000000" in line]
    assert display_usd(whole.spent_usd) in run_line and "$2.000000" not in report
    since = run("report", "split", "--since", "2000-01-01", *boards)
    assert "budgets count the whole run" in since and "job capped" not in since


def test_budget_uses_lists_the_run_then_its_jobs_and_nothing_without_budgets() -> None:
    spent = {("a", "x"): D("0.5"), ("a", "y"): D("0.25"), ("b", "x"): D("1")}
    budgets = {"a": Budgets(run_usd=D("1"), job_usd={"y": D("0.5")}), "b": Budgets()}

    uses = budget_uses(spent, budgets)

    assert [(use.run, use.scope, use.spent_usd, use.budget_usd) for use in uses] == [
        ("a", "run", D("0.75"), D("1")),
        ("a", "job y", D("0.25"), D("0.5")),
    ]
    assert uses[0].percent_used == 75 and uses[1].left_usd == D("0.25")


def billed_usd() -> Decimal:
    from relaybatch.connect import embedded_emulator

    return sum((charge.usd for charge in embedded_emulator().state.emulator.ledger), Decimal(0))


@pytest.mark.parametrize(
    "order",
    [("whole", "1/2", "2/2"), ("1/2", "2/2", "whole"), ("1/3", "whole", "1/2", "2/2", "2/3", "3/3")],
    ids=["run-then-shards", "shards-then-run", "mixed-splits"],
)
def test_the_run_budget_holds_across_the_runs_own_store_and_its_shards(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    """Each store's guard counts what the run's other stores spent (all of it for the run's own
    store, 1/N of what lies outside its split for a shard), so no order of executions passes the
    budget: before, the shards of a run already at its budget spent it again (193 %)."""
    runs, before = tmp_path / "runs", billed_usd()
    run_in_order(held_manifest(tmp_path), runs, order)

    assert_the_budget_held_and_was_used(runs, before)


HELD_BUDGET = D("0.0006")  # about 50 of the 200 calls


def held_manifest(folder: Path) -> Path:
    path = folder / "m.yaml"
    items = [{"id": f"a{n}", "n": n} for n in range(200)]
    job = {"name": "j", "kind": "chat", "model": "relay-chat-small", "request": {"max_tokens": 16}}
    manifest = {"run": {"name": "held", "budget_usd": str(HELD_BUDGET), "concurrency": 2}}
    path.write_text(yaml.safe_dump({**manifest, "jobs": [{**job, "prompt": "q {n}", "items": items}]}))
    return path


def run_in_order(path: Path, runs: Path, order: tuple[str, ...], after: Any = None) -> None:
    """Execute the run's stores in ``order`` (``whole``: the run's own), calling ``after(step)``
    once each has ended."""
    for step in order:
        shard = [] if step == "whole" else ["--shard", step]
        result = CliRunner().invoke(app, ["run", str(path), *shard, "--runs-dir", str(runs)])
        assert result.exit_code in (0, 1), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        said = " ".join(result.output.split())
        if shard and "run budget" in said:  # a shard's stop names its share, not a smaller budget
            assert f"this shard's 1/{step[-1]} share of {HELD_BUDGET} USD" in said, said
        if after is not None:
            after(step)


def assert_the_budget_held_and_was_used(runs: Path, before: Decimal) -> None:
    assert billed_usd() - before <= HELD_BUDGET  # what the gateway billed the run, every store together
    spend = load_spend(runs, ["held"])
    assert spend.total_usd == billed_usd() - before
    assert spend.total_usd > HELD_BUDGET * D("0.9")  # and the budget was used, not left idle
    (use,) = load_dashboard(runs, ["held"]).budget_uses()
    assert use.percent_used <= 100


def test_a_shards_budget_counts_the_other_stores_spend_from_their_files_not_their_sqlite(
    tmp_path: Path,
) -> None:
    """The storage contract (docs/prefect.md): a shard's budget counts what the run's other stores
    spent from the files their owners write (ledger.parquet, progress.json), never their
    costs.sqlite, which may be another host's. Each shard's cost store is made a non-database
    once its execution has ended: shard 1/2 still counts 1/3's spend (outside its split), 2/2
    counts 1/3's and 1/2's, and together they stay within the budget and use it. Before, 1/2
    opened 1/3's costs.sqlite read-only and failed on it."""
    runs, before = tmp_path / "runs", billed_usd()
    shards = runs / "held" / "shards"

    def unreadable(step: str) -> None:
        folder = shards / step.replace("/", "-of-")
        for name in ("costs.sqlite-wal", "costs.sqlite-shm"):
            (folder / name).unlink(missing_ok=True)
        (folder / "costs.sqlite").write_bytes(b"not a database: opening it would fail")

    run_in_order(held_manifest(tmp_path), runs, ("1/3", "1/2", "2/2"), after=unreadable)

    assert_the_budget_held_and_was_used(runs, before)  # (1/2 and 2/2 not counting 1/3: 7/6 of it)


def test_a_sibling_executing_now_counts_at_the_most_its_execution_may_reach(tmp_path: Path) -> None:
    """A sibling's progress file is seconds old while it executes (and a killed one's leaves out its
    last seconds): the budget counts it at the ceiling its execution wrote there (its share less
    what it counted of the others), not at its figures. Shard 1/2 started before the run's own
    store spent 4 of 10 USD, so it may spend its whole share of 5; shard 2/2 may then spend 1, not 3."""
    from relaybatch.costs.run_budgets import spent_beside
    from relaybatch.engine.progress import KindTotals
    from relaybatch.engine.spend import SpendFigures
    from relaybatch.run.progress_file import ProgressFile

    class Nowhere:
        def update(self, snapshot: Snapshot) -> None: ...
        def finish(self, snapshot: Snapshot) -> None: ...

    def progress(paths: RunPaths, money: SpendFigures) -> None:
        paths.root.mkdir(parents=True, exist_ok=True)
        kinds = {"chat": KindTotals(10, 10, {})}
        snapshot = Snapshot({}, 1, 0, 1.0, None, None, kinds=kinds, money=money)
        ProgressFile(Nowhere(), paths).update(snapshot)

    run = RunPaths(tmp_path / "big")
    progress(run, SpendFigures(D(4), D(0), D(0), None))  # the run's own store: 4 USD, ended
    sibling = Shard(1, 2).paths(run)
    ceilings = (("j", D(2)),)
    progress(sibling, SpendFigures(D(1), D(0), D("0.5"), D(5), job_ceilings=ceilings))  # 1.5 so far
    mine = Shard(2, 2).paths(run)
    share = Budgets(run_usd=D(5), job_usd={"j": D(2)})

    counted, by_job = spent_beside(mine.root, share)

    # 4 outside takes 2 of each share: 3 left each. 1/2 may reach 5, 2 past its 3: 2 + 2 counted.
    assert counted == D(4) and share.run_usd - counted == D(1)
    assert by_job == {"j": D(0)}  # its job's ceiling (2) is within 2/2's allowance for the job (2)
    assert not (mine.root / "costs.sqlite").exists() and not (sibling.root / "costs.sqlite").exists()


def test_no_order_of_executions_of_a_run_and_its_shards_passes_the_budget() -> None:
    """counted_beside as each guard uses it: an execution of a store spends some or all of the room
    its budget leaves; whatever the order, the run's stores together stay within the budget, and a
    split run shard after shard from nothing uses the whole budget."""
    import random

    from relaybatch.costs.run_budgets import counted_beside

    budget = D("10")
    stores = [(0, 1), *((split, index) for split in (2, 3) for index in range(1, split + 1))]
    rng = random.Random(11)
    for _ in range(300):
        own = dict.fromkeys(stores, D(0))
        for _ in range(12):
            store = rng.choice(stores)
            split = store[0]
            limit = budget / split if split else budget
            others = {other: usd for other, usd in own.items() if other != store}
            siblings = [usd for other, usd in others.items() if split and other[0] == split]
            outside = [usd for other, usd in others.items() if not (split and other[0] == split)]
            room = limit - own[store] - counted_beside(split, limit, outside, siblings)
            own[store] += max(D(0), room) * rng.choice((D(1), D("0.5"), D("0.1")))
            assert sum(own.values()) <= budget * (1 + D("1e-20")), own

    fresh = dict.fromkeys(range(1, 4), D(0))
    for index in fresh:  # shards 1/3, 2/3, 3/3 one after the other, each spending all it may
        siblings = [usd for other, usd in fresh.items() if other != index]
        fresh[index] = budget / 3 - counted_beside(3, budget / 3, [], siblings)
    assert sum(fresh.values()) == pytest.approx(budget)


def test_with_no_budget_counting_them_a_store_opens_no_other_cost_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage contract: a partition opens no other store's costs.sqlite, perhaps another
    host's: with no budget counting them (or the server holding it) it reads nothing of theirs, and
    a job's share planned before the server held job budgets counts their ledger.parquet."""
    from relaybatch.costs.ledger import CostStore, write_ledger
    from relaybatch.costs.run_budgets import spent_beside

    run = RunPaths(tmp_path / "big")
    mine, theirs = run.partition(1, 2), run.partition(2, 2)
    for folder in (mine, theirs):
        folder.root.mkdir(parents=True)
        CostStore(folder.cost_store).close()
    opened: list[Path] = []
    original = CostStore.open_read_only.__func__  # type: ignore[attr-defined]

    def spy(cls: type[CostStore], path: Path) -> CostStore | None:
        opened.append(path)
        return original(cls, path)  # type: ignore[no-any-return]

    monkeypatch.setattr(CostStore, "open_read_only", classmethod(spy))

    assert spent_beside(mine.root, Budgets()) == (D(0), {})
    assert opened == []
    assert spent_beside(mine.root, Budgets(job_usd={"docs": D("1")})) == (D(0), {})  # no ledger yet
    store = CostStore(theirs.cost_store)
    write_ledger(store, theirs.ledger)
    store.close()
    (theirs.cost_store).write_bytes(b"not a database: opening it would fail")
    assert spent_beside(mine.root, Budgets(job_usd={"docs": D("1")})) == (D(0), {})
    assert opened == []


def test_an_execution_writes_its_ceiling_before_its_first_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's other stores count an execution going on at the ceiling in its progress file: it is
    there, live, before the execution reserves (and so sends) its first call."""
    from relaybatch.costs.guard import RunSpendGuard
    from relaybatch.folder_progress import read_progress

    seen: list[object] = []
    reserve = RunSpendGuard.reserve

    def first_reserve(guard: RunSpendGuard, call: Any) -> bool:
        if not seen:
            seen.append(read_progress(RunPaths(guard.store.path.parent)))
        return reserve(guard, call)

    monkeypatch.setattr(RunSpendGuard, "reserve", first_reserve)
    run_in_order(held_manifest(tmp_path), tmp_path / "runs", ("1/2",))

    (progress,) = seen
    assert progress is not None and progress.live and progress.ceiling_usd == HELD_BUDGET / 2


def test_a_store_killed_before_it_let_go_counts_what_it_spent_once_its_files_are_written_again(
    tmp_path: Path,
) -> None:
    """A killed execution leaves its ceiling in the progress file (its figures miss its last
    seconds). Before an execution whose budget counts it, its files are written again exactly
    under its lock for a moment (run/handoff.py ``fresh_spend_files``): it then counts what it
    spent, not its whole share. While a process holds its lock it is left: the ceiling stands."""
    from relaybatch.costs.run_budgets import ledger_spent, spent_beside
    from relaybatch.engine.progress import KindTotals
    from relaybatch.engine.spend import SpendFigures
    from relaybatch.run.handoff import fresh_spend_files
    from relaybatch.run.locking import holding
    from relaybatch.run.progress_file import ProgressFile

    runs = tmp_path / "runs"
    path = held_manifest(tmp_path)
    manifest = yaml.safe_load(path.read_text())
    manifest["jobs"][0]["items"] = manifest["jobs"][0]["items"][:12]  # far from a share's worth
    path.write_text(yaml.safe_dump(manifest))
    run_in_order(path, runs, ("1/2",))
    run = RunPaths(runs / "held")
    shard = Shard(1, 2).paths(run)
    spent, _ = ledger_spent(shard.ledger)
    assert D(0) < spent < HELD_BUDGET / 2

    class Nowhere:
        def update(self, snapshot: Snapshot) -> None: ...
        def finish(self, snapshot: Snapshot) -> None: ...

    # Killed mid-execution: its last progress write, live, with its ceiling (its whole share).
    money = SpendFigures(spent / 2, D(0), D(0), HELD_BUDGET / 2)
    snapshot = Snapshot({}, 1, 0, 1.0, None, None, kinds={"chat": KindTotals(6, 6, {})}, money=money)
    ProgressFile(Nowhere(), shard).update(snapshot)
    whole = Budgets(run_usd=HELD_BUDGET)
    assert spent_beside(run.root, whole)[0] == HELD_BUDGET / 2

    with holding(shard.root, "executing shard 1/2", "wait"):  # executing now (its lock held)
        fresh_spend_files(run)
    assert spent_beside(run.root, whole)[0] == HELD_BUDGET / 2

    fresh_spend_files(run)

    assert spent_beside(run.root, whole)[0] == spent  # what it spent, exactly
    assert spent_beside(run.root, Budgets(run_usd=HELD_BUDGET, job_usd={"j": HELD_BUDGET}))[1] == {"j": spent}
