"""Every per-kind table covers every kind (relaybatch/kinds.py lists them: where a new kind goes).

A kind added to ``relaybatch.kinds.Kind`` fails here, naming each table still to fill.
"""

from __future__ import annotations

import contextlib
from typing import Any, get_args

import pytest

from relaybatch.cost_model import UsageError, expected_usage, parse_pricing, usage_for_call, worst_case_usd
from relaybatch.engine.kinds import CALLS
from relaybatch.engine.result_columns import KIND_COLUMNS, USAGE_TYPES
from relaybatch.kinds import KINDS, ROUTE_PRICED_KINDS, TEXT_KINDS, VIDEO_KINDS, Kind
from relaybatch.manifests import Kind as ManifestKind
from relaybatch.manifests.build import FILLED_BY_INPUTS
from relaybatch.manifests.checks import REQUEST_MODELS
from relaybatch.manifests.converters import FAMILY_OF_KIND
from relaybatch.telemetry.run import OPERATIONS

# Every table keyed by kind that must hold every kind.
EVERY_KIND: dict[str, Any] = {
    "manifests/checks.py REQUEST_MODELS": REQUEST_MODELS,
    "manifests/build.py FILLED_BY_INPUTS": FILLED_BY_INPUTS,
    "engine/kinds.py CALLS": CALLS,
    "engine/result_columns.py KIND_COLUMNS": KIND_COLUMNS,
    "telemetry/run.py OPERATIONS": OPERATIONS,
}
TOKEN_PRICES = parse_pricing(
    {
        "data": {
            "id": "m",
            "pricing": {
                "text": {"prompt": "0.000003", "completion": "0.000015"},
                "generation": {"video": {"per_second": "0.1"}},
            },
        }
    }
)
IMAGE_PRICES = parse_pricing(
    {"data": {"id": "m", "pricing": {"kind": "generation", "generation": {"image": {"per_image": "0.04"}}}}}
)


@pytest.mark.parametrize("table", sorted(EVERY_KIND))
def test_every_per_kind_table_covers_every_kind(table: str) -> None:
    assert [kind for kind in KINDS if kind not in EVERY_KIND[table]] == [], f"{table} lacks these kinds"


def test_tables_of_one_family_cover_that_family() -> None:
    assert set(FAMILY_OF_KIND) == TEXT_KINDS
    assert set(USAGE_TYPES) <= set(KINDS)
    assert set(KINDS) >= ROUTE_PRICED_KINDS and set(KINDS) >= VIDEO_KINDS


def test_the_manifests_kind_is_the_one_kind() -> None:
    assert ManifestKind is Kind and get_args(Kind) == KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_the_cost_model_prices_every_kind(kind: str) -> None:
    request = {"model": "m", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}
    prices = IMAGE_PRICES if kind == "image" else TOKEN_PRICES
    assert worst_case_usd(kind, request, prices) is not None
    expected_usage(kind, request, prices)  # raises for a kind it has no estimate of
    # An answer without its usage object is an unknown cost (UsageError); any other error is a gap.
    with contextlib.suppress(UsageError):
        usage_for_call(kind, request, {"usage": {}})
