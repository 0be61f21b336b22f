"""The crash suite at small size: a mixed manifest, SIGKILLed at 20+ seeded random points, resumed
each time, then checked against the emulator and an uninterrupted run (tests/proof/proof_crash.py).
Full size: benchmarks/crash_suite.py."""

from __future__ import annotations

from pathlib import Path

from proof_crash import crash_campaign, mixed_manifest, run_to_end, runner_env, verify
from proof_served import config_with, served_emulator

from relaybatch.manifests import load_items

KEY = "rb-proof-crash-key"
SEED = 20260522
KILLS = 20


def test_kill_nine_at_twenty_points_loses_nothing_and_pays_once(tmp_path: Path) -> None:
    manifest = mixed_manifest(tmp_path, copies=5)
    expected = len(load_items(manifest))
    with served_emulator(config_with(demo_key=KEY)) as emulator:
        baseline = run_to_end(manifest, tmp_path / "baseline", runner_env(emulator, KEY))
    with served_emulator(config_with(demo_key=KEY)) as emulator:
        campaign = crash_campaign(
            manifest,
            tmp_path / "crashed",
            runner_env(emulator, KEY),
            seed=SEED,
            kills=KILLS,
            engine_seconds=baseline["engine_seconds"],
        )
        problems, states = verify(tmp_path / "crashed", emulator, tmp_path / "baseline", expected)

    assert campaign.kills >= KILLS, (
        f"the run ended after {campaign.kills} kills: too little work to interrupt"
    )
    assert problems == [], "\n".join(problems)
    assert states["done"] > expected // 2, f"most items should finish despite the kills: {dict(states)}"
