"""Exact costs: prices from the gateway, usage in one shape, Decimal costs per call, budgets that
hold with calls in flight, the cost ledger Parquet, spend reports and the HTML dashboard."""

from relaybatch.costs.budget import Budget, Budgets, Refusal
from relaybatch.costs.dashboard import render_dashboard, write_dashboard
from relaybatch.costs.guard import RunSpendGuard, open_spend_guard
from relaybatch.costs.ledger import CostStore, LedgerRow, ledger_schema, write_ledger
from relaybatch.costs.price import TIER_THRESHOLD_TOKENS, CallCost, CostComponent, price_call
from relaybatch.costs.pricing import ModelPrices, PriceBook, PricingError, parse_pricing
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
from relaybatch.costs.usage import UsageCounts, UsageError
from relaybatch.costs.worst_case import worst_case_usd

__all__ = [
    "TIER_THRESHOLD_TOKENS",
    "Budget",
    "BudgetUse",
    "Budgets",
    "CallCost",
    "CostComponent",
    "CostStore",
    "LedgerRow",
    "ModelPrices",
    "PriceBook",
    "PricingError",
    "Reconciliation",
    "Refusal",
    "RunSpend",
    "RunSpendGuard",
    "UsageCounts",
    "UsageError",
    "budget_settings",
    "budget_uses",
    "budgets_from_manifest",
    "enforced_budgets",
    "ledger_schema",
    "load_spend",
    "open_spend_guard",
    "parse_pricing",
    "price_call",
    "reconcile",
    "render_dashboard",
    "run_budgets",
    "spend_guard_for_run",
    "worst_case_usd",
    "write_dashboard",
    "write_ledger",
]
