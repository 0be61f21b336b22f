"""Assembling a run: plan a manifest into its store, then build what an execution needs.

``plan_run`` opens the manifest once, validates it in one streaming pass and adds its items
(a shard's share only) to the run's checkpoint store in another: no list of items is ever built.
``open_run`` gives an execution its resources (settings, gateway client, limiter, spend guard,
store) and closes them afterwards; a caller may hand in its own client (benchmarks, tests). The
CLI, the Prefect tasks and the benchmarks all go through here; nothing in this module knows
about Prefect.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    EngineSettings,
    OutputCheck,
    ProgressReporter,
    RunSummary,
    execute,
)
from relaybatch.engine.poll_plan import RenderJob, RenderSettings
from relaybatch.engine.render_slots import RenderSlots
from relaybatch.engine.states import SUPERSEDED
from relaybatch.engine.store import PlanCounts
from relaybatch.errors import UserError
from relaybatch.files import scratch_folder
from relaybatch.limiting import Limiter
from relaybatch.manifests import Manifest, Validation, open_manifest
from relaybatch.manifests.images import noting_image_reads
from relaybatch.run import fingerprint, identity
from relaybatch.run.locking import executing
from relaybatch.run.reuse import Reused, reuse_answers
from relaybatch.run.sharding import Shard
from relaybatch.run_folder import RunPaths
from relaybatch.settings import run_paths

if TYPE_CHECKING:
    from relaybatch.cost_model import Budgets
    from relaybatch.gateway import GatewayClient
    from relaybatch.settings import Settings
    from relaybatch.shared_limit import SharedLimit


@dataclass(frozen=True)
class RunOverrides:
    """Settings given on the command line; each one, when set, wins over the manifest's."""

    run_name: str | None = None
    budget_usd: Decimal | None = None
    concurrency: int | None = None
    rate_limit_rpm: int | None = None


@dataclass(frozen=True)
class PlannedRun:
    """A manifest planned into its run's store: where the run lives and what changed."""

    paths: RunPaths
    label: str
    added: int
    superseded: int = 0
    restored: int = 0
    run_name: str = ""
    # How much was planned: "whole", "appended" (only rows appended since the last plan) or
    # "unchanged" (nothing: no input changed). relaybatch/run/fingerprint.py decides.
    planned: str = "whole"
    # Pending items that took another run's done answer (``run.reuse``, run/reuse.py).
    reused: Reused | None = None


@dataclass(frozen=True)
class Entry:
    """What started an execution (``kind``: cli, flow, deployment, schedule, api) and its name
    there (a flow run's name), as the run's ``executions`` table records them."""

    kind: str = "api"
    label: str | None = None


@dataclass(frozen=True)
class ExecuteResult:
    counts: dict[str, int]
    stopped: str | None
    spent_usd: Decimal | None
    sent: int = 0
    # The signal (SIGINT, SIGTERM) that stopped the execution; None when none did.
    interrupted: str | None = None
    execution: int | None = None  # the execution's id in the run's store (None: none began)


