"""``relaybatch.Run``: a run driven from Python, with pandas in and out.

Thin over the run layer, as the CLI is: ``plan_run`` plans the manifest into the run's store,
``run_locally`` executes and exports it, ``retry_failed`` and the exports are the CLI's own. A
table (a pandas DataFrame or any Arrow-compatible table) becomes a Parquet file and a manifest in
the run's folder first (api/job.py), so a run started here resumes from a terminal and back.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.api.frames import (
    ROW_RESULT,
    arrow_table,
    joined_to_rows,
    pandas_module,
    read_input,
    read_parquet,
    write_input,
)
from relaybatch.api.job import INPUT_NAME, MANIFEST_NAME, Job, write_manifest
from relaybatch.api.progress import Latest, NotebookBar, Quiet, in_notebook
from relaybatch.api.threads import run_coroutine
from relaybatch.engine.progress import ProgressReporter
from relaybatch.manifests import open_manifest
from relaybatch.run.assemble import PlannedRun, RunOverrides, plan_run, store_paths
from relaybatch.run.execution import RunOutcome, run_locally
from relaybatch.run.retry import Retried, retry_failed
from relaybatch.run.stopping import InterruptRelay
from relaybatch.run_folder import RunPaths
from relaybatch.settings import entry_settings, run_paths

if TYPE_CHECKING:
    import pandas as pd


class Run:
    """One run: a manifest (``Run("my.yaml")``) or a table with its jobs (``Run.from_table``).

    Its folder, keys and exactly-once rules are those of `relaybatch run` on the same manifest:
    running it again resumes it and sends nothing that is done. Settings come from the arguments,
    then ``RELAYBATCH_*`` variables, then the defaults (the embedded emulator when no base URL).
    """

    def __init__(
        self,
        manifest: str | Path,
        *,
        name: str | None = None,
        runs_dir: str | Path | None = None,
        base_url: str | None = None,
        budget_usd: Decimal | str | None = None,
        concurrency: int | None = None,
        rate_limit_rpm: int | None = None,
    ) -> None:
        # Built once for this entry point: a bad RELAYBATCH_* value fails here, before anything.
        self.settings = entry_settings(base_url=base_url, runs_dir=Path(runs_dir) if runs_dir else None)
        self.manifest = Path(manifest)
        self.overrides = RunOverrides(
            run_name=name,
            budget_usd=None if budget_usd is None else Decimal(str(budget_usd)),
            concurrency=concurrency,
            rate_limit_rpm=rate_limit_rpm,
        )
        run_name = name if name is not None else open_manifest(self.manifest).run_name
        self.paths: RunPaths = run_paths(self.settings.runs_dir, run_name)
        # The table's Parquet file, for a run made from a table (this manifest is the API's own).
        table = self.manifest.parent / f"{run_name}.parquet"
        made_here = self.manifest.name == MANIFEST_NAME and self.manifest.parent.name == INPUT_NAME
        self.inputs: Path | None = table if made_here and table.is_file() else None

    @classmethod
    def from_table(
        cls,
        data: Any,
        jobs: Job | Sequence[Job],
        *,
        name: str,
        runs_dir: str | Path | None = None,
        base_url: str | None = None,
        budget_usd: Decimal | str | None = None,
        concurrency: int | None = None,
        rate_limit_rpm: int | None = None,
        reuse: str | Sequence[str] | None = None,
    ) -> Run:
        """A run of ``jobs`` over every row of ``data`` (a pandas DataFrame or an Arrow-compatible
        table). The table and a manifest are written to ``<runs>/<name>/input/`` (only when they
        change); ``reuse``: "all", or names of other runs whose done answers to the same requests
        are taken instead of sending (docs/manifests.md, "Reuse")."""
        folder = run_paths(Path(runs_dir) if runs_dir else None, name).root / INPUT_NAME
        data_file = f"{name}.parquet"
        write_input(arrow_table(data), folder / data_file)
        settings: dict[str, Any] = {"name": name}
        if reuse is not None:
            settings["reuse"] = reuse if isinstance(reuse, str) else list(reuse)
        manifest = write_manifest(
            folder, settings, [jobs] if isinstance(jobs, Job) else list(jobs), data_file
        )
        return cls(
            manifest,
            runs_dir=runs_dir,
            base_url=base_url,
            budget_usd=budget_usd,
            concurrency=concurrency,
            rate_limit_rpm=rate_limit_rpm,
        )

    @property
    def name(self) -> str:
        return self.paths.name

    def __repr__(self) -> str:
        return f"Run({self.name!r}, manifest={str(self.manifest)!r}, folder={str(self.paths.root)!r})"

    # -- planning and running ----------------------------------------------------------------

    def plan(self) -> pd.DataFrame:
        """Per job, kind and model: items, expected tokens, the expected cost and the worst case (what
        a budget reserves), as `relaybatch plan` prices them; sends no billed request."""
        from relaybatch.connect import open_client
        from relaybatch.costs.observed import observed_outputs
        from relaybatch.costs.plan import Plan, make_plan

        manifest = open_manifest(self.manifest)
        manifest.validate().raise_if_invalid()
        providers = {job.name: job.provider for job in manifest.jobs if job.provider}
        # Earlier runs' answers (every run under the runs folder) say how long this job's answers are.
        observed = observed_outputs(self.settings.runs_dir)

        async def priced() -> Plan:
            async with open_client(self.settings) as client:
                return await make_plan(manifest.iter_items(), client, providers, observed)

        result = run_coroutine(priced)
        return pandas_module().DataFrame(
            [
                {
                    "job": job.job,
                    "kind": job.kind,
                    "model": job.model,
                    "items": job.items,
                    "input_tokens": job.input_tokens,
                    "output_tokens": job.output_tokens,
                    "expected_usd": job.expected_usd if job.priced else None,
                    "worst_usd": job.worst_usd if job.priced else None,
                    "not_estimated": "; ".join(sorted(job.unknowns)),
                    # Text jobs: how many earlier answers the output estimate comes from (0: assumed).
                    "output_from_answers": job.observed.calls if job.observed else 0,
                }
                for job in result.jobs
            ]
        )

    def run(self, *, retry_failed: bool | Sequence[str] = False, progress: bool = True) -> RunOutcome:
        """Run (or resume) to the end: done items are never sent again. Works in a plain script
        and inside Jupyter's running event loop (api/threads.py); a kernel interrupt (or Ctrl-C)
        stops it as Ctrl-C stops `relaybatch run`, and running it again resumes. ``retry_failed``:
        True, or reason texts, puts failed items back to pending first (`--retry-failed`)."""
        relay = InterruptRelay()
        with contextlib.ExitStack() as hold:  # the store's lock, from planning to export
            planned = self._plan(hold, retry_failed)
            reporter, bar = self._progress(progress)
            outcome = run_coroutine(
                lambda: run_locally(
                    self.manifest,
                    planned=planned,
                    settings=self.settings,
                    progress=reporter,
                    relay=relay,
                ),
                relay,
                tick=bar.draw if bar is not None else None,
            )
            if bar is not None:
                bar.draw()
        self._say_outcome(planned, outcome)
        return outcome

    async def run_async(
        self, *, retry_failed: bool | Sequence[str] = False, progress: bool = True
    ) -> RunOutcome:
        """``run`` as a coroutine on the caller's event loop (``await run.run_async()`` in a notebook
        cell): the progress goes to stderr, and Ctrl-C is handled by the loop's own thread."""
        with contextlib.ExitStack() as hold:
            planned = self._plan(hold, retry_failed)
            outcome = await run_locally(
                self.manifest,
                planned=planned,
                settings=self.settings,
                progress=None if progress else Quiet(),
            )
        self._say_outcome(planned, outcome)
        return outcome

    def retry_failed(self, *reasons: str) -> Retried:
        """Failed items back to pending (all, or those whose reason contains one of ``reasons``);
        never uncertain ones. The next ``run()`` sends them."""
        return retry_failed(self.paths.require_existing(), reasons)

    def _plan(self, hold: contextlib.ExitStack, retry: bool | Sequence[str]) -> PlannedRun:
        planned = plan_run(self.manifest, self.settings.runs_dir, None, self.overrides, hold=hold, say=_say)
        for line in planned.reused.lines() if planned.reused else []:
            _say(line)
        if retry is not False:
            reasons = () if retry is True else tuple(retry)
            for line in retry_failed(planned.paths, reasons).lines():
                _say(line)
        return planned

    def _progress(self, wanted: bool) -> tuple[ProgressReporter | None, NotebookBar | None]:
        if not wanted:
            return Quiet(), None
        if in_notebook():
            latest = Latest()
            return latest, NotebookBar(latest, f"relaybatch run {self.name}")
        return None, None  # the CLI's: a live table on a terminal, log lines elsewhere

    def _say_outcome(self, planned: PlannedRun, outcome: RunOutcome) -> None:
        counts = ", ".join(f"{state} {count}" for state, count in sorted(outcome.counts.items()))
        _say(f"items: {counts} ({planned.added} new); {outcome.sent} requests sent by this execution")
        if outcome.stopped:
            by = f" by {outcome.interrupted}" if outcome.interrupted else ""
            _say(f"stopped{by}: {outcome.stopped}")

    # -- reading ---------------------------------------------------------------------------------

    def status(self) -> pd.DataFrame:
        """Items per job and state (a column per state, and the total), over the run's stores."""
        from relaybatch.run.views import items_per_job_and_state

        return pandas_module().DataFrame(items_per_job_and_state(store_paths(self.paths)))

    def results(self, job: str | None = None) -> pd.DataFrame:
        """The results, one row per item, as its store holds them now (beside a running execution: a
        consistent snapshot). A run made from a table: each row beside its input row (the table's
        index kept). ``job``: one job's only; with several jobs and none given, a ``job`` column."""
        results, _ = self._exports()
        if job is not None:
            results = [path for path in results if path.stem == job]
        frame = read_parquet(results, job_column=len(results) > 1)
        if self.inputs is None or frame.empty:
            return frame
        return joined_to_rows(read_input(self.inputs), frame)

    def ledger(self) -> pd.DataFrame:
        """The cost ledger, one row per billed call (money as exact decimals), as now; for a run made
        from a table, each charge beside the input row it paid for."""
        results, ledger = self._exports()
        if ledger is None:
            return pandas_module().DataFrame()
        charges = read_parquet([ledger], job_column=False)
        if self.inputs is None or charges.empty:
            return charges
        rows = read_parquet(results, job_column=False)[["item_key", ROW_RESULT]]
        merged = charges.merge(rows, on="item_key", how="left")
        return joined_to_rows(read_input(self.inputs), merged)

    def _exports(self) -> tuple[list[Path], Path | None]:
        from relaybatch.run.snapshot import exports_now

        return exports_now(self.paths.require_existing())


def _say(line: str) -> None:
    print(f"relaybatch: {line}", file=sys.stderr, flush=True)
