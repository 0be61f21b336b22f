"""The `relaybatch` command's entry point."""

from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path
from typing import Any

import pytest

from relaybatch.__main__ import main


class _CtrlCWhileImporting(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "relaybatch.cli":
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_command_line_imports_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "relaybatch.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_CtrlCWhileImporting(), *sys.meta_path])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "stopped before anything started\n"


def test_the_command_is_this_entry_point() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"relaybatch": "relaybatch.__main__:main"}
