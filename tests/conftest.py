"""Shared fixtures: the emulator app (and a fast one), a client on it, one Prefect harness a session."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
from relaybatch.gateway import GatewayClient
from relaybatch.settings import EMULATOR_DEMO_KEY
from tests.engine.engine_fakes import FAST_MEDIA

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def emulator_app() -> Starlette:
    return create_app(load_config())


@pytest.fixture
def fast_app() -> Starlette:
    """The emulator with media that finish in a fraction of a second."""
    config = load_config()
    config.media = FAST_MEDIA
    return create_app(config)


Cli = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`relaybatch` commands run in this process with no Prefect server configured (the CLI's own
    mode, whatever an earlier test set): each call gives the exit code and the output."""
    from typer.testing import CliRunner

    from relaybatch.cli import app

    monkeypatch.delenv("PREFECT_API_URL", raising=False)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args), terminal_width=400)
        return result.exit_code, result.output

    return run


@pytest.fixture
def fresh_emulator() -> Iterator[None]:
    """New embedded emulators for the test (the process keeps one per config file:
    relaybatch/connect.py), so what its runs meet (counts, the ledger, faults) starts from nothing."""
    from relaybatch.connect import forget_embedded_emulators

    forget_embedded_emulators()
    yield
    forget_embedded_emulators()


@pytest.fixture
def no_flow(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The run flow replaced by a recorder: a faulty manifest must never reach it."""
    import relaybatch.flows  # Prefect: imported only by the tests that ask for this

    entered: list[Path] = []

    async def recorder(manifest: Path, **kwargs: Any) -> None:
        entered.append(manifest)
        raise AssertionError("the run flow was entered for an invalid manifest")

    monkeypatch.setattr(relaybatch.flows, "run_manifest", recorder)
    return entered


@pytest.fixture
async def client(emulator_app: Starlette) -> AsyncIterator[GatewayClient]:
    transport = httpx.ASGITransport(app=emulator_app)
    async with GatewayClient(
        "http://emulator.local", SecretStr(EMULATOR_DEMO_KEY), transport=transport
    ) as gateway_client:
        yield gateway_client


HARNESS_GROUP = "prefect-harness"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How pytest-xdist shares the suite out (addopts: `--dist loadgroup`): a test module is one unit,
    so a module-scoped fixture (a Prefect server, an emulator) starts on one worker only, and every
    module with a test on the session's `prefect_harness` is one unit, so one worker starts that
    server, not each. On a worker, the units with slow tests come first: the minutes-long ones
    overlap from the start instead of ending the run alone. Runs before xdist reads the groups."""
    harness_modules = {item.path for item in items if "prefect_harness" in item.fixturenames}
    units: dict[str, str] = {}
    slow_units: set[str] = set()
    for item in items:
        unit = HARNESS_GROUP if item.path in harness_modules else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(unit))
        units[item.nodeid] = unit
        if item.get_closest_marker("slow") is not None:
            slow_units.add(unit)
    if hasattr(config, "workerinput"):  # the order the controller hands units out in
        items.sort(key=lambda item: units[item.nodeid] not in slow_units)  # stable: kept within a unit


def _child_pids() -> set[int]:
    """Live child processes of this test process, read from /proc (Linux)."""
    me = os.getpid()
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The parent pid is the 2nd field after the parenthesised command name.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            children.add(int(entry.name))
    return children


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One ephemeral Prefect server for every flow test, in a private PREFECT_HOME."""
    os.environ.update(
        {
            "PREFECT_HOME": str(tmp_path_factory.mktemp("prefect-home")),
            "PREFECT_LOGGING_TO_API_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
            "DO_NOT_TRACK": "1",
        }
    )
    from prefect.testing.utilities import prefect_test_harness

    # Start-up takes 15-40 s on an idle 2-core machine and over 100 s when other suites run
    # beside it. A harness that fails to start leaves its server process behind: stop it here.
    before = _child_pids()
    try:
        harness = prefect_test_harness(server_startup_timeout=300)
        harness.__enter__()
    except BaseException:
        for pid in _child_pids() - before:
            os.kill(pid, signal.SIGTERM)
        raise
    try:
        yield
    finally:
        harness.__exit__(None, None, None)


@pytest.fixture(scope="session", autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Whatever the suite starts (servers, workers) must be stopped by the suite."""
    before = _child_pids()
    yield
    leaked = _child_pids() - before
    assert not leaked, f"processes started by tests outlived the suite: {sorted(leaked)}"
