"""`relaybatch emulator serve`: what it prints at start, and who may use the admin API."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorConfig, create_app
from relaybatch.emulator.serving import check_exposure, is_loopback
from relaybatch.errors import UserError
from tests.emulator.emulator_http import DEMO_KEY, bearer
from tests.emulator.served import run_serve, served_emulator

TOKEN = "admin-secret-1234"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert check_exposure(host, None) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "10.0.0.1", "example.internal"])
def test_hosts_beyond_loopback_need_an_admin_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(UserError, match="RELAYBATCH_EMULATOR_ADMIN_TOKEN"):
        check_exposure(host, None)
    warning = check_exposure(host, TOKEN)
    assert warning is not None and host in warning and TOKEN not in warning


@pytest.fixture
def guarded_app(shipped_config: EmulatorConfig) -> Starlette:
    return create_app(shipped_config.model_copy(deep=True), admin_token=TOKEN)


async def test_admin_token_guards_every_admin_route(guarded_app: Starlette) -> None:
    transport = httpx.ASGITransport(app=guarded_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator.test") as http:
        for method, path, body in [
            ("GET", "/_emulator/requests", None),
            ("GET", "/_emulator/ledger", None),
            ("GET", "/_emulator/accounts", None),
            ("POST", "/_emulator/accounts/demo/balance", {"usd": "5"}),
            ("GET", "/_emulator/clock", None),
            ("POST", "/_emulator/clock/advance", {"seconds": 1}),
            ("GET", "/_emulator/faults", None),
            ("PUT", "/_emulator/faults", {"rules": []}),
        ]:
            for headers in ({}, bearer(DEMO_KEY), bearer("wrong"), {"Authorization": TOKEN}):
                refused = await http.request(method, path, json=body, headers=headers)
                assert refused.status_code == 401, (method, path, headers)
                assert "admin token" in refused.json()["error"]["message"]
            allowed = await http.request(method, path, json=body, headers=bearer(TOKEN))
            assert allowed.status_code == 200, (method, path, allowed.text)
        balance = await http.get("/_emulator/accounts", headers=bearer(TOKEN))
        demo = next(a for a in balance.json()["accounts"] if a["name"] == "demo")
        assert demo["balance_usd"] == "105.00"  # only the authorised top-up landed


async def test_the_token_leaves_the_public_routes_alone(guarded_app: Starlette) -> None:
    transport = httpx.ASGITransport(app=guarded_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator.test") as http:
        models = await http.get("/v1/models", headers=bearer(DEMO_KEY))
    assert models.status_code == 200


def test_serve_prints_its_address_keys_and_admin_api() -> None:
    with served_emulator() as served:
        banner = "\n".join(served.banner)
        assert served.url.startswith("http://127.0.0.1:") and not served.url.endswith(":0")
        assert served.banner[0] == f"relaybatch emulator listening on {served.url}"
        for needle in [
            "rb-demo-key  account demo, 100.00 USD, no rate limit",
            "rb-limited-key  account limited",
            f"base_url={served.url}/v1",
            f"videos: base_url={served.url}/v2",
            f"Anthropic SDK: base_url={served.url}",
            f'"base_url": "{served.url}", "api_version": "v1beta"',
            f"admin API:     {served.url}/_emulator/",
            "no admin token; loopback only",
        ]:
            assert needle in banner, needle
        # The printed address and key work, and the admin API is open on loopback.
        assert httpx.get(f"{served.url}/v1/models", headers=bearer(DEMO_KEY)).status_code == 200
        assert httpx.get(f"{served.url}/_emulator/clock").status_code == 200
    # Ctrl-C ends it cleanly: uvicorn shuts down, then exits as interrupted (130) with no traceback.
    assert served.process.returncode in (0, 130)
    assert served.stderr == ""


def test_serve_beyond_loopback_without_a_token_is_refused() -> None:
    result = run_serve("--host", "0.0.0.0")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: emulator serve --host 0.0.0.0 listens beyond loopback")
    assert "RELAYBATCH_EMULATOR_ADMIN_TOKEN" in result.stderr and "Traceback" not in result.stderr


def test_serve_beyond_loopback_warns_and_guards_the_admin_api() -> None:
    with served_emulator("--host", "0.0.0.0", env={"RELAYBATCH_EMULATOR_ADMIN_TOKEN": TOKEN}) as served:
        local = served.url.replace("0.0.0.0", "127.0.0.1")
        assert "    needs Authorization: Bearer <admin token>" in served.banner
        assert TOKEN not in "\n".join(served.banner)
        assert httpx.get(f"{local}/_emulator/clock").status_code == 401
        assert httpx.get(f"{local}/_emulator/clock", headers=bearer(TOKEN)).status_code == 200
        assert httpx.get(f"{local}/v1/models", headers=bearer(DEMO_KEY)).status_code == 200
    assert served.stderr.startswith("warning: the emulator listens on 0.0.0.0, beyond loopback")
    assert TOKEN not in served.stderr


def test_serve_on_a_busy_port_is_one_line() -> None:
    with served_emulator() as served:
        port = served.url.rsplit(":", 1)[-1]
        result = run_serve("--port", port)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: emulator serve: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr


def test_every_serve_option_and_variable_is_documented() -> None:
    import typer.main

    from relaybatch.cli import app
    from tests.emulator.test_emulator_docs import DOC

    root = typer.main.get_command(app)
    command = root.commands["emulator"].commands["serve"]  # type: ignore[attr-defined]
    for param in command.params:
        for flag in param.opts:
            assert f"`{flag}`" in DOC, flag
        if param.envvar:
            assert f"`{param.envvar}`" in DOC, param.envvar
