"""Long video batches that always finish (issue 28), against the emulator's fault modes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from engine_fakes import FAST, FAST_MEDIA
from engine_items import video, video_v1
from pydantic import SecretStr
from starlette.applications import Starlette
from typer.testing import CliRunner

from relaybatch.cli import app as cli_app
from relaybatch.costs.dashboard import render_dashboard
from relaybatch.costs.dashboard_data import load_dashboard
from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.clock import Clock
from relaybatch.engine import CheckpointStore, EngineSettings, PollSettings, RunSummary, execute
from relaybatch.engine.kinds import poll_task, poll_video
from relaybatch.engine.media import MediaFiles
from relaybatch.engine.poll_plan import RenderJob, RenderSettings
from relaybatch.engine.render_slots import LocalRenderSlots
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.manifests import open_manifest
from relaybatch.run import stored_settings
from relaybatch.run.assemble import engine_settings
from relaybatch.settings import EMULATOR_DEMO_KEY


def app_with(**video_settings: Any) -> Starlette:
    config = load_config()
    config.media = {"video": {**FAST_MEDIA["video"], **video_settings}}
    return create_app(config)


async def run_demo(
    app: Starlette,
    store: CheckpointStore,
    settings: EngineSettings = FAST,
    slots: LocalRenderSlots | None = None,
) -> RunSummary:
    """One execution on ``app`` as the demo account (the engine's retries only)."""
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=app),
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        return await execute(store, client, settings=settings, slots=slots)


@pytest.fixture
def run_on() -> Callable[..., Any]:
    """run_on(app, store, settings=FAST) -> RunSummary."""
    return run_demo


async def test_an_unknown_running_status_is_not_terminal_and_kept_verbatim(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with(running_status="rendering", render_seconds_base=0.4)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(n) for n in range(3)])
    seen: list[str] = []
    original = store.apply

    def watch(changes: list[Any]) -> Any:
        for change in changes:
            remote = ((change.fields or {}).get("result") or {}).get("remote") or {}
            if remote.get("status"):
                seen.append(remote["status"])
        return original(changes)

    store.apply = watch  # type: ignore[method-assign]
    summary = await run_on(app, store)
    store.close()
    assert summary.counts == {"done": 3}
    assert "rendering" in seen


def stuck_settings(on_deadline: str = "keep") -> EngineSettings:
    jobs = {"job": RenderJob(render_deadline_seconds=0.6, on_deadline=on_deadline)}  # type: ignore[arg-type]
    poll = PollSettings(initial_seconds=0.02, max_seconds=0.05, stuck_seconds=0.1)
    return replace(FAST, poll=poll, renders=RenderSettings(jobs))


async def test_a_stuck_render_ends_the_run_by_its_deadline_with_the_item_named(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with()
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(1), video(2, prompt="emulator:stuck")])
    summary = await run_on(app, store, stuck_settings())
    assert summary.counts == {"done": 1, "polling": 1}
    assert summary.stopped is not None and "stuck past their render deadline (video-2" in summary.stopped
    row = store.item(video(2, prompt="emulator:stuck").key)
    assert row["last_error"].startswith("stuck: rendering for ")
    assert "last status in_progress" in row["last_error"]
    assert row["result"]["remote"]["status"] == "in_progress" and row["result"]["polled_at"]

    # A resume polls it again (never creates it again) and ends the same way.
    counts = app.state.emulator.requests.counts
    video_id = row["remote_id"]
    polls = counts.total("GET", f"/v2/videos/{video_id}")
    again = await run_on(app, store, stuck_settings())
    store.close()
    assert again.sent == 0 and again.counts == {"done": 1, "polling": 1}
    assert again.stopped is not None and "stuck" in again.stopped
    assert counts.total("GET", f"/v2/videos/{video_id}") > polls  # polled again
    assert counts.total("POST", "/v2/videos") == 2  # never created again


async def test_the_cancel_policy_cancels_a_stuck_render_and_says_why(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with()
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(2, prompt="emulator:stuck")])
    summary = await run_on(app, store, stuck_settings("cancel"))
    row = store.item(video(2, prompt="emulator:stuck").key)
    store.close()
    assert summary.counts == {"cancelled": 1} and summary.stopped is None
    assert row["last_error"].startswith("cancelled at its render deadline: stuck: rendering for ")
    [video_job] = app.state.media.videos.values()
    assert video_job.cancelled_at is not None  # DELETE reached the gateway


