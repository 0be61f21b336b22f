"""Costs above the engine: the spend guard (the engine's spend seam), the cost ledger store and its
Parquet, the run's budgets as its stores keep them, spend reports, the HTML dashboard and the
terminal views. The cost model they all price with (usage, prices, worst case, expected cost,
budget arithmetic) is ``relaybatch.cost_model``, below the engine.

Code outside imports this face; the modules are internal: ``guard.py`` (the spend guard),
``ledger/`` (the cost store and the ledger Parquet; a package whose face lists its modules),
``run.py`` (a run's guard and budgets), ``run_budgets.py`` (budgets as stored, shards' shares),
``plan.py`` (`relaybatch plan`), ``observed.py`` (earlier answers' lengths), ``periods.py``
(period budgets as people read them), ``grouping.py`` (`report --by`), ``reconcile.py``,
``report.py``, ``dashboard_data.py``, ``dashboard.py`` (plotly) and ``terminal.py`` (`relaybatch report`)."""

from relaybatch.costs.dashboard import render_dashboard, write_dashboard
from relaybatch.costs.guard import RunSpendGuard, open_spend_guard
from relaybatch.costs.ledger import CostStore, LedgerRow, ledger_schema, write_ledger
from relaybatch.costs.reconcile import Reconciliation, reconcile
from relaybatch.costs.report import RunSpend, load_spend
from relaybatch.costs.run import budgets_from_manifest, spend_guard_for_run
from relaybatch.costs.run_budgets import (
    BudgetUse,
    budget_settings,
    budget_uses,
    enforced_budgets,
    run_budgets,
)

__all__ = [
    "BudgetUse",
    "CostStore",
    "LedgerRow",
    "Reconciliation",
    "RunSpend",
    "RunSpendGuard",
    "budget_settings",
    "budget_uses",
    "budgets_from_manifest",
    "enforced_budgets",
    "ledger_schema",
    "load_spend",
    "open_spend_guard",
    "reconcile",
    "render_dashboard",
    "run_budgets",
    "spend_guard_for_run",
    "write_dashboard",
    "write_ledger",
]
