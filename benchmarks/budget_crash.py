"""Budgets across crashes at full size: `relaybatch run` SIGKILLed 20+ times during billed creates.

Same driver and checks as tests/proof/test_budget_crash.py (tests/proof/proof_budget.py): a
budgeted mixed run (chat, images, V2 videos at 0.40 USD; the run budget binds), slowed creates and
a share of video creates cut off after charging; after every kill and at the end, the emulator's
ledger must show billed <= budget, and the runner's ledger (known + unknown at worst case) must
cover the bill with every answered call matched. Prints one JSON line of figures and the target
ratio (billed / budget <= 1); exits 1 if a check fails. Each execution pays a Prefect start.

    .venv/bin/python benchmarks/budget_crash.py                  # 20 kills
    .venv/bin/python benchmarks/budget_crash.py --kills 30 --seed 7
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "proof"))

from proof_budget import budget_campaign, budget_config, budget_manifest, check_books, summary_line
from proof_served import served_emulator

KEY = "rb-budget-crash-key"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--run-usd", default="30.00")
    parser.add_argument("--video-usd", default="45.00")
    args = parser.parse_args()
    run_usd, video_usd = Decimal(args.run_usd), Decimal(args.video_usd)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        # Enough billed creates under the budget for every kill (about 2 per execution, and the
        # unknown outcomes a kill leaves use budget at their worst case), most of them videos:
        # 10 chats, 6 images, then more videos than the run budget allows (0.40 USD each).
        videos = int(run_usd / Decimal("0.40")) + 10
        manifest = budget_manifest(
            root, videos=videos, images=6, chats=10, run_usd=args.run_usd, video_usd=args.video_usd
        )
        with served_emulator(budget_config(KEY)) as emulator:
            campaign = budget_campaign(
                manifest, root / "home", emulator, KEY, seed=args.seed, kills=args.kills
            )
            books = check_books(root / "home" / "runs" / "budgeted", emulator, run_usd, video_usd)
        over = [str(usd) for usd in campaign.billed_after_kill if usd > run_usd]
    print(summary_line(campaign, books, run_usd))
    ratio = books.billed / run_usd
    print(f"billed / budget = {ratio:.4f} (target <= 1); kills {campaign.kills} (target >= {args.kills})")
    problems = books.problems + ([f"over the budget after a kill: {over}"] if over else [])
    problems += [] if campaign.kills >= args.kills else [f"only {campaign.kills} kills"]
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print(json.dumps({"ok": not problems}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
