"""Work that waits at the limit is not "sent": stops and kills of `relaybatch run`, counted at the gateway.

At the shipped emulator's 120 requests a minute (``rb-standard-key``) most items wait for the
limiter. A Ctrl-C or SIGTERM must send nothing more (no request reaches the gateway 0.5 s after
the signal), exit 130 without waiting out the grace period, and leave nothing ``sending`` or
``uncertain``; the resume sends exactly the rest. A SIGKILL must leave "maybe billed" only items
whose create reached the gateway (no phantom). The same unlimited, with slow creates in flight.
Full size (20 kills per kind, seconds to exit): benchmarks/stop_at_the_limit.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from proof_served import config_with, served_emulator
from proof_stop import (
    STANDARD_KEY,
    UNLIMITED_KEY,
    creates,
    finish,
    kill_campaign,
    manifest,
    phantoms,
    received_items,
    start,
    states,
    stop_once,
)
from proof_stop import environment as runner_env

from relaybatch.emulator.config import FaultsConfig
from relaybatch.settings import STOP_GRACE_SECONDS

pytestmark = pytest.mark.slow

# The served emulator renders in a fraction of a second (FAST_MEDIA): the videos' first polls go
# a second after their creates are answered instead of at half the default guess (25 s), so the
# resume that ends a kill campaign does not wait for renders long done.
RENDER_SECONDS = 1.0

SLOW_CREATES = {
    "seed": 3,
    "rules": [{"fault": "latency=1.0", "rate": 1.0, "paths": ["/v1/chat/completions", "/v2/videos"]}],
}


def _stop_then_resume(tmp_path: Path, key: str, signum: int, *, faults: dict | None, after: int) -> None:
    path = manifest(tmp_path, "chat", 24)
    run_dir = tmp_path / "runs" / "at-the-limit"
    with served_emulator(config_with(faults=faults)) as served:
        env = runner_env(tmp_path, served, key)
        stop = stop_once(path, run_dir, served, env, "chat", signum=signum, after=after)

        assert stop.exit_code == 130, stop.output[-2000:]
        assert stop.late_requests == 0, f"{stop.late_requests} requests reached the gateway after the signal"
        assert stop.seconds_to_exit < STOP_GRACE_SECONDS, f"waited the grace: {stop.seconds_to_exit:.1f} s"
        assert "stopped at once" not in stop.output
        assert not {"sending", "uncertain"} & set(stop.states), stop.states
        sent = len(creates(served, "chat"))
        assert f"{sent} requests sent by this execution" in stop.output  # what the gateway received

        left = sum(count for state, count in stop.states.items() if state != "done")
        # The stop is the point; the resume only has to send exactly the rest, each once: at
        # 6,000 rpm and without slow answers, not at two a second or a second a create.
        account = served.state.account_for_key(key)
        assert account is not None
        account.rate_limit_rpm = 6000 if account.rate_limit_rpm else 0
        served.state.faults.replace(FaultsConfig())
        code, output = finish(start(path, env))

        assert code == 0, output[-2000:]
        assert set(states(run_dir).values()) == {"done"}
        assert len(creates(served, "chat")) - sent == left  # exactly the items not done
        assert max(received_items(served, "chat").values()) == 1  # none sent twice


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_at_120_rpm_sends_nothing_more_and_the_resume_the_rest(tmp_path: Path, signum: int) -> None:
    _stop_then_resume(tmp_path, STANDARD_KEY, signum, faults=None, after=6)


def test_a_stop_unlimited_lets_requests_in_flight_finish_and_starts_none(tmp_path: Path) -> None:
    _stop_then_resume(tmp_path, UNLIMITED_KEY, signal.SIGINT, faults=SLOW_CREATES, after=8)


def test_a_second_ctrl_c_counts_what_it_sent_and_leaves_no_phantom(tmp_path: Path) -> None:
    """Stopped at once with slow creates on the wire: those are uncertain (they reached the
    gateway), the summary counts them as sent (it said 0), and nothing else is maybe billed."""
    path = manifest(tmp_path, "chat", 24)
    run_dir = tmp_path / "runs" / "at-the-limit"
    slower = {"seed": 3, "rules": [{"fault": "latency=5.0", "rate": 1.0, "paths": ["/v1/chat/completions"]}]}
    with served_emulator(config_with(faults=slower)) as served:
        env = runner_env(tmp_path, served, UNLIMITED_KEY)
        stop = stop_once(path, run_dir, served, env, "chat", signum=signal.SIGINT, after=4, again_after=0.3)

        assert stop.exit_code == 130, stop.output[-2000:]
        assert "stopped at once (a second Ctrl-C)" in stop.output
        assert stop.late_requests == 0
        sent = len(creates(served, "chat"))
        assert f"{sent} requests sent by this execution" in stop.output, stop.output[-1500:]
        assert phantoms(run_dir, served, "chat") == []


@pytest.mark.parametrize(("kind", "key"), [("video", STANDARD_KEY), ("chat", STANDARD_KEY)])
def test_a_kill_at_120_rpm_leaves_maybe_billed_only_what_reached_the_gateway(
    tmp_path: Path, kind: str, key: str
) -> None:
    path = manifest(tmp_path, kind, 16, expected_render_seconds=RENDER_SECONDS)
    run_dir = tmp_path / "runs" / "at-the-limit"
    with served_emulator(config_with()) as served:
        env = runner_env(tmp_path, served, key)
        account = served.state.account_for_key(key)
        assert account is not None and account.rate_limit_rpm == 120

        def unlimited() -> None:
            # The kills at the limit are the point; the resume that ends the campaign (16 videos'
            # creates, polls and downloads at two a second) only has to finish every item with
            # nothing received twice, so the account's limit goes far above what it can reach.
            account.rate_limit_rpm = 6000

        kills = kill_campaign(
            path, run_dir, served, env, kind, kills=3, seed=25, longest_delay=3.0, before_resume=unlimited
        )

        # Before: every item waiting for the limiter (up to the concurrency, 16) per kill. Now only
        # a kill inside the item's last CPU steps, between its `sending` commit and its first byte
        # (docs/engine.md, "Sending"), can leave one: rare (1 in 80 kills measured), never more.
        assert max(kills.phantoms_per_kill) <= 1, kills
        assert kills.twice == []  # nothing paid twice
        # Every item whose create never reached the gateway was made by the resume.
        assert set(kills.final_states) <= {"done", "uncertain"}, kills.final_states


def test_a_kill_while_the_first_slow_create_is_answered_leaves_only_it_uncertain(tmp_path: Path) -> None:
    """The issue's second case: no limit known, creates take 3 s, a kill before the first answer.
    The limiter sends one request and waits for its answer; the others waited `sending` (16
    uncertain for 4 creates received). Now they are pending: only the create on the wire is."""
    path = manifest(tmp_path, "video", 16, expected_render_seconds=RENDER_SECONDS)
    run_dir = tmp_path / "runs" / "at-the-limit"
    slow = {"seed": 3, "rules": [{"fault": "latency=3.0", "rate": 1.0, "paths": ["/v2/videos"]}]}
    with served_emulator(config_with(faults=slow)) as served:
        env = runner_env(tmp_path, served, UNLIMITED_KEY)
        # The kills are the point; the resume that ends the campaign need not wait 3 s per create
        # (and the one probe at a time the limiter sends before a first answer): it runs unslowed.
        kills = kill_campaign(
            path,
            run_dir,
            served,
            env,
            "video",
            kills=2,
            seed=25,
            longest_delay=2.0,
            before_resume=lambda: served.state.faults.replace(FaultsConfig()),
        )

        assert kills.phantoms_per_kill == [0, 0], kills
        assert kills.sending_per_kill == [1, 1], kills  # the probe alone, whose create had arrived
        assert kills.twice == []
        assert kills.final_states == {"done": 14, "uncertain": 2}, kills.final_states
