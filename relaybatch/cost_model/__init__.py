"""The one cost model, below the engine: usage in one shape, prices and their lookups, a call's cost,
its worst case and its expected cost, and budget arithmetic with calls in flight.

Everything that prices a call (the plan, the budget's reservations, the ledger, the results' token
columns) calls this package; the ledger store, reports, the dashboard and the terminal views that
show the figures live above the engine in ``relaybatch.costs``. Its modules are internal; code
outside imports this face:

- ``usage.py``: each family's usage object as ``UsageCounts`` (``USAGE_READERS``, one table per kind);
- ``pricing.py``: prices from ``GET /v1/models/pricing`` (``PriceBook``) and the fixed ones;
- ``price.py``: ``price_call``, a call's cost component by component;
- ``calls.py``: from an engine call (kind, request, result) to its model, prices and usage;
- ``worst_case.py``: the most a call can cost (what a budget reserves);
- ``expected.py``: what a call is expected to consume (the plan);
- ``budget.py``: reservations against the run's and each job's budget.
"""

from relaybatch.cost_model.budget import (
    RUN_SCOPE,
    Budget,
    Budgets,
    Refusal,
    projected_total,
    projection_warning,
    whole_of_share,
)
from relaybatch.cost_model.calls import call_model, prices_for, usage_for_call
from relaybatch.cost_model.expected import EXPECTED_ANSWER_TOKENS, REASONING_UNKNOWN, Expected, expected_usage
from relaybatch.cost_model.price import COMPONENTS, TIER_THRESHOLD_TOKENS, CallCost, CostComponent, price_call
from relaybatch.cost_model.pricing import (
    ModelPrices,
    PriceBook,
    PricingClient,
    PricingError,
    fetch_pricing,
    judgment_prices,
    parse_pricing,
    web_search_prices,
)
from relaybatch.cost_model.usage import USAGE_READERS, UsageCounts, UsageError, token_counts
from relaybatch.cost_model.worst_case import TOKEN_KINDS, output_cap, worst_case_usd
from relaybatch.kinds import ROUTE_PRICED_KINDS

__all__ = [
    "COMPONENTS",
    "EXPECTED_ANSWER_TOKENS",
    "REASONING_UNKNOWN",
    "ROUTE_PRICED_KINDS",
    "RUN_SCOPE",
    "TIER_THRESHOLD_TOKENS",
    "TOKEN_KINDS",
    "USAGE_READERS",
    "Budget",
    "Budgets",
    "CallCost",
    "CostComponent",
    "Expected",
    "ModelPrices",
    "PriceBook",
    "PricingClient",
    "PricingError",
    "Refusal",
    "UsageCounts",
    "UsageError",
    "call_model",
    "expected_usage",
    "fetch_pricing",
    "judgment_prices",
    "output_cap",
    "parse_pricing",
    "price_call",
    "prices_for",
    "projected_total",
    "projection_warning",
    "token_counts",
    "usage_for_call",
    "web_search_prices",
    "whole_of_share",
    "worst_case_usd",
]
