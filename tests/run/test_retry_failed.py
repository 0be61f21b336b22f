"""`relaybatch run FILE --retry-failed [REASON...]`: failed items back to pending after a fix, saying
how many and why; never uncertain items, never paid remote work (a resume polls it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import forget_embedded_emulators
from relaybatch.emulator.config import DEFAULT_CONFIG_PATH
from relaybatch.engine import CheckpointStore
from relaybatch.engine.states import RETRY_POLL
from relaybatch.manifests import load_items
from relaybatch.run.retry import retry_failed
from relaybatch.run_folder import RunPaths

FORBIDDEN = "access to this model is not enabled for the account (403)"


def _fail(store: CheckpointStore, key: str, reason: str, **fields: object) -> None:
    store.transition(key, "sending")
    store.transition(key, "failed", last_error=reason, **fields)


def test_only_matching_failures_go_back_and_uncertain_items_never_do(tmp_path: Path) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\n" + "".join(f"q{n},relay-chat-small,hi {n}\n" for n in range(5)))
    paths = RunPaths(tmp_path / "run")
    with CheckpointStore(paths.checkpoint) as store:
        store.add_items(load_items(manifest))
        keys = store.keys_in_state("pending")
        _fail(store, keys[0], f"PermissionDenied: {FORBIDDEN}")
        _fail(store, keys[1], f"PermissionDenied: {FORBIDDEN}")
        _fail(store, keys[2], "BadRequest: max_tokens is too large")
        _fail(store, keys[3], "polls kept failing", retryable=RETRY_POLL, remote_id="video_1")
        store.transition(keys[4], "sending")
        store.transition(keys[4], "uncertain", last_error="interrupted between send and answer")

    retried = retry_failed(paths, ["NOT ENABLED"])

    assert retried.by_reason == {f"PermissionDenied: {FORBIDDEN}": 2}
    assert retried.lines() == [
        "retry: 2 failed items whose reason contains 'NOT ENABLED' back to pending",
        f"  2 x PermissionDenied: {FORBIDDEN}",
    ]
    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        states = [store.item(key)["state"] for key in keys]
        assert states == ["pending", "pending", "failed", "failed", "uncertain"]
        assert store.item(keys[0])["last_error"] is None
        assert store.events(keys[0])[-1]["detail"].endswith(f"it had failed: PermissionDenied: {FORBIDDEN}")

    everything = retry_failed(paths)
    assert everything.total == 1 and list(everything.by_reason) == ["BadRequest: max_tokens is too large"]
    assert retry_failed(paths).lines() == [
        "retry: no failed item (uncertain items are never retried: see `relaybatch resolve`)"
    ]


def test_a_run_retries_its_failures_after_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_emulator: None
) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\n" + "".join(f"q{n},relay-chat-small,hi {n}\n" for n in range(3)))
    runs = tmp_path / "runs"
    refusing = tmp_path / "refusing.yaml"  # the account has no access to the chat route yet
    rule = '{fault: "status=403", paths: ["/v1/chat/completions"], every: 1}'
    refusing.write_text(DEFAULT_CONFIG_PATH.read_text().replace("rules: []", f"rules: [{rule}]"))
    monkeypatch.setenv("RELAYBATCH_EMULATOR_CONFIG", str(refusing))
    run = ["run", str(manifest), "--runs-dir", str(runs)]

    first = CliRunner().invoke(app, run)
    assert first.exit_code == 1 and "failed 3" in first.output

    monkeypatch.delenv("RELAYBATCH_EMULATOR_CONFIG")  # the account was fixed
    forget_embedded_emulators()
    again = CliRunner().invoke(app, run)
    assert again.exit_code == 1 and "0 requests sent" in again.output  # a 403 is not retried by itself

    unmatched = CliRunner().invoke(app, [*run, "--retry-failed", "quota"])
    assert "retry: no failed item whose reason contains 'quota'" in unmatched.output

    fixed = CliRunner().invoke(app, [*run, "--retry-failed", "403"])
    assert fixed.exit_code == 0, fixed.output
    assert "retry: 3 failed items whose reason contains '403' back to pending" in fixed.output
    assert "items: done 3 (0 new); 3 requests sent by this execution" in fixed.output


def test_reasons_without_the_flag_are_a_usage_error(tmp_path: Path) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(tmp_path), "403"])
    assert result.exit_code == 2 and "REASON texts go with --retry-failed" in result.output
    assert list(tmp_path.iterdir()) == [manifest]
