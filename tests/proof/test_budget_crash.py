"""Budgets across crashes at small size: `relaybatch run` SIGKILLed at seeded moments during the
billed creates of a budgeted mixed run, resumed each time; the emulator's ledger shows the budget
held and the runner's ledger covers the bill (tests/proof/proof_budget.py). Full size, 20+ kills:
benchmarks/budget_crash.py."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from proof_budget import budget_campaign, budget_config, budget_manifest, check_books
from proof_served import served_emulator

KEY = "rb-proof-budget-key"
SEED = 20261123
# Each kill may leave up to 4 creates in flight, counted at their worst case (4 x 0.40 USD): the
# video budget leaves room for 3 kills whatever the timing, and still binds before the run's.
RUN_USD, VIDEO_USD = Decimal("8.00"), Decimal("6.00")


def test_kill_nine_during_billed_creates_never_crosses_the_budget(tmp_path: Path) -> None:
    manifest = budget_manifest(
        tmp_path, videos=20, images=2, chats=3, run_usd=str(RUN_USD), video_usd=str(VIDEO_USD)
    )
    with served_emulator(budget_config(KEY)) as emulator:
        campaign = budget_campaign(manifest, tmp_path / "home", emulator, KEY, seed=SEED, kills=3)
        books = check_books(tmp_path / "home" / "runs" / "budgeted", emulator, RUN_USD, VIDEO_USD)
        over = [usd for usd in campaign.billed_after_kill if usd > RUN_USD]

    assert campaign.kills >= 3, f"the run ended after {campaign.kills} kills: {campaign}"
    assert over == [], f"billed over the budget right after a kill: {over}"
    assert books.problems == [], "\n".join(books.problems)
    assert books.billed > 0 and books.ours >= books.billed