def creates_refused(app: Starlette) -> int:
    """POSTs to /v2/videos that were not charged: refused (here, by the cap on renders in flight)."""
    state = app.state.emulator
    charged = sum(1 for charge in state.ledger if charge.route == "/v2/videos")
    return int(state.requests.counts.total("POST", "/v2/videos")) - charged


class PeakWatch(LocalRenderSlots):
    """The run's slots, noting the most renders the gateway had in flight at each create."""

    def __init__(self, app: Starlette, **caps: Any) -> None:
        super().__init__(**caps)
        self.app, self.gateway_peak = app, 0

    async def take(self, job: str, model: str) -> bool:
        media = getattr(self.app.state, "media", None)
        if media is not None:
            now = self.app.state.emulator.clock.now()
            rendering = sum(1 for video in media.videos.values() if video.rendering(now))
            self.gateway_peak = max(self.gateway_peak, rendering)
        return await super().take(job, model)


async def test_a_known_cap_is_never_exceeded_and_never_refused(tmp_path: Path) -> None:
    app = app_with(max_in_flight=3, render_seconds_base=0.2)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(n) for n in range(12)])
    slots = PeakWatch(app, per_model={"relay-video-2": 3})
    summary = await run_demo(app, store, slots=slots)
    store.close()
    assert summary.counts == {"done": 12}
    assert creates_refused(app) == 0
    assert slots.peak["relay-video-2"] == 3 and slots.gateway_peak <= 3


async def test_an_unknown_cap_is_learned_from_the_concurrency_error_with_no_blind_retries(
    tmp_path: Path,
) -> None:
    app = app_with(max_in_flight=3, render_seconds_base=0.2)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(n) for n in range(12)])
    slots = PeakWatch(app)
    summary = await run_demo(app, store, slots=slots)
    store.close()
    assert summary.counts == {"done": 12}
    assert slots.learned == {"relay-video-2": 3}  # the cap the refusal named
    # Refused only while it learned: at most the creates in flight when the cap was first hit
    # (8 workers), never once per item nor again after.
    assert 1 <= creates_refused(app) < 8
    assert slots.peak["relay-video-2"] <= 3 + 8


async def test_a_job_cap_holds_only_that_job(tmp_path: Path) -> None:
    app = app_with(render_seconds_base=0.2)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(n) for n in range(6)])
    slots = PeakWatch(app, per_job={"job": 2})
    summary = await run_demo(app, store, slots=slots)
    store.close()
    assert summary.counts == {"done": 6}
    assert slots.peak["relay-video-2"] == 2 and slots.gateway_peak <= 2


def test_the_manifest_sets_render_settings_and_caps(tmp_path: Path) -> None:
    manifest = tmp_path / "videos.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "run": {"max_in_flight": {"relay-video-2": 40}},
                "jobs": [
                    {
                        "name": "clips",
                        "kind": "video",
                        "model": "relay-video-2",
                        "prompt": "{text}",
                        "items": [{"text": "waves"}],
                        "video": {
                            "expected_render_seconds": 120,
                            "render_deadline_seconds": 1800,
                            "on_deadline": "cancel",
                            "max_in_flight": 5,
                        },
                    }
                ],
            }
        )
    )
    saved = json.loads(json.dumps(stored_settings(open_manifest(manifest), None)))  # as the store keeps it
    renders = engine_settings(saved).renders
    assert renders.max_in_flight_per_model == {"relay-video-2": 40}
    assert renders.job("clips") == RenderJob(120, 1800, "cancel", 5)
    assert renders.job("other") == RenderJob()


