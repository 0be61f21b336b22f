"""Every setting of what the Prefect server holds for a fleet is documented, under its variable's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaybatch.errors import UserError
from relaybatch.fleet.budget import FleetSettings, fleet_settings

REPO = Path(__file__).resolve().parents[1]


def test_every_fleet_setting_is_in_the_readme_and_docs_prefect() -> None:
    readme = (REPO / "README.md").read_text()
    prefect = (REPO / "docs" / "prefect.md").read_text()
    for name in FleetSettings.model_fields:
        variable = f"RELAYBATCH_SERVER_{name.upper()}"
        assert variable in prefect, f"{variable} is not in docs/prefect.md"
        assert variable in readme or f"`_{name.upper()}`" in readme, f"{variable} is not in README.md"


def test_a_bad_fleet_setting_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYBATCH_SERVER_ACCOUNT_BUDGET_USD", "-3")
    with pytest.raises(UserError, match="RELAYBATCH_SERVER_ACCOUNT_BUDGET_USD"):
        fleet_settings()


def test_an_account_budget_with_no_prefect_server_is_one_clear_line_and_nothing_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from relaybatch.cli import app

    for name in ("PREFECT_API_URL", "PREFECT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "no-prefect"))
    monkeypatch.setenv("RELAYBATCH_SERVER_ACCOUNT_BUDGET_USD", "5")
    demo = REPO / "configs" / "demo.csv"

    result = CliRunner().invoke(app, ["run", str(demo), "--runs-dir", str(tmp_path / "runs")])

    assert "the account's budget is held by a Prefect server, and none is configured" in result.output
    assert "Traceback" not in result.output
    assert result.exit_code == 1
    assert "items: pending 3 (3 new); 0 requests sent" in result.output
