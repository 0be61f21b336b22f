"""Prefect tasks: the coarse steps the flows call (plan, execute, export), never one per item."""

from relaybatch.tasks.steps import execute_items, export_outputs, plan_items

__all__ = ["execute_items", "export_outputs", "plan_items"]