async def test_status_lists_open_remote_work_with_age_last_status_and_last_poll(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with()
    store = CheckpointStore(tmp_path / "stuck-run" / "checkpoint.sqlite")
    store.add_items([video(1), video(2, prompt="emulator:stuck")])
    await run_on(app, store, stuck_settings())
    store.close()

    result = CliRunner().invoke(
        cli_app, ["status", "stuck-run", "--runs-dir", str(tmp_path), "--older-than", "0"], terminal_width=250
    )
    assert result.exit_code == 0, result.output
    assert "remote work open for more than 0:00:00" in result.output
    [line] = [line for line in result.output.splitlines() if "video-2" in line and "│" in line]
    assert "0:00:0" in line and "in_progress" in line and "ago" in line and "stuck: rendering for" in line
    assert "video-1" not in result.output  # done
    assert "relaybatch cancel RUN --all-open" in result.output
    quiet = CliRunner().invoke(
        cli_app, ["status", "stuck-run", "--runs-dir", str(tmp_path)], terminal_width=250
    )
    assert "remote work open" not in quiet.output  # younger than the default 5 minutes

    # The dashboard names it too.
    data = load_dashboard(tmp_path, ["stuck-run"])
    [stuck] = data.stuck
    assert (stuck.job, stuck.item, stuck.last_status) == ("job", "video-2", "in_progress")
    assert 'data-stuck="stuck-run:video-2"' in render_dashboard(data, "runs")


def test_cancel_command_stops_running_renders_and_records_them(tmp_path: Path) -> None:
    from relaybatch.connect import EMBEDDED_BASE_URL, embedded_emulator

    app = embedded_emulator()  # the gateway `relaybatch cancel` reaches without a base URL
    store = CheckpointStore(tmp_path / "clips" / "checkpoint.sqlite")
    items = [video(1, prompt="emulator:stuck"), video(2, prompt="emulator:stuck"), video(3), video(4)]
    store.add_items(items)

    async def create_three() -> None:
        async with GatewayClient(
            EMBEDDED_BASE_URL, SecretStr(EMULATOR_DEMO_KEY), transport=httpx.ASGITransport(app=app)
        ) as client:
            for item in items[:3]:
                created = await client.video_create(item.request)
                store.transition(item.key, "sending", attempts=1)
                store.transition(item.key, "submitted", remote_id=created.id)

    asyncio.run(create_three())
    store.close()
    runner = CliRunner()
    refused = runner.invoke(cli_app, ["cancel", "clips", "--runs-dir", str(tmp_path)])
    assert refused.exit_code == 1 and "--all-open" in refused.output

    one = runner.invoke(cli_app, ["cancel", "clips", "video-1", "video-4", "--runs-dir", str(tmp_path)])
    assert one.exit_code == 0, one.output
    assert "cancelled 1 remote render(s): video-1" in one.output
    assert "kept video-4: not open remote work (it is pending)" in one.output
    every = runner.invoke(cli_app, ["cancel", "clips", "--all-open", "--runs-dir", str(tmp_path)])
    assert "cancelled 2 remote render(s): video-2, video-3" in every.output, every.output

    store = CheckpointStore(tmp_path / "clips" / "checkpoint.sqlite")
    states = {item.item_id: store.item(item.key)["state"] for item in items}
    assert states == {
        "video-1": "cancelled",
        "video-2": "cancelled",
        "video-3": "cancelled",
        "video-4": "pending",
    }
    assert store.item(items[0].key)["last_error"].startswith("cancelled with `relaybatch cancel`")
    store.close()


async def test_paid_renders_that_bring_nothing_fail_each_with_its_own_reason(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with()
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    empty, unsafe, broken = video(1, "emulator:empty"), video(2, "emulator:unsafe"), video(3, "emulator:fail")
    store.add_items([empty, unsafe, broken])
    summary = await run_on(app, store)
    reasons = {item.item_id: store.item(item.key)["last_error"] for item in (empty, unsafe, broken)}
    store.close()
    assert summary.counts == {"failed": 3}
    assert "completed without media" in reasons["video-1"] and "change the prompt" in reasons["video-1"]
    assert "refused by the provider's safety system" in reasons["video-2"]
    assert "moderation_blocked" in reasons["video-2"]
    assert reasons["video-3"].startswith("video failed: the upstream provider could not render")


async def test_content_that_expired_before_the_download_says_so(tmp_path: Path) -> None:
    config = load_config()
    config.media = {"video": {**FAST_MEDIA["video"], "expires_after_seconds": 60}}
    app = create_app(config, clock=Clock(start=1_800_000_000.0))
    async with GatewayClient(
        "http://emulator.local", SecretStr(EMULATOR_DEMO_KEY), transport=httpx.ASGITransport(app=app)
    ) as client:
        created = await client.video_create(video(1).request)
        app.state.emulator.clock.advance(3600)  # finished long ago; its content kept 60 s
        answer = await poll_video(client, created.id, MediaFiles(tmp_path, "key"))
    assert answer.status == "failed" and answer.error is not None
    assert "expired before it was downloaded" in answer.error and "as a new item" in answer.error


def test_plan_states_each_video_jobs_poll_plan_at_the_runs_limit(tmp_path: Path) -> None:
    manifest = tmp_path / "clips.yaml"
    rows = [{"scene": f"scene {n}", "seconds": str((4, 8, 12)[n % 3])} for n in range(200)]
    manifest.write_text(
        yaml.safe_dump(
            {
                "run": {"rate_limit_rpm": 1200, "max_in_flight": {"relay-video-2": 40}},
                "jobs": [
                    {
                        "name": "clips",
                        "kind": "video",
                        "model": "relay-video-2",
                        "request": {"seconds": "{seconds}"},
                        "prompt": "{scene}",
                        "items": rows,
                    }
                ],
            }
        )
    )
    result = CliRunner().invoke(
        cli_app, ["plan", str(manifest), "--runs-dir", str(tmp_path)], terminal_width=250
    )
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("│ clips") and "min" in line]
    # 67, 67 and 66 videos of 4, 8 and 12 s: 50, 90 and 130 s expected (89.8 s on average); 40 in
    # flight at once (the cap): 200 x 89.8 / 40 + the longest 130 s = 579 s.
    assert [cell.strip() for cell in line.strip("│").split("│")] == [
        "clips", "200", "1 min 30 s", "40", "2", "45 s", "45 s", "9 min 39 s",
    ]  # fmt: skip
    assert "poll plan at 1200 rpm (run.rate_limit_rpm)" in result.output


@pytest.mark.slow
def test_a_run_of_only_stuck_renders_ends_with_exit_1_the_advice_and_the_resume_command(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "stuck.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "run": {"name": "stuck-demo"},
                "jobs": [
                    {
                        "name": "clips",
                        "kind": "video",
                        "model": "relay-video-2",
                        "prompt": "{scene}",
                        "items": [{"id": "forever", "scene": "a spinning wheel emulator:stuck"}],
                        "video": {"expected_render_seconds": 2, "render_deadline_seconds": 1},
                    }
                ],
            }
        )
    )
    command = [sys.executable, "-m", "relaybatch", "run", str(manifest), "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr + done.stdout
    output = done.stdout + done.stderr
    assert "1 render(s) stuck past their render deadline (forever)" in output
    assert "relaybatch cancel RUN --all-open" in output
    assert f"resume with: relaybatch run {manifest}" in output
    assert "Traceback" not in output


class FirstLinkExpired(httpx.AsyncBaseTransport):
    """The emulator, except that the first download of each V1 task's file link is refused 403, as
    a presigned link that expired between the poll and the download is."""

    def __init__(self, app: Starlette) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.refused: set[str] = set()
        self.task_polls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.task_polls += path.startswith("/v1/tasks/")
        if (
            path.endswith("/content")
            and path.startswith("/v1/videos/generations/")
            and path not in self.refused
        ):
            self.refused.add(path)
            body = {"error": {"type": "permission_error", "code": "403", "message": "link expired"}}
            return httpx.Response(403, json=body)
        return await self.inner.handle_async_request(request)


async def test_an_expired_task_link_is_refreshed_by_one_more_poll(tmp_path: Path) -> None:
    transport = FirstLinkExpired(app_with())
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=transport,
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        created = await client.video_v1_create(video_v1(1).request)
        await asyncio.sleep(0.3)  # the fast emulator's task is done by then
        # One poll of the engine: the link it read is refused, it reads the task again and the
        # fresh link works, so the task is done at this poll (no failed poll, no wait).
        answer = await poll_task(client, created.remote_id, MediaFiles(tmp_path, "key"))
    assert answer.status == "done" and answer.result is not None
    assert len(transport.refused) == 1 and transport.task_polls == 2
    assert (tmp_path / answer.result["media_paths"][0]).read_bytes()[4:8] == b"ftyp"


async def test_work_waiting_for_slots_that_only_stuck_renders_hold_ends_the_run(tmp_path: Path) -> None:
    app = app_with()
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(1, prompt="emulator:stuck"), video(2)])
    settings = stuck_settings()
    summary = await run_demo(app, store, settings, slots=LocalRenderSlots(per_job={"job": 1}))
    store.close()
    assert summary.counts == {"polling": 1, "pending": 1}
    assert summary.stopped is not None and "stuck past their render deadline (video-1)" in summary.stopped
