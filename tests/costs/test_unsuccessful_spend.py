"""`relaybatch report` says how much of a run's spend went to items that did not succeed, and why."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from relaybatch.costs.unsuccessful import unsuccessful_spend
from relaybatch.emulator.config import DEFAULT_CONFIG_PATH

if TYPE_CHECKING:
    from tests.conftest import Cli

MANIFEST = """\
run: {name: tickets}
jobs:
  - name: labels
    kind: chat
    model: relay-chat-small
    prompt: "Label: {text}"
    data: rows.csv
    max_reasks: 1
    output_schema:
      type: object
      properties: {team: {type: string, enum: [billing, technical]}}
      required: [team]
  - name: notes
    kind: responses
    model: relay-chat-small
    prompt: "Note: {text}"
    data: rows.csv
"""


@pytest.mark.usefixtures("fresh_emulator")
def test_the_report_counts_what_items_that_failed_cost_by_reason(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every structured answer is broken JSON (each re-ask billed, then invalid_output), and the
    # notes job's (responses) third request is refused 400 (no charge): two reasons, one of them free.
    rules = (
        '[{fault: "status=400", at: [3], paths: ["/v1/responses"]}, '
        '{fault: "invalid_json", rate: 1.0, paths: ["/v1/chat/completions"]}]'
    )
    config = tmp_path / "emulator.yaml"
    config.write_text(DEFAULT_CONFIG_PATH.read_text().replace("rules: []", f"rules: {rules}"))
    monkeypatch.setenv("RELAYBATCH_EMULATOR_CONFIG", str(config))
    (tmp_path / "rows.csv").write_text("text\n" + "".join(f"ticket {n}\n" for n in range(4)))
    (tmp_path / "tickets.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"

    code, output = cli("run", str(tmp_path / "tickets.yaml"), "--runs-dir", str(runs))
    assert "items: done 3, failed 5 (8 new)" in output, output
    code, report = cli("report", "tickets", "--runs-dir", str(runs), "--dashboards-dir", str(tmp_path))

    assert code == 0, report
    lines = {(line.state, line.reason): line for line in unsuccessful_spend(runs, ["tickets"])}
    ledger = pq.read_table(runs / "tickets" / "ledger.parquet").to_pylist()
    spent_on_labels = sum((row["usd"] for row in ledger if row["job"] == "labels"), Decimal(0))
    invalid = [
        line for (state, reason), line in lines.items() if (state, reason) == ("failed", "invalid_output")
    ]
    assert len(invalid) == 1, lines
    # Every labels call was billed and bought nothing: 4 items, an ask and a re-ask each.
    assert (invalid[0].items, invalid[0].calls, invalid[0].usd) == (4, 8, spent_on_labels)
    assert spent_on_labels > 0
    refused = [line for line in lines.values() if line.reason.startswith("400")]
    assert len(refused) == 1 and refused[0].items == 1 and refused[0].usd == 0, lines
    assert "Spend on items that did not succeed" in report
    assert f"{invalid[0].reason}" in report and "bought nothing" in report
