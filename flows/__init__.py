"""Prefect flows, one per thing a user does: run a manifest (whole or one shard), resume a run,
run a manifest as shards and merge them, export a run, report its spend."""

from relaybatch.flows.maintenance import cost_report, export_run
from relaybatch.flows.run_manifest import RunOutcome, resume_run, run_manifest
from relaybatch.flows.sharding import run_sharded

__all__ = ["RunOutcome", "cost_report", "export_run", "resume_run", "run_manifest", "run_sharded"]
