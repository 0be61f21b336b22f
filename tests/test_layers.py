"""The layers are a contract: arrows only point down (docs/architecture.md, "Layers").

``[tool.importlinter]`` in pyproject.toml states the order; ``lint-imports`` checks every import of
the package against it (``make test`` runs it too). flows/ and tasks/ install as relaybatch.flows
and relaybatch.tasks from folders outside relaybatch/, where import-linter does not look, so one
test here checks that nothing below them imports them. And the bottom floors stay light: loading
the settings or the command line's module loads neither plotly, OpenTelemetry nor the engine.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("plotly", "opentelemetry", "relaybatch.engine", "relaybatch.costs", "prefect")


def test_the_layer_contract_holds() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_only_the_command_line_imports_flows_and_tasks() -> None:
    above = ("relaybatch.flows", "relaybatch.tasks")
    package = ROOT / "relaybatch"
    offenders = sorted(
        str(path.relative_to(ROOT))
        for path in package.rglob("*.py")
        if path.relative_to(package).parts[0] != "cli"
        and any(name.startswith(above) for name in _imported(path))
    )
    assert offenders == []


@pytest.mark.parametrize("module", ["relaybatch.settings", "relaybatch.cli"])
def test_loading_a_bottom_floor_loads_nothing_heavy(module: str) -> None:
    script = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = [name for name in done.stdout.split() if name.startswith(HEAVY)]
    assert loaded == []
