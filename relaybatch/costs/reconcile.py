"""Does our ledger agree with the gateway's (the emulator's) to the cent, in total and call by call?

The emulator's ledger (``app.state.emulator.ledger`` in-process, or ``GET /_emulator/ledger``)
lists every charge with its route, model and USD. Calls are matched by what both sides know: the
model (web search is billed under the gateway's own search model, which clients never name, so
both sides label it "web search") and the amount. Totals must agree to the cent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from relaybatch.costs.ledger import NOT_CHARGED, REUSED

CENT = Decimal("0.01")
WEB_SEARCH_LABEL = "web search"
WEB_SEARCH_ROUTE_PREFIX = "/v1/websearch/"

Charge = tuple[str, Decimal]


@dataclass(frozen=True)
class Reconciliation:
    ours_usd: Decimal
    theirs_usd: Decimal
    only_ours: list[Charge]  # calls we recorded that the gateway did not charge
    only_theirs: list[Charge]  # charges the gateway made that we did not record
    unknown_calls: int  # our rows with no known cost (missing price or outcome unknown)

    @property
    def agree(self) -> bool:
        same_total = self.ours_usd.quantize(CENT) == self.theirs_usd.quantize(CENT)
        return same_total and not self.only_ours and not self.only_theirs and not self.unknown_calls

    def describe(self) -> str:
        return (
            f"ours {self.ours_usd} USD, theirs {self.theirs_usd} USD; only ours: {self.only_ours}; "
            f"only theirs: {self.only_theirs}; calls of unknown cost: {self.unknown_calls}"
        )


def _field(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name)


def gateway_charge(entry: Any) -> Charge:
    """One charge of the emulator's ledger (object or JSON) as (label, USD)."""
    route = str(_field(entry, "route") or "")
    label = WEB_SEARCH_LABEL if route.startswith(WEB_SEARCH_ROUTE_PREFIX) else str(_field(entry, "model"))
    return label, Decimal(str(_field(entry, "usd")))


def ledger_charge(record: Mapping[str, Any]) -> Charge:
    """One of our ledger rows (cost store record or Parquet row) as (label, USD)."""
    label = WEB_SEARCH_LABEL if record["kind"] == "web_search" else str(record["model"])
    return label, Decimal(str(record["usd"]))


def reconcile(
    records: Iterable[Mapping[str, Any]], charges: Iterable[Any], per_call_quantum: Decimal | None = None
) -> Reconciliation:
    """Match our rows to the gateway's charges: totals to the cent, each call exactly (both sides
    keep full precision) or, with ``per_call_quantum`` (e.g. CENT), to that quantum."""
    rows = list(records)

    def key(charge: Charge) -> Charge:
        label, usd = charge
        return label, usd if per_call_quantum is None else usd.quantize(per_call_quantum)

    # A call resolved as never charged has its row (the audit trail) but no charge to match.
    ours = [
        ledger_charge(row)
        for row in rows
        if row["usd"] is not None and row.get("outcome") not in (NOT_CHARGED, REUSED)
    ]
    theirs = [gateway_charge(entry) for entry in charges]
    ours_calls, theirs_calls = Counter(map(key, ours)), Counter(map(key, theirs))
    return Reconciliation(
        ours_usd=sum((usd for _, usd in ours), Decimal(0)),
        theirs_usd=sum((usd for _, usd in theirs), Decimal(0)),
        only_ours=sorted((ours_calls - theirs_calls).elements()),
        only_theirs=sorted((theirs_calls - ours_calls).elements()),
        unknown_calls=sum(1 for row in rows if row["usd"] is None),
    )
