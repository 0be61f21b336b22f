"""examples/label-a-dataframe.ipynb runs as Jupyter runs it: nbclient executes every cell in a real
kernel (inside ipykernel's running event loop) against the embedded emulator."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "label-a-dataframe.ipynb"


def _text(output: nbformat.NotebookNode) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    data = output.get("data", {})
    return str(data.get("text/html", "")) + str(data.get("text/plain", ""))


@pytest.mark.slow
def test_the_notebook_labels_a_dataframe_and_plots_the_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RELAYBATCH_BASE_URL", "RELAYBATCH_API_KEY", "PREFECT_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RELAYBATCH_RUNS_DIR", str(tmp_path / "runs"))  # the kernel inherits it
    notebook = nbformat.read(NOTEBOOK, as_version=4)

    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert errors == []
    ran = "".join(_text(output) for output in code[2].outputs)
    assert "<progress" in ran and "12/12" in ran  # the bar, updated in place to the end
    assert "'done': 12" in ran
    table = "".join(_text(output) for output in code[3].outputs)
    assert "answer_team" in table and "ticket" in table
    plots = [output for cell in code[4:6] for output in cell.outputs if "data" in output]
    assert len(plots) == 2 and all("application/vnd.plotly.v1+json" in output["data"] for output in plots)
    assert (tmp_path / "runs" / "tickets" / "results" / "judgment.parquet").exists()
