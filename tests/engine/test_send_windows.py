"""The trailing windows that admit each request, alone and against plausible gateways, on virtual time."""

from __future__ import annotations

import math

import pytest
from gateway_windows import Gateway, Kind, Reports, SimClock, most_in_any, simulate

from relaybatch.engine.send_windows import JITTER_MARGIN_SECONDS, SendWindows, burst_size


def send_whenever_allowed(
    windows: SendWindows, seconds: float, per_minute: float, per_second: float
) -> list[float]:
    """Sends from t=0 for ``seconds``, each as early as the windows allow."""
    sent: list[float] = []
    now = 0.0
    while True:
        now = windows.next_send_at(now, per_minute, per_second)
        if now >= seconds:
            return sent
        windows.record(now)
        sent.append(now)


def test_the_minute_holds_the_limit_over_sixty_seconds_plus_the_margin() -> None:
    windows = SendWindows(margin=0.5)
    for at in range(120):
        windows.record(at * 0.01)  # 120 sends in the first 1.2 s

    assert windows.count(1.2) == 120
    assert windows.minute_due(1.2, 120) == pytest.approx(60.5)  # the first send leaves
    assert windows.minute_due(1.2, 121) == -math.inf  # room now
    assert windows.minute_due(1.2, 119.5) == pytest.approx(60.5)  # 119 at most
    assert windows.minute_due(1.2, 119) == pytest.approx(60.51)  # 118 at most: two leave
    assert windows.count(60.5) == 119


def test_the_second_spaces_sends_evenly_at_the_pace() -> None:
    assert burst_size() == 1
    assert burst_size(3.7) == 3
    windows = SendWindows()

    sent = send_whenever_allowed(windows, 2.0, per_minute=1200, per_second=20.0)

    assert sent == pytest.approx([index * 0.05 for index in range(40)])
    assert most_in_any(sent, 1.0) == 20


def test_a_configured_burst_sends_that_many_together() -> None:
    windows = SendWindows()
    sent: list[float] = []
    now = 0.0
    while now < 2.0:
        now = windows.next_send_at(now, None, 20.0, burst=10)
        windows.record(now)
        sent.append(now)
    assert sent[:10] == [0.0] * 10 and sent[10:20] == pytest.approx([0.5] * 10)


def test_sends_that_go_a_little_late_keep_to_the_timetable() -> None:
    # A busy event loop lets each batch go 20 ms after the rule allowed it: counted as sent on
    # time, the minute still carries the whole pace; a send an hour late starts a new timetable.
    windows = SendWindows()
    sent: list[float] = []
    now = 0.0
    while now < 60.0:
        due = windows.due(now, None, 20.0)
        now = max(now, due) + 0.02
        windows.record(now, due)
        sent.append(now)
    assert len(sent) >= 1200

    windows.record(3600.0)  # nobody waited: a new timetable from here
    assert windows.next_send_at(3600.0, None, 20.0) == pytest.approx(3600.05)


def test_over_two_minutes_nearly_twice_the_limit_goes_and_no_sixty_seconds_hold_more() -> None:
    windows = SendWindows()

    sent = send_whenever_allowed(windows, 120.0, per_minute=1200, per_second=20.0)

    assert len(sent) >= 2 * 1200 * 0.995
    # (less a microsecond: a send exactly 60.5 s after another is outside its window)
    assert most_in_any(sent, 60.0 + JITTER_MARGIN_SECONDS - 1e-6) == 1200


def test_after_a_pause_sends_resume_one_at_a_time_at_the_pace() -> None:
    windows = SendWindows()
    windows.record(0.0)

    windows.ramp_from(10.0, per_second=20.0)
    sent = send_whenever_allowed(windows, 10.26, per_minute=1200, per_second=20.0)

    assert sent == pytest.approx([10.0, 10.05, 10.1, 10.15, 10.2, 10.25])


def test_bursts_known_to_pass_let_sends_held_back_by_the_minute_catch_up() -> None:
    windows = SendWindows()
    for index in range(60):
        windows.record(index / 60)  # 60 in the first second: the gateway admitted them
    windows.allow_bursts(windows.densest(1.0), now=1.0)

    # The minute (60 per minute, 1 per second) holds everything until 60.5 s; by then the saved
    # time allows the first second's 60 to follow as fast as the minute frees them.
    sent = send_whenever_allowed(windows, 61.5, per_minute=60, per_second=1.0)
    assert sent == pytest.approx([60.5 + index / 60 for index in range(60)])

    windows.ramp_from(100.0, per_second=1.0)  # after a pause: one at a time again
    assert windows.next_send_at(100.0, None, 1.0) == 100.0
    windows.record(100.0)
    assert windows.next_send_at(100.0, None, 1.0) == pytest.approx(101.0)


def test_the_densest_second_of_the_minute() -> None:
    windows = SendWindows()
    for at in [0.0, 0.1, 0.2, 1.5, 1.6, 1.7, 1.8, 2.4, 60.0]:  # all within the trailing 60.5 s
        windows.record(at)
    assert windows.densest(1.0) == 5  # 1.5 .. 2.4
    windows.count(70.0)  # the first eight have left the window
    assert windows.densest(1.0) == 1


