"""Flows for a run that already exists: export its results, report its spend."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from relaybatch.flows.run_manifest import run_paths
from relaybatch.flows.summary import artifact_key
from relaybatch.tasks import export_outputs

from relaybatch.costs.report import store_folders
from relaybatch.run import Shard, SpendLine, spend_lines, total_spend


@flow(name="export-run", persist_result=False)
async def export_run(run_name: str, runs_dir: Path | None = None, shard: str | None = None) -> list[Path]:
    """Rebuild a run's results Parquet files and cost ledger from its stores (every file)."""
    part = Shard.parse(shard) if shard else None
    paths = run_paths(runs_dir, run_name, part).require_existing()
    results = export_outputs(paths, rebuild=True)
    await acreate_markdown_artifact(
        # Paths as text: a browser does not open file:// links from the UI's web page.
        "\n".join(f"- `{path.resolve()}`" for path in results) or "no results",
        key=artifact_key("relaybatch", run_name, "outputs"),
        description=f"results of run {run_name}",
    )
    return results


@flow(name="cost-report", persist_result=False)
async def cost_report(
    run_name: str, runs_dir: Path | None = None, shard: str | None = None
) -> list[SpendLine]:
    """Spend by job and model of one run from its cost ledger, as table and markdown artifacts
    (exact decimals; unknown outcomes at their worst case, as `relaybatch report` counts them)."""
    part = Shard.parse(shard) if shard else None
    paths = run_paths(runs_dir, run_name, part).require_existing()
    # A shard's own ledger; a run's with every shard's, as `relaybatch report` counts it.
    lines = spend_lines([paths.root] if part else store_folders(paths.root))
    key = artifact_key("relaybatch", run_name, "costs")
    await acreate_table_artifact(
        [line.row() for line in lines],
        key=key,
        description=f"spend of run {run_name} by job and model (USD; unknown = worst case)",
    )
    await acreate_markdown_artifact(
        f"Run `{run_name}` spent **{total_spend(lines)} USD** over {len(lines)} job/model pairs.",
        key=f"{key}-total",
    )
    return lines
