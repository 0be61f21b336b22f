"""Deployments and cron schedules come from configs/deployments.yaml and register on a work pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from relaybatch.flows.deployments import DEFAULT_CONFIG, load_deployments, runner_deployments
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_file_loads_with_cron_schedules() -> None:
    config = load_deployments(DEFAULT_CONFIG)

    crons = {spec.name: spec.cron for spec in config.deployments}
    assert crons["nightly-demo"] == "0 2 * * *"
    assert crons["weekly-cost-report"] == "0 7 * * 1"
    assert config.work_pool == "relaybatch-local"


async def test_deployment_objects_carry_schedules_and_absolute_paths() -> None:
    deployments = await runner_deployments(load_deployments(DEFAULT_CONFIG), base=REPO_ROOT)

    nightly = next(d for d in deployments if d.name == "nightly-demo")
    assert nightly.entrypoint == "relaybatch.flows.run_manifest.run_manifest"
    assert [s.schedule.cron for s in nightly.schedules] == ["0 2 * * *"]  # type: ignore[union-attr]
    assert nightly.parameters["manifest"] == str(REPO_ROOT / "configs" / "demo.csv")
    shard = next(d for d in deployments if d.name == "nightly-shard")
    assert shard.schedules == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deployments:\n  - {name: a, flow: nope}\n", "unknown flow 'nope'"),
        ("deployments:\n  - {name: a, flow: run-manifest, cron: 'every day'}\n", "cron"),
        ("deployments:\n  - {name: a, flow: run-manifest, colour: red}\n", "colour"),
        ("deployments:\n  - {name: a, flow: cost-report}\n  - {name: a, flow: cost-report}\n", "twice: a"),
        ("deployments: [", "not valid YAML"),
        (
            "deployments:\n  - name: a\n    flow: run-manifest\n    interval: -5\n",
            ":4: deployments.0.interval",
        ),
        (
            "deployments:\n  - name: a\n    flow: run-manifest\n    rrule: 'FREQ=SOMETIMES'\n",
            ":2: deployments.0",
        ),
        (
            "deployments:\n  - name: a\n    flow: run-manifest\n    cron: '0 2 * * *'\n    interval: 60\n",
            "one schedule",
        ),
        (
            "deployments:\n  - name: a\n    flow: run-manifest\n    every: 60\n",
            ":4: deployments.0.every: not a",
        ),
        (
            "deployments:\n  - name: a\n    flow: run-manifest\n    catch_up: all\n",
            ":4: deployments.0.catch_up",
        ),
    ],
)
def test_a_bad_deployments_file_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as error:
        load_deployments(path)
    assert str(path) in str(error.value)


def test_deploy_without_a_server_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # No server from anywhere: not the environment, nor a profile, nor the session's test server
    # (prefect_harness enters its URL into Prefect's settings once an earlier test started it).
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        result = CliRunner().invoke(app, ["deploy"])
    assert result.exit_code == 1
    assert "prefect server start" in result.output


@pytest.mark.usefixtures("prefect_harness")
def test_deploy_registers_every_deployment_with_its_schedule_on_the_pool() -> None:
    from prefect import get_client

    result = CliRunner().invoke(app, ["deploy", "--pool", "relaybatch-test-pool"])

    assert result.exit_code == 0, result.output
    assert "deployed: run-manifest/nightly-demo (work pool relaybatch-test-pool)" in result.output
    with get_client(sync_client=True) as client:
        pool = client.read_work_pool("relaybatch-test-pool")
        nightly = client.read_deployment_by_name("run-manifest/nightly-demo")
        report = client.read_deployment_by_name("cost-report/weekly-cost-report")
    assert pool.type == "process"
    assert nightly.work_pool_name == "relaybatch-test-pool"
    assert [s.schedule.cron for s in nightly.schedules] == ["0 2 * * *"]  # type: ignore[union-attr]
    assert [s.schedule.cron for s in report.schedules] == ["0 7 * * 1"]  # type: ignore[union-attr]
    assert nightly.job_variables == {"working_dir": str(Path.cwd().resolve())}


async def test_interval_and_rrule_schedules_and_the_catch_up_policy(tmp_path: Path) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text(
        "deployments:\n"
        "  - {name: every-minute, flow: run-manifest, interval: 60, parameters: {manifest: a.csv}}\n"
        "  - name: nightly\n"
        "    flow: run-manifest\n"
        "    rrule: 'FREQ=DAILY;BYHOUR=2;BYMINUTE=0'\n"
        "    timezone: Europe/Paris\n"
        "    catch_up: latest\n"
        "    parameters: {manifest: a.csv}\n"
    )
    minute, nightly = await runner_deployments(load_deployments(path), base=tmp_path)
    assert minute.schedules[0].schedule.interval.total_seconds() == 60  # type: ignore[union-attr]
    assert minute.parameters["catch_up"] == "once"  # the default: one late run for all missed
    assert nightly.schedules[0].schedule.rrule.endswith("FREQ=DAILY;BYHOUR=2;BYMINUTE=0")  # type: ignore[union-attr]
    assert nightly.schedules[0].schedule.timezone == "Europe/Paris"  # type: ignore[union-attr]
    assert nightly.parameters["catch_up"] == "latest"
