"""`relaybatch run` goes through the Prefect flow; a second run sends nothing for done items."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.csv"

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_run_twice_through_the_flow(tmp_path: Path) -> None:
    runner = CliRunner()
    emulator = embedded_emulator().state.emulator
    before = emulator.total_requests
    chats_before = emulator.request_count("POST", "/v1/chat/completions")
    prices_before = emulator.request_count("GET", "/v1/models/pricing")
    catalog_before = emulator.request_count("GET", "/v1/models")

    first = runner.invoke(app, ["run", str(DEMO), "--runs-dir", str(tmp_path)])

    assert first.exit_code == 0, first.output
    results = tmp_path / "demo" / "results" / "demo.parquet"
    assert f"results: {results}" in first.output.replace("\n", "")
    assert pq.read_table(results).num_rows == 3
    # Three chat calls, the one model's price fetched once (the cost ledger needs it), and the free
    # catalog read that checks model families before anything is sent.
    assert emulator.request_count("POST", "/v1/chat/completions") == chats_before + 3
    assert emulator.request_count("GET", "/v1/models/pricing") == prices_before + 1
    assert emulator.request_count("GET", "/v1/models") == catalog_before + 1
    assert emulator.total_requests == before + 5
    sent_by_first = emulator.total_requests
    # A rewrite goes to a temporary name, then renames it over the file: a new inode.
    files = {path: path.stat().st_ino for path in (results, tmp_path / "demo" / "ledger.parquet")}

    second = runner.invoke(app, ["run", str(DEMO), "--runs-dir", str(tmp_path)])

    assert second.exit_code == 0, second.output
    # The second run sends nothing but the catalog read: no billed call, no price lookup.
    assert emulator.total_requests == sent_by_first + 1
    assert emulator.request_count("GET", "/v1/models") == catalog_before + 2
    assert "done 3 (0 new)" in second.output
    assert "no input changed since the last plan" in second.output
    # Nothing changed, so neither the results nor the ledger Parquet was written again.
    assert {path: path.stat().st_ino for path in files} == files
    assert f"results: {results}" in second.output.replace("\n", "")


AMBIGUOUS_PRICE_MANIFEST = """\
run: {name: %(name)s}
jobs:
  - name: multi
    kind: chat
    model: relay-chat-multi
%(provider)s    request: {max_tokens: 8}
    prompt: "{q}"
    items: [{q: hello}, {q: world}]
"""


def test_an_ambiguous_price_stops_before_sending_and_provider_resolves_it(tmp_path: Path) -> None:
    emulator = embedded_emulator().state.emulator
    chats_before = emulator.request_count("POST", "/v1/chat/completions")
    unset = tmp_path / "unset.yaml"
    unset.write_text(AMBIGUOUS_PRICE_MANIFEST % {"name": "unset", "provider": ""})

    stopped = CliRunner().invoke(app, ["run", str(unset), "--runs-dir", str(tmp_path)])

    assert stopped.exit_code == 1
    assert "set `provider` on job 'multi' (candidates: alpha, beta)" in stopped.output
    assert "Traceback" not in stopped.output
    assert emulator.request_count("POST", "/v1/chat/completions") == chats_before

    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(AMBIGUOUS_PRICE_MANIFEST % {"name": "chosen", "provider": "    provider: alpha\n"})

    done = CliRunner().invoke(app, ["run", str(chosen), "--runs-dir", str(tmp_path)])

    assert done.exit_code == 0, done.output
    assert "items: done 2 (2 new)" in done.output
    assert emulator.request_count("POST", "/v1/chat/completions") == chats_before + 2


def test_with_a_server_the_flow_run_gets_the_gateway_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow run's base_url parameter is the gateway used, also when it came from the environment."""
    import relaybatch.cli._running as cli

    seen: dict[str, object] = {}

    def flow_run(manifest: Path, **parameters: object) -> object:
        seen.update(parameters)
        raise cli.UserError("stopped here by the test")

    monkeypatch.setattr(cli, "_run_as_flow_run", flow_run)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setenv("RELAYBATCH_BASE_URL", "http://gateway.example")
    monkeypatch.setenv("RELAYBATCH_API_KEY", "rb-demo-key")

    result = CliRunner().invoke(app, ["run", str(DEMO), "--runs-dir", str(tmp_path)])

    assert result.exit_code == 1 and "stopped here by the test" in result.output
    assert seen["base_url"] == "http://gateway.example"
