"""Prefect flows: one per thing a user does (run a manifest, and later resume, export, report)."""

from relaybatch.flows.run_manifest import RunOutcome, run_manifest

__all__ = ["RunOutcome", "run_manifest"]