def stored_settings(
    manifest: Manifest,
    shard: Shard | None,
    overrides: RunOverrides | None = None,
    parts: int = 1,
    held_by_server: bool = False,
) -> dict[str, Any]:
    """What a resumed run needs from the manifest, kept in the store (JSON, money as strings).

    A shard gets its share of each budget and records the whole run's beside it
    (relaybatch.costs.run_budgets: shards run in separate processes, each with its own spend guard).
    ``held_by_server``: a partition planned with a Prefect server configured; the server holds the
    run's whole budget, each job's and the render caps for every partition (relaybatch/fleet/), so
    the store enforces no share of them itself.
    """
    from relaybatch.cost_model import Budgets
    from relaybatch.cost_model.periods import PeriodBudgets
    from relaybatch.costs import budget_settings

    overrides = overrides or RunOverrides()
    jobs = {job.name: job.budget_usd for job in manifest.jobs if job.budget_usd is not None}
    periods = manifest.settings.period_budgets()
    budgets = Budgets(
        run_usd=overrides.budget_usd or manifest.settings.budget_usd,
        job_usd=jobs,
        periods=PeriodBudgets(periods, manifest.settings.budget_timezone) if periods else None,
    )
    shares = budget_settings(budgets, shard.count if shard else parts)
    if held_by_server:  # the run's and each job's whole budget are the server's (fleet/setup.py)
        shares = {**shares, "budget_usd": None, "job_budgets": {}, "held_by_server": True}
    return {
        **shares,
        "providers": {job.name: job.provider for job in manifest.jobs if job.provider},
        # Judgment jobs' noul thresholds: the results' answer_<q>_true columns (0.5 unless set).
        "noul_thresholds": {
            job.name: job.noul_threshold for job in manifest.jobs if job.noul_threshold is not None
        },
        # Structured jobs: the schema every answer is checked against, and how often it is re-asked.
        "outputs": {
            job.name: {"schema": job.output_schema, "max_reasks": job.max_reasks}
            for job in manifest.jobs
            if job.output_schema is not None
        },
        "concurrency": overrides.concurrency or manifest.settings.concurrency,
        "rate_limit_rpm": overrides.rate_limit_rpm or manifest.settings.rate_limit_rpm,
        "uncertain_policy": manifest.settings.uncertain,
        "renders": {job.name: job.video for job in manifest.jobs if job.video},
        "max_in_flight": dict(manifest.settings.max_in_flight),
    }


def manifest_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_paths(run: RunPaths) -> list[Path]:
    """Every checkpoint store of a run that exists: the run's own, then each shard's (any split)."""
    return run.checkpoints()


