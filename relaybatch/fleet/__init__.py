"""What a fleet of processes shares on the Prefect server beside the request limit
(relaybatch/shared_limit.py): a budget per run and per account (``budget``) and a cap on renders in
flight per model (``renders``), both kept as global concurrency limits (relaybatch/server_limits.py).
docs/prefect.md says when each is used and what survives a crash or a restart of the server.
"""

from relaybatch.fleet.budget import (
    FleetSettings,
    ServerBudget,
    ServerBudgetGuard,
    ServerBudgetSpec,
    budget_specs,
)
from relaybatch.fleet.renders import ServerRenderSlots

__all__ = [
    "FleetSettings",
    "ServerBudget",
    "ServerBudgetGuard",
    "ServerBudgetSpec",
    "ServerRenderSlots",
    "budget_specs",
]
