"""The fault suite: a mixed manifest (every kind) under injected faults, over a real socket.

Transient faults (500, 529, 429, connections dropped before or after processing, bodies cut in
half, padded slow answers) must leave every item terminal with its reason. Answers that cannot
succeed on a retry (400, 401, 402, 403, 404) must never be followed by the same request again:
checked on the wire, request by request, by the recorder in front of the emulator.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from proof_crash import mixed_manifest, run_to_end, runner_env
from proof_served import Served, config_with, served_emulator

from relaybatch.manifests import load_items

KEY = "rb-proof-fault-key"
NEVER_RETRY = {400, 401, 402, 403, 404}
TERMINAL = {"done", "failed", "uncertain", "cancelled"}
# Image answers take long enough that the emulator pads them with whitespace before the JSON.
PADDED_IMAGES = {
    "padding": {"first_seconds": 0.05, "interval_seconds": 0.05},
    "images": {"upstream_seconds": 0.3},
}


# The call routes (creates, polls, downloads); the catalog and pricing routes are left alone.
CALL_ROUTES = [
    "/v1/chat/",
    "/v1/responses",
    "/v1/messages",
    "/v1beta/",
    "/v1/images/",
    "/v2/videos",
    "/v1/videos/",
    "/v1/tasks/",
    "/v1/typedjudge",
    "/v1/websearch/",
]


def faults(*rules: tuple[str, float], seed: int = 11, paths: list[str] | None = None) -> dict[str, Any]:
    return {
        "seed": seed,
        "rules": [{"fault": fault, "rate": rate, "paths": paths or []} for fault, rate in rules],
    }


def stored_items(run_dir: Path) -> list[dict[str, Any]]:
    connection = sqlite3.connect(f"file:{run_dir / 'checkpoint.sqlite'}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        rows = connection.execute("select job, item_id, kind, state, last_error, result from items")
        return [dict(row) for row in rows]
    finally:
        connection.close()


def is_create(method: str, target: str) -> bool:
    """Billed creates: every POST, and web searches (billed GETs). Other GETs are polls and downloads."""
    return method == "POST" or target.startswith("/v1/websearch/")


def retried_after_final_answer(
    served: Served, *, creates: bool = True, final_statuses: frozenset[int] = frozenset(NEVER_RETRY)
) -> list[str]:
    """Requests sent again after the same request got an answer that cannot change on a retry
    (creates, or with ``creates=False`` polls and downloads, whose one final answer is a 404)."""
    final: dict[tuple[str, str, str], int] = {}
    problems = []
    for exchange in served.recorder.exchanges:
        if is_create(exchange.method, exchange.target) != creates:
            continue
        key = (exchange.method, exchange.target, exchange.body_hash)
        if key in final:
            problems.append(f"{exchange.method} {exchange.target} resent after {final[key]}")
        if exchange.status in final_statuses:
            final[key] = exchange.status
    return problems


def run_under(
    config_faults: dict[str, Any], tmp_path: Path, **config: Any
) -> tuple[Served, list[dict[str, Any]], Any]:
    manifest = mixed_manifest(tmp_path, copies=1, name="faulty")
    # The client's own retries back off as the runner's engine retries do (proof_runner.py: 0.05 s
    # up to 0.5 s) instead of 1 s doubling up to a minute: the same attempts, less waiting between.
    with served_emulator(config_with(demo_key=KEY, faults=config_faults, **config)) as served:
        summary = run_to_end(
            manifest,
            tmp_path / "run",
            runner_env(
                served,
                KEY,
                PROOF_CONCURRENCY="4",
                RELAYBATCH_RETRY__BASE_DELAY="0.05",
                RELAYBATCH_RETRY__MAX_DELAY="0.5",
            ),
        )
    assert len(stored_items(tmp_path / "run")) == len(load_items(manifest))
    return served, stored_items(tmp_path / "run"), summary


def test_transient_faults_leave_every_item_terminal_with_its_reason(tmp_path: Path) -> None:
    rules = faults(
        ("status=500", 0.08),
        ("status=529", 0.08),
        ("status=429", 0.08),
        ("drop=before", 0.05),
        ("drop=after", 0.04),
        ("truncate", 0.04),
        ("latency=0.05", 0.1),
    )
    # An injected 429 names the account's limit in its body, and the runner paces to it: the demo
    # account has none, so the emulator would name its fallback of 120 rpm (two calls a second for
    # the whole run). The account's limit is set far above what four calls in flight can reach.
    served, items, _ = run_under(rules, tmp_path, media=PADDED_IMAGES, rate_limit_rpm=6000)

    statuses = Counter(exchange.status for exchange in served.recorder.exchanges)
    assert {500, 529, 429, 0} <= set(statuses), f"faults did not all fire: {statuses}"
    states = Counter(item["state"] for item in items)
    assert set(states) <= TERMINAL, f"items left unfinished: {dict(states)}"
    unexplained = [
        f"{i['job']}/{i['item_id']}" for i in items if i["state"] != "done" and not i["last_error"]
    ]
    assert unexplained == [], f"terminal without a reason: {unexplained}"
    assert all(item["result"] for item in items if item["state"] == "done")
    assert states["done"] >= len(items) // 2, (
        f"transient faults should mostly be retried through: {dict(states)}"
    )
    assert retried_after_final_answer(served) == []


def test_answers_that_cannot_succeed_are_never_retried(tmp_path: Path) -> None:
    # Pricing is fetched before any call; a 403 there is a user error that stops the run at once.
    rules = faults(("status=400", 0.1), ("status=403", 0.1), ("status=404", 0.1), paths=CALL_ROUTES)
    served, items, _ = run_under(rules, tmp_path)

    statuses = Counter(exchange.status for exchange in served.recorder.exchanges)
    assert {400, 403, 404} <= set(statuses), f"faults did not all fire: {statuses}"
    assert retried_after_final_answer(served) == []
    states = Counter(item["state"] for item in items)
    assert set(states) <= TERMINAL, f"items left unfinished: {dict(states)}"
    failed = [item for item in items if item["state"] == "failed"]
    # Polls and downloads that got a final answer end the item too (see the test below).
    assert failed and all(item["last_error"] for item in failed)


def test_a_refused_key_or_an_empty_balance_stops_the_run_without_resending(tmp_path: Path) -> None:
    for fault, message in (("status=401", "401"), ("status=402", "402")):
        folder = tmp_path / fault.replace("=", "-")
        folder.mkdir()
        rules = {"seed": 1, "rules": [{"fault": fault, "at": [2], "paths": ["/v1/chat/completions"]}]}
        served, items, summary = run_under(rules, folder)

        assert summary["stopped"], f"{fault}: the run did not stop: {summary}"
        assert message in summary["stopped"].lower()
        assert retried_after_final_answer(served) == []
        states = Counter(item["state"] for item in items)
        assert "sending" not in states, f"{fault}: items stuck in sending: {dict(states)}"


def test_a_poll_answered_404_is_not_polled_again_and_one_answered_400_is(tmp_path: Path) -> None:
    # The first poll of every V1 task answers 400 (paid work is not given up on one answer: it is
    # polled again and finishes); the first two of every V2 video answer 404 (the gateway does not
    # know the id: the one definitive poll answer, never asked again).
    rules = {
        "seed": 3,
        "rules": [
            {"fault": "status=400", "at": [1], "paths": ["/v1/tasks/"]},
            {"fault": "status=404", "at": [1, 2], "paths": ["/v2/videos/"]},
        ],
    }
    served, items, _ = run_under(rules, tmp_path)

    statuses = Counter(exchange.status for exchange in served.recorder.exchanges)
    assert {400, 404} <= set(statuses), f"faults did not fire: {statuses}"
    assert retried_after_final_answer(served, creates=False, final_statuses=frozenset({404})) == []
    tasks = [item for item in items if item["kind"] == "video_v1"]
    assert tasks and all(item["state"] == "done" for item in tasks), tasks
