"""examples/label-a-dataframe.ipynb runs as Jupyter runs it: nbclient executes every cell in a real
kernel (inside ipykernel's running event loop) against the embedded emulator."""

from __future__ import annotations

import re
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


SLOW_CELL = """
import pyarrow as pa
import relaybatch
job = relaybatch.Job(kind="chat", model="relay-chat-small", prompt="{text}")
table = pa.table({"text": [f"row {n}" for n in range(40)]})
run = relaybatch.Run.from_table(table, job, name="slow", concurrency=2)
outcome = run.run()
print("outcome", outcome.interrupted, outcome.counts.get("done", 0), outcome.sent)
"""


@pytest.mark.slow
def test_a_kernel_interrupt_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """Jupyter's own interrupt (the kernel manager's SIGINT, ipykernel raising KeyboardInterrupt in
    the cell's thread) stops the run cleanly: the cell ends with the outcome, and what was done stays."""
    import os
    import time

    from jupyter_client.manager import start_new_kernel

    from relaybatch.emulator.config import DEFAULT_CONFIG_PATH

    slow = tmp_path / "slow.yaml"  # every chat call takes 0.3 s: 40 calls, 2 in flight, about 6 s
    rule = '{fault: "latency=0.3", paths: ["/v1/chat/completions"], every: 1}'
    slow.write_text(DEFAULT_CONFIG_PATH.read_text().replace("rules: []", f"rules: [{rule}]"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
    env |= {"RELAYBATCH_EMULATOR_CONFIG": str(slow), "RELAYBATCH_RUNS_DIR": str(tmp_path / "runs")}
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        client.execute(SLOW_CELL)
        texts: list[str] = []
        interrupted = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = client.get_iopub_msg(timeout=60)
            content = message["content"]
            texts.append(str(content.get("text", "")) + str(content.get("data", {}).get("text/html", "")))
            progressed = message["msg_type"] == "update_display_data" and 'value="0"' not in texts[-1]
            if progressed and not interrupted:
                manager.interrupt_kernel()  # the notebook's stop button
                interrupted = True
            if message["msg_type"] == "status" and content["execution_state"] == "idle" and interrupted:
                break
        output = "".join(texts)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert interrupted and "stopping (SIGINT): no new requests" in output
    ended = re.search(r"outcome (\w+) (\d+) (\d+)", output)
    assert ended is not None, output[-2000:]
    signal_name, done, sent = ended.groups()
    assert signal_name == "SIGINT" and 0 < int(done) < 40 and int(sent) == int(done)
