"""The emulator config file: the shipped default loads; bad files fail with file and field named."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaybatch.cli import app as cli
from relaybatch.emulator import EmulatorConfig, load_config
from relaybatch.errors import UserError


def test_shipped_default_has_the_demo_account(shipped_config: EmulatorConfig) -> None:
    demo = next(account for account in shipped_config.accounts if account.name == "demo")

    assert demo.api_keys == ["rb-demo-key"]
    assert demo.revoked_keys == ["rb-revoked-key"]
    assert demo.balance_usd == Decimal("100.00")
    assert demo.rate_limit_rpm == 0
    assert any(model.id == "relay-chat-small" for model in shipped_config.models)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("accounts: [}", "not valid YAML"),
        ("accounts: []\nmodels: [{id: m, type_target: cohere}]", "models.0.type_target"),
        ("accounts: [{name: a, api_keys: [k], balance_usd: lots}]\nmodels: []", "accounts.0.balance_usd"),
        ("accounts: []\nmodels: []\nfaults: {rules: [{fault: x, rate: 2}]}", "faults.rules.0.rate"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "emulator.yaml"
    path.write_text(text)

    with pytest.raises(UserError) as raised:
        load_config(path)

    assert str(path) in str(raised.value)
    assert words in str(raised.value)


def test_serve_with_a_missing_config_exits_1_without_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["emulator", "serve", "--config", str(tmp_path / "nope.yaml")])

    assert result.exit_code == 1
    assert "cannot read emulator config" in result.output
    assert "Traceback" not in result.output


def test_the_shipped_configuration_is_package_data() -> None:
    """configs/ installs as relaybatch.configs: the default is found through the package (so a
    wheel install has it), and every file in the folder is listed as package data."""
    import fnmatch
    import tomllib
    from importlib import resources

    from relaybatch.emulator.config import DEFAULT_CONFIG_PATH

    folder = Path(__file__).resolve().parents[2] / "configs"
    through_the_package = resources.files("relaybatch.configs").joinpath("emulator.yaml")
    assert Path(str(through_the_package)) == DEFAULT_CONFIG_PATH
    assert DEFAULT_CONFIG_PATH.read_bytes() == (folder / "emulator.yaml").read_bytes()
    setuptools = tomllib.loads((folder.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["relaybatch.configs"] == "configs"
    patterns = setuptools["package-data"]["relaybatch.configs"]
    shipped = [
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path.suffix != ".py" and "__pycache__" not in path.parts
    ]
    assert shipped and [name for name in shipped if not any(fnmatch.fnmatch(name, p) for p in patterns)] == []