def test_a_limit_below_one_per_second_spaces_sends_over_the_minute() -> None:
    sent = send_whenever_allowed(SendWindows(), 60.0, per_minute=6, per_second=0.1)
    assert sent == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0, 50.0])


MINUTE_KINDS: list[Kind] = ["sliding", "fixed"]
KNOWN: list[Reports] = ["reported", "configured"]


@pytest.mark.parametrize("rpm", [120, 1200])
@pytest.mark.parametrize("reports", KNOWN)
@pytest.mark.parametrize("kind", [*MINUTE_KINDS, "sliding+second-bucket"])
async def test_a_known_limit_costs_no_429_with_arrivals_jittered_within_the_margin(
    kind: Kind, reports: Reports, rpm: int
) -> None:
    clock = SimClock()

    outcome = await simulate(Gateway(kind, rpm), reports, 120.0, clock, jitter=0.45)

    assert outcome.refused == 0
    assert outcome.admitted_within(120.0) >= 2 * rpm * 0.99


@pytest.mark.parametrize("reports", KNOWN)
@pytest.mark.parametrize("kind", ["sliding+second-window", "fixed+second-window"])
async def test_a_known_limit_costs_no_429_against_a_strict_per_second_window_on_a_perfect_clock(
    kind: Kind, reports: Reports
) -> None:
    # Evenly spaced sends sit exactly at the edge of a strict one-second window of qps requests:
    # met when arrivals keep the spacing exactly (2 per second: 0.5 s is exact in binary), broken
    # by any jitter (at 20 per second float rounding alone puts a 21st send in some second).
    rpm = 120
    clock = SimClock()

    outcome = await simulate(Gateway(kind, rpm), reports, 120.0, clock)

    assert outcome.refused == 0
    assert outcome.admitted_within(120.0) >= 2 * rpm * 0.99


@pytest.mark.parametrize("rpm", [120, 1200])
@pytest.mark.parametrize("kind", MINUTE_KINDS)
async def test_a_limit_named_only_in_a_429_costs_one_and_the_minute_is_used(kind: Kind, rpm: int) -> None:
    clock = SimClock()

    outcome = await simulate(Gateway(kind, rpm), "only-429", 120.0, clock, jitter=0.45)

    assert outcome.refused == 1
    assert outcome.admitted_within(120.0) >= 2 * rpm * 0.99


async def test_against_a_per_second_meter_a_limit_named_only_in_a_429_costs_one_climb_burst() -> None:
    # The climb sends a rung's requests at full speed: a gateway metering seconds refuses what
    # is in flight beyond its second (here 64 workers against 2 per second) once, then none.
    clock = SimClock()

    outcome = await simulate(Gateway("sliding+second-bucket", 120), "only-429", 120.0, clock)

    refused_at = [at - outcome.started for at, status in outcome.arrivals if status == 429]
    assert len(refused_at) == 3
    assert max(refused_at) - min(refused_at) < 1.0  # one burst
    assert outcome.admitted_within(120.0) >= 2 * 120 * 0.98


@pytest.mark.parametrize("rpm", [120, 1200])
@pytest.mark.parametrize("kind", MINUTE_KINDS)
async def test_an_earlier_runs_requests_in_the_window_cost_no_429_when_the_remaining_count_is_reported(
    kind: Kind, rpm: int
) -> None:
    # A resumed run (or another process on the key) starts with the window nearly full of
    # requests it did not send: its own send times know nothing of them, the remaining count does.
    clock = SimClock()
    gateway = Gateway(kind, rpm)
    earlier = rpm - 5
    for index in range(earlier):
        gateway.answer(clock.now - 20.0 + 20.0 * index / earlier)

    outcome = await simulate(gateway, "reported", 120.0, clock)

    assert outcome.refused == 0
    assert outcome.admitted_within(120.0) > rpm  # and the run goes on as the window frees


def test_memory_follows_the_window_not_the_run_whether_a_limit_is_known_or_not() -> None:
    """Before, with no limit known nothing ever left: a 1,000,000-item run kept every send time
    (about 40 MB, issue 19 target 2)."""
    unknown, known = SendWindows(), SendWindows()
    for index in range(300_000):  # 100 sends a second for 50 minutes
        at = index * 0.01
        unknown.record(at)
        known.record(known.next_send_at(at, 12_000, 200.0))

    in_the_span = 6_050  # 60.5 s at 100 a second
    assert unknown.held() <= in_the_span + 64 and known.held() <= in_the_span + 64
    assert unknown.count(3000.0) == 6_049  # sent after 2,939.5: 2,939.51 .. 2,999.99
    # what is kept answers as the whole history would: the 50th oldest of them has to leave
    assert unknown.minute_due(3000.0, 6_000) == pytest.approx(2939.51 + 0.49 + 60.5)