class OtherStores:
    """What a run's other stores settled or superseded, which a shard or a partition must not send:
    read from the handoff files their owners left (run/handoff.py), as scratch stores on this host;
    never another host's SQLite."""

    def __init__(self, folders: list[RunPaths]) -> None:
        from relaybatch.run.handoff import scratch_stores

        self.folders = folders
        self._scratch = contextlib.ExitStack()
        try:
            paths = self._scratch.enter_context(scratch_stores(folders))
            self.stores = [CheckpointStore.open_read_only(path) for path in paths]
        except BaseException:
            self._scratch.close()
            raise

    def fold_into(self, store: CheckpointStore) -> int:
        """Fold every one of them into ``store`` (``CheckpointStore.absorb``: a row is taken where it
        has gone further); rows taken."""
        return sum(
            store.absorb(other.path, origin=folder.checkpoint)
            for folder, other in zip(self.folders, self.stores, strict=True)
        )

    def settled(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for store in self.stores:
            found |= store.settled_keys(keys)
        return found

    def lend_superseded(self, store: CheckpointStore, shard: Shard) -> int:
        """Copy into ``store`` the shard's items that another store holds superseded, so its plan
        brings them back (done with their result) instead of sending them again; rows copied."""
        taken = 0
        for folder, other in zip(self.folders, self.stores, strict=True):
            keys = [key for key in other.keys_in_state(SUPERSEDED) if shard.contains(key)]
            if keys:
                taken += store.absorb(other.path, keys=keys, origin=folder.checkpoint)
        return taken

    def lend_work(self, store: CheckpointStore, keys: Sequence[str]) -> int:
        """Copy into ``store`` the rows of ``keys`` that another store settled or superseded (a
        partition takes them over: its plan then keeps what is done or paid for, brings back what
        was superseded, and sends none of them again); rows copied."""
        taken = 0
        for folder, other in zip(self.folders, self.stores, strict=True):
            found = other.keys_with_work(keys)
            if found:
                taken += store.absorb(other.path, keys=sorted(found), origin=folder.checkpoint)
        return taken

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self._scratch.close()


def stores_beside_shard(run: RunPaths, shard: RunPaths) -> list[RunPaths]:
    """The run's other stores that may hold a shard's items: all but the shards of its own split
    (an item is in one shard of a split, by its key's hash, so their items are never its own)."""
    return [
        folder
        for folder in run.store_folders()
        if folder.root != shard.root
        and folder.checkpoint.exists()
        and not (folder.shard_split is not None and folder.shard_count == shard.shard_count)
    ]


def fold_shards(run: RunPaths) -> int:
    """Fold every shard's and partition's store of the run into the run's own store (rows taken),
    as a shard or a partition takes the others' rows: from the handoff files their owners left
    (``OtherStores``), never their SQLite, which may be another host's. A store changed since its
    handoff has its files written again under its lock for a moment; while another process holds
    that lock, RunBusy names it (run/handoff.py ``fresh_handoff``)."""
    folders = [
        folder for folder in run.store_folders() if folder.root != run.root and folder.checkpoint.exists()
    ]
    if not folders:
        return 0
    others = OtherStores(folders)
    try:
        with CheckpointStore(run.checkpoint) as store:
            return others.fold_into(store)
    finally:
        others.close()


def plan_run(
    manifest_path: Path,
    runs_dir: Path | None = None,
    shard: Shard | None = None,
    overrides: RunOverrides | None = None,
    check: Callable[[Validation], None] | None = None,
    hold: contextlib.ExitStack | None = None,
    say: Callable[[str], None] | None = None,
) -> PlannedRun:
    """Validate the manifest and make the run's store hold its items (a shard: its share).

    ``check`` adds problems only a gateway can show (model families, from its catalog) to the pass.
    Raises ManifestInvalid (every problem, with file, line and field) or UserError (another
    manifest's run) before anything is written. The manifest is opened once and streamed twice
    (validate, then plan); no list of items is built. What the last plan read decides how much
    is done (relaybatch/run/fingerprint.py): nothing when no input changed, only the appended rows
    when data files only grew, else the whole manifest. Settings (and ``overrides``) are saved
    every time. Raises RunBusy when another process is executing (or merging) the same store; with
    ``hold`` given, its lock stays held until the caller closes ``hold`` (`relaybatch run` keeps it
    from planning to export). ``say`` is told, before it starts, of a store that is first upgraded
    to this version's layout (it takes a while for a big run, once).
    """
    overrides = overrides or RunOverrides()
    manifest = open_manifest(manifest_path)
    name = manifest.run_name if overrides.run_name is None else overrides.run_name
    run = run_paths(runs_dir, name)
    paths = shard.paths(run) if shard else run
    resolved = str(manifest_path.resolve())
    decision = fingerprint.compare(paths.checkpoint, manifest)
    images: dict[str, str] = {}  # image files read by validation: resolved path -> sha256
    with scratch_folder("relaybatch-plan-") as seen_in, contextlib.ExitStack() as planning:
        validate = functools.partial(
            _validated, manifest, paths=paths, seen_in=seen_in, check=check, images=images
        )
        inputs_of = functools.partial(_identity, Path(resolved), images=images)
        validation, inputs = validate(decision), inputs_of(decision)
        identity.check_identity(
            run, run.store_folders(), Path(resolved), inputs, decision.manifest_sha256, own=paths
        )
        # Planning writes the store: one writer at a time (run/locking.py). With ``hold`` the lock
        # outlives planning, so nothing can take it between this plan and the execution after it.
        (hold or planning).enter_context(executing(paths))
        job = _Planning(manifest, name, run, paths, shard, resolved, seen_in, validate, inputs_of)
        return _plan_locked(job, overrides, decision, validation, inputs, say)


@dataclass(frozen=True)
class _Planning:
    """One plan's fixed parts: the manifest, where its run and store live, how it is validated
    (``validate``) and identified (``inputs_of``) for a decision of how much to plan."""

    manifest: Manifest
    name: str
    run: RunPaths
    paths: RunPaths
    shard: Shard | None
    resolved: str
    seen_in: Path
    validate: Callable[[fingerprint.Decision], Validation]
    inputs_of: Callable[[fingerprint.Decision], str]


def _plan_locked(
    job: _Planning,
    overrides: RunOverrides,
    decision: fingerprint.Decision,
    validation: Validation,
    inputs: str,
    say: Callable[[str], None] | None,
) -> PlannedRun:
    """The plan under the store's lock: decided again when another process planned meanwhile, made
    whole when shard stores were folded in, then the settings saved, the items planned and other
    runs' answers reused (nothing is sent between the plan and the reuse)."""
    paths, run, manifest = job.paths, job.run, job.manifest
    if fingerprint.planned_since(paths.checkpoint, decision):  # by another process, meanwhile
        decision = fingerprint.compare(paths.checkpoint, manifest)
        validation, inputs = job.validate(decision), job.inputs_of(decision)
    if job.shard is None and fold_shards(run) and decision.status != fingerprint.WHOLE:
        # Shards are views of this run: what they settled is settled here. Rows they planned
        # may come from another version of the manifest, so this plan is a whole one.
        decision = decision.whole("shard stores were folded into the run")
        validation = job.validate(decision)
    settings = stored_settings(manifest, job.shard, overrides)
    if say is not None:
        for note in upgrade_notes(paths):
            say(note)
    plan = functools.partial(_plan_items, manifest=manifest, seen_in=job.seen_in, run=run, shard=job.shard)
    with CheckpointStore(paths.checkpoint) as store:
        store.save_run(job.name, settings)
        store.record_manifest(job.resolved, inputs)
        counts, decision = _planned(store, decision, validation, job.validate, plan)
    reused = reuse_answers(paths, manifest.settings.reuse) if manifest.settings.reuse else None
    label = f"{job.name} shard {job.shard}" if job.shard else job.name
    return PlannedRun(
        paths,
        label,
        counts.added,
        counts.superseded,
        counts.restored,
        job.name,
        planned=decision.status,
        reused=reused,
    )


def _planned(
    store: CheckpointStore,
    decision: fingerprint.Decision,
    validation: Validation,
    validate: Callable[[fingerprint.Decision], Validation],
    plan: Callable[..., PlanCounts],
) -> tuple[PlanCounts, fingerprint.Decision]:
    """The store's items brought up to the manifest as ``decision`` says (nothing when unchanged);
    a plan whose inputs moved while they were read is rolled back and made whole. The counts, and
    the decision that was carried out."""
    if decision.status == fingerprint.UNCHANGED:
        counts = PlanCounts(0, 0, 0)
    else:
        try:
            counts = plan(store, decision=decision, validation=validation)
        except fingerprint.InputsMoved as moved:  # rolled back: plan it whole instead
            decision = decision.whole(f"{moved} changed while it was read")
            counts = plan(store, decision=decision, validation=validate(decision))
    store.note_planned(counts.added)  # the next execution's "new"
    return counts, decision


def upgrade_notes(paths: RunPaths) -> list[str]:
    """A line for each store of the run kept in an older layout: the first open for writing migrates
    it, once, in one transaction (about 20 s of a million items' checkpoint; the cost store about as
    long per million charges, benchmarks/RESULTS.md), and a user should not take that for a hang."""
    from relaybatch.costs import CostStore
    from relaybatch.costs.ledger import SCHEMA_VERSION as COST_LAYOUT
    from relaybatch.engine.store import SCHEMA_VERSION as CHECKPOINT_LAYOUT

    olds: list[tuple[str, int, int]] = []  # what, its layout, this version's
    if paths.checkpoint.is_file():
        with CheckpointStore.open_read_only(paths.checkpoint) as store:
            if (old := store.layout()) < CHECKPOINT_LAYOUT:  # counted only then: this runs before every plan
                items = sum(store.count_by_state().values())
                olds.append((f"checkpoint store of {items:,} items", old, CHECKPOINT_LAYOUT))
    costs = CostStore.open_read_only(paths.cost_store)
    if costs is not None:
        try:
            if (old := costs.layout()) < COST_LAYOUT:
                olds.append(("cost store", old, COST_LAYOUT))
        finally:
            costs.close()
    return [
        f"the {what} is upgraded from layout {old} to {new} first (once; about half a minute a million items)"
        for what, old, new in olds
    ]


def _identity(manifest_path: Path, decision: fingerprint.Decision, images: dict[str, str]) -> str:
    """The run identity of the inputs as read now (relaybatch/run/identity.py)."""
    files = {path: state.sha256 for path, state in decision.files.items()}
    return identity.identity_of(manifest_path, files, images)


def _validated(
    manifest: Manifest,
    decision: fingerprint.Decision,
    paths: RunPaths,
    seen_in: Path,
    check: Callable[[Validation], None] | None,
    images: dict[str, str],
) -> Validation:
    """The whole manifest validated, or only its appended rows (against the planned ones), or
    nothing (the recorded validation); then the gateway's check, over every route either way.
    ``images`` is filled with the image files the plan reads (read now, or as recorded)."""
    images.clear()

    def note(path: Path, raw: bytes) -> None:
        images.setdefault(str(path.resolve()), hashlib.sha256(raw).hexdigest())

    if decision.status == fingerprint.WHOLE:
        with noting_image_reads(note):
            validation = manifest.validate(seen_in=seen_in)
    else:
        validation = fingerprint.recorded_validation(decision)
        images.update(fingerprint.recorded_images(paths.checkpoint))
        if decision.status == fingerprint.APPENDED:
            with CheckpointStore.open_read_only(paths.checkpoint) as store, noting_image_reads(note):
                validation = manifest.validate(
                    starts=decision.starts,
                    earlier=fingerprint.earlier_rows(store),
                    seen_in=seen_in,
                    result=validation,
                )
    if check is not None:
        check(validation)
    validation.raise_if_invalid()
    return validation


def _plan_items(
    store: CheckpointStore,
    manifest: Manifest,
    decision: fingerprint.Decision,
    validation: Validation,
    seen_in: Path,
    run: RunPaths,
    shard: Shard | None,
) -> PlanCounts:
    """The manifest's items (or its appended rows' only) into the store, with the plan's record."""
    items = manifest.iter_items(decision.starts if decision.status == fingerprint.APPENDED else None)
    others = None
    if shard is not None:
        items = (item for item in items if shard.contains(item.key))
        others = OtherStores(stores_beside_shard(run, shard.paths(run)))
        others.lend_superseded(store, shard)
    recorder = fingerprint.Recorder(manifest, decision, validation, seen_in)
    try:
        with recorder.reading():
            return store.plan_items(items, skip=others.settled if others else None, record=recorder.record)
    finally:
        if others is not None:
            others.close()


async def run_limiter(
    shared_limit: SharedLimit | None, known_rpm: int | None = None
) -> tuple[Limiter, AdaptiveTokenBucket]:
    """The run's limiter, and the in-process bucket inside it (the engine fits polls to it).

    The bucket starts at the shared limit, else at the run's known limit (``run.rate_limit_rpm``
    or ``--rate-limit-rpm``), else unknown; either way it then follows the gateway's headers and
    429s.
    """
    from relaybatch.shared_limit import open_shared_limiter

    bucket = AdaptiveTokenBucket(shared_limit.rpm if shared_limit else known_rpm)
    if shared_limit is None:
        return bucket, bucket
    return await open_shared_limiter(shared_limit, local=bucket), bucket


def engine_settings(saved: dict[str, Any], cancel_remote_on_stop: bool = False) -> EngineSettings:
    return EngineSettings(
        concurrency=int(saved.get("concurrency", EngineSettings.concurrency)),
        uncertain_policy=saved.get("uncertain_policy", "report"),
        cancel_remote_on_stop=cancel_remote_on_stop,
        outputs={job: OutputCheck.from_saved(output) for job, output in (saved.get("outputs") or {}).items()},
        renders=render_settings(saved),
    )


def render_settings(saved: dict[str, Any]) -> RenderSettings:
    """The video jobs' render settings and caps on renders in flight, as the run stored them."""
    jobs = {
        name: RenderJob(
            expected_render_seconds=video.get("expected_render_seconds"),
            render_deadline_seconds=video.get("render_deadline_seconds"),
            on_deadline=video.get("on_deadline", "keep"),
            max_in_flight=video.get("max_in_flight"),
        )
        for name, video in (saved.get("renders") or {}).items()
    }
    return RenderSettings(jobs, max_in_flight_per_model=dict(saved.get("max_in_flight") or {}))


def budgets(saved: dict[str, Any]) -> Budgets:
    from relaybatch.costs import enforced_budgets

    return enforced_budgets(saved)


@dataclass
class OpenRun:
    """Everything one execution of a run uses; ``execute`` drives it."""

    store: CheckpointStore
    client: GatewayClient
    settings: EngineSettings
    bucket: AdaptiveTokenBucket
    guard: Any
    slots: RenderSlots | None = None  # None: the engine's own, in this process

    async def execute(
        self,
        stop: asyncio.Event | None = None,
        progress: ProgressReporter | None = None,
        hook: Callable[[str, str], None] | None = None,
    ) -> RunSummary:
        return await execute(
            self.store,
            self.client,
            settings=self.settings,
            limiter=self.bucket,
            spend=self.guard,
            stop=stop,
            hook=hook,
            progress=progress,
            slots=self.slots,
        )


@contextlib.asynccontextmanager
async def open_run(
    paths: RunPaths,
    *,
    base_url: str | None = None,
    shared_limit: SharedLimit | None = None,
    cancel_remote_on_stop: bool = False,
    client: GatewayClient | None = None,
    settings: Settings | None = None,
    entry: Entry | None = None,
) -> AsyncIterator[OpenRun]:
    """Store, limiter, client and spend guard for an execution of the run at ``paths``.

    The API key is read here, inside the process that sends: it is never a parameter. With
    ``client`` given, that client is used (and not closed) instead of one built from settings.
    The execution is recorded (its id on every item and ledger row it writes) once its prices are
    known: a run refused before sending (an ambiguous price) records none.
    """
    from relaybatch.connect import open_client
    from relaybatch.costs import spend_guard_for_run
    from relaybatch.fleet.setup import held_by_server
    from relaybatch.settings import entry_settings

    with CheckpointStore(paths.checkpoint) as store:
        saved = store.run_settings()
        limits = budgets(saved)
        if limits.run_usd is not None or limits.job_usd:  # they count the run's other stores
            from relaybatch.run.handoff import fresh_spend_files

            fresh_spend_files(paths)
        rpm = saved.get("rate_limit_rpm")
        limiter, bucket = await run_limiter(shared_limit, int(rpm) if rpm else None)
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                settings = settings or entry_settings(base_url=base_url)
                client = await stack.enter_async_context(open_client(settings, limiter))
            guard = await stack.enter_async_context(
                spend_guard_for_run(store, client, budgets=limits, providers=saved.get("providers"))
            )
            run_settings = engine_settings(saved, cancel_remote_on_stop)
            # The budgets and render caps the Prefect server holds, when it holds any (fleet/setup.py).
            held = await stack.enter_async_context(
                held_by_server(paths, store.run_name() or paths.name, saved, guard, run_settings.renders)
            )
            stack.callback(store.release_cache)  # before the guard closes and writes the ledger
            entry = entry or Entry()
            held.guard.execution = store.record_start(entry.kind, entry.label)
            yield OpenRun(store, client, run_settings, bucket, held.guard, held.slots)


def refused_before_sending(paths: RunPaths, error: UserError) -> ExecuteResult:
    """Something the user must fix before anything is sent (an ambiguous price, a missing key):
    the run stops resumable with the message, instead of a failure and its traceback."""
    with CheckpointStore(paths.checkpoint) as store:
        return ExecuteResult(store.count_by_state(), str(error), None)


def result_of(summary: RunSummary, execution: int | None = None) -> ExecuteResult:
    return ExecuteResult(
        summary.counts, summary.stopped, summary.spent_usd, summary.sent, execution=execution
    )
