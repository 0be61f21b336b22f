"""The run flow: plan the manifest's items, execute them, export the results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import flow
from relaybatch.tasks import execute_items, export_outputs, plan_items

from relaybatch.manifests import run_name_for
from relaybatch.runs import RunPaths
from relaybatch.settings import Settings


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    added: int
    counts: dict[str, int]
    results: list[Path]


@flow(name="run-manifest", persist_result=False)
async def run_manifest(
    manifest: Path, runs_dir: Path | None = None, base_url: str | None = None
) -> RunOutcome:
    """Run (or resume) a manifest: items already done are not sent again."""
    # The API key is never a flow parameter (Prefect stores those): settings read it from the
    # environment inside the process that sends requests.
    settings = Settings(**_given(runs_dir=runs_dir, base_url=base_url))
    paths = RunPaths.for_run(settings.runs_dir, run_name_for(manifest))
    added = plan_items(manifest, paths)
    counts = await execute_items(paths, base_url)
    results = export_outputs(paths)
    return RunOutcome(run_dir=paths.root, added=added, counts=counts, results=results)


def _given(**values: object) -> dict[str, object]:
    return {name: value for name, value in values.items() if value is not None}
