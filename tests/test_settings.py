"""Settings from the environment: the client's timeouts, retry policy and open route names are
nested settings (RELAYBATCH_<GROUP>__<FIELD>), they reach the client a run opens, and a bad value
is a one-line user error naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import open_client
from relaybatch.errors import UserError
from relaybatch.gateway import ClientTimeouts, RetryPolicy
from relaybatch.settings import Settings

CSV = Path(__file__).resolve().parents[1] / "configs" / "demo.csv"


def test_nested_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYBATCH_TIMEOUTS__READ", "600")
    monkeypatch.setenv("RELAYBATCH_RETRY__MAX_ATTEMPTS", "8")
    monkeypatch.setenv("RELAYBATCH_ROUTES__PRICING_MAPPING_PARAMETER", "platform_id")

    settings = Settings()

    assert settings.timeouts == ClientTimeouts(read=600)
    assert settings.retry == RetryPolicy(max_attempts=8)
    assert settings.routes.pricing_mapping_parameter == "platform_id"


async def test_the_client_a_run_opens_uses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYBATCH_TIMEOUTS__CONNECT", "3")
    monkeypatch.setenv("RELAYBATCH_RETRY__MAX_ATTEMPTS", "2")

    async with open_client(Settings()) as client:
        assert client._sender.policy.max_attempts == 2
        assert client._http.timeout.connect == 3
    async with open_client(Settings(), retry=RetryPolicy(max_attempts=7)) as client:
        assert client._sender.policy.max_attempts == 7  # an explicit policy wins


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "RELAYBATCH_RETRY__MAX_ATTEMPTS",
            "0",
            "RELAYBATCH_RETRY__MAX_ATTEMPTS=0: max_attempts must be at least 1",
        ),
        ("RELAYBATCH_TIMEOUTS__READ", "soon", "RELAYBATCH_TIMEOUTS__READ: Input should be a valid number"),
        ("RELAYBATCH_TIMEOUTS__IMAGE_READ", "5", "image_read (5 s) must be longer than"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(UserError, match="fix or unset the variable") as caught:
        Settings()
    assert expected in str(caught.value)


def test_run_refuses_bad_settings_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RELAYBATCH_RETRY__MAX_ATTEMPTS", "0")
    result = CliRunner().invoke(app, ["run", str(CSV), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1
    assert "RELAYBATCH_RETRY__MAX_ATTEMPTS=0" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("notaurl", "'notaurl' is not an http:// or https:// URL with a host, e.g. https://gateway.example"),
        ("ftp://gw.example", "'ftp://gw.example' is not an http:// or https:// URL with a host"),
        (
            "http://127.0.0.1:8780/v1/",
            "'http://127.0.0.1:8780/v1/' ends in a route prefix; give the gateway's root "
            "(http://127.0.0.1:8780): relaybatch adds /v1, /v2 or /v1beta to each route itself",
        ),
    ],
)
def test_a_base_url_that_cannot_be_the_gateways_root_is_refused_before_anything_is_written(
    tmp_path: Path, value: str, expected: str
) -> None:
    # Before, each went through 13 s of retries (or every item failed 404 on /v1/v1/...), then
    # stopped with a run folder written.
    result = CliRunner().invoke(
        app, ["run", str(CSV), "--runs-dir", str(tmp_path / "runs"), "--base-url", value]
    )
    assert result.exit_code == 1
    assert f"error: setting RELAYBATCH_BASE_URL (or --base-url): {expected}" in result.output
    assert not (tmp_path / "runs").exists()


def test_a_blank_base_url_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYBATCH_BASE_URL", " ")
    assert Settings().uses_embedded_emulator
    monkeypatch.setenv("RELAYBATCH_BASE_URL", "https://gw.example/")
    assert Settings().base_url == "https://gw.example/"
