"""Prefect tasks: the coarse steps the flows call (plan, execute, export, merge), never one per item."""

from relaybatch.tasks.steps import (
    execute_items,
    export_outputs,
    merge_shards,
    plan_items,
    plan_partition_items,
)

__all__ = ["execute_items", "export_outputs", "merge_shards", "plan_items", "plan_partition_items"]
