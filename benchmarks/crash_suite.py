"""The crash suite at full size: a large mixed manifest, SIGKILLed at 100 seeded random points.

Same driver and checks as tests/proof/test_crash.py (tests/proof/proof_crash.py), at a size that
takes minutes instead of seconds. Prints the campaign (kills by kind of point), the final states,
the check results, and the wall time; exits 1 if any check fails.

    .venv/bin/python benchmarks/crash_suite.py                       # 20 copies (580 items), 100 kills
    .venv/bin/python benchmarks/crash_suite.py --copies 40 --kills 200 --seed 7
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "proof"))

from proof_crash import crash_campaign, mixed_manifest, run_to_end, runner_env, verify
from proof_served import config_with, served_emulator

from relaybatch.manifests import load_items

KEY = "rb-crash-suite-key"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20, help="Copies of everything.yaml's 11 jobs")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20260522)
    args = parser.parse_args()

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="relaybatch-crash-") as folder:
        root = Path(folder)
        manifest = mixed_manifest(root, args.copies)
        expected = len(load_items(manifest))
        print(
            f"manifest: {expected} items ({args.copies} copies of every job in everything.yaml)", flush=True
        )
        with served_emulator(config_with(demo_key=KEY)) as emulator:
            baseline_started = time.monotonic()
            baseline = run_to_end(manifest, root / "baseline", runner_env(emulator, KEY))
            print(f"uninterrupted run: {time.monotonic() - baseline_started:.1f} s", flush=True)
        with served_emulator(config_with(demo_key=KEY)) as emulator:
            environment = runner_env(emulator, KEY)
            campaign = crash_campaign(
                manifest,
                root / "crashed",
                environment,
                seed=args.seed,
                kills=args.kills,
                engine_seconds=baseline["engine_seconds"],
            )
            problems, states = verify(root / "crashed", emulator, root / "baseline", expected)
            charges = len(emulator.state.ledger)

    print(
        f"kills: {campaign.kills} ({campaign.timer_kills} by timer, "
        f"by hook point {dict(campaign.hook_kills)})"
    )
    print(f"campaign: {campaign.seconds:.1f} s; final states: {dict(states)}; emulator charges: {charges}")
    if campaign.kills < args.kills:
        problems.append(f"only {campaign.kills} kills before the run finished: give it more work (--copies)")
    for problem in problems:
        print(f"FAIL: {problem}")
    verdict = "PASS" if not problems else "FAIL"
    print(
        f"{verdict}: no item lost, no create received twice, results equal, ledgers reconciled"
        if not problems
        else f"{verdict}: {len(problems)} problems"
    )
    print(f"total: {time.monotonic() - started:.1f} s")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
