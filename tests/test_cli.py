"""The command line: documented commands, clean user errors, honest placeholders."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from relaybatch.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"


def _command_paths(typer_app: typer.Typer, prefix: str = "") -> list[str]:
    paths = []
    for command in typer_app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        paths.append(f"{prefix}{name.replace('_', '-')}")
    for group in typer_app.registered_groups:
        paths.extend(_command_paths(group.typer_instance, f"{prefix}{group.name} "))
    return paths


def test_every_command_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    for path in _command_paths(app):
        assert re.search(rf"relaybatch {path}\b", readme), f"`relaybatch {path}` is not in README.md"


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for path in _command_paths(app):
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, path
        assert "Usage" in result.output


def test_bad_csv_is_reported_with_its_location_and_exit_1(tmp_path: Path) -> None:
    manifest = tmp_path / "bad.csv"
    manifest.write_text("id,model,prompt,max_tokens\na,m1,hello,many\nb,,hi,5\n")

    result = CliRunner().invoke(app, ["validate", str(manifest)])

    assert result.exit_code == 1
    assert f"{manifest}:2: max_tokens: 'many' is not a number" in result.output
    assert f"{manifest}:3: model: is required" in result.output
    assert "Traceback" not in result.output


def test_missing_manifest_is_a_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "none.csv")])
    assert result.exit_code == 1
    assert "no such file" in result.output


def test_report_without_runs_is_a_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "--runs-dir", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "no runs folder" in result.output
    assert "Traceback" not in result.output


def test_ctrl_c_while_run_imports_its_engine_is_reported_with_the_resume_command(
    tmp_path: Path, monkeypatch
) -> None:
    # The engine's imports take a while after "checking" is printed; a Ctrl-C there used to end in
    # typer's silent exit 130, with no "stopped" line and no resume command.
    import signal

    import relaybatch.run

    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(relaybatch.run, "RunOverrides", interrupted)
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    handler = signal.getsignal(signal.SIGTERM)
    arguments = ["run", str(manifest), "--runs-dir", str(tmp_path / "runs")]
    monkeypatch.setattr("sys.argv", ["relaybatch", *arguments])  # what the resume command repeats

    result = CliRunner().invoke(app, arguments)

    assert result.exit_code == 130
    assert "stopped: nothing was in flight" in result.output
    assert f"resume with: relaybatch run {manifest} --runs-dir {tmp_path / 'runs'}" in result.output
    assert signal.getsignal(signal.SIGTERM) == handler


def test_a_run_name_that_is_not_one_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # --run-name ../evil wrote the run's folder beside the runs folder; '' fell back to the default.
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    runs = tmp_path / "place" / "runs"
    for name in ("../evil", "..", "a/b", ""):
        result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs), "--run-name", name])
        assert result.exit_code == 1, (name, result.output)
        assert f"error: run name {name!r} is not a folder name" in result.output
        assert "Traceback" not in result.output
    assert [path.name for path in tmp_path.rglob("*")] == ["m.csv"]


def test_a_budget_too_big_to_show_is_a_usage_error(tmp_path: Path) -> None:
    # --budget 1e400 passed, then every progress line, `status` and `report` died on a traceback.
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(tmp_path), "--budget", "1e400"])
    assert result.exit_code == 2
    assert "'1e400': the budget must be at most 1,000,000,000,000 USD" in result.output
    assert list(tmp_path.iterdir()) == [manifest]


def test_the_status_advice_of_an_unfinished_run_names_its_runs_folder(tmp_path: Path) -> None:
    # `relaybatch status NAME` alone looked in data/runs: "no run at data/runs/NAME".
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-unknown,hi\n")  # the gateway answers 400
    runs = tmp_path / "my runs"
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs)])
    assert result.exit_code == 1
    advice = f"`relaybatch status m --runs-dir '{runs}'` says why"
    assert f"not every item is done (failed 1); {advice}" in result.output
    status = CliRunner().invoke(app, ["status", "m", "--runs-dir", str(runs)])
    assert status.exit_code == 0 and "failed" in status.output


def test_plan_items_below_zero_is_a_usage_error(tmp_path: Path) -> None:
    # --items -1 printed an empty item table and exited 0.
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    result = CliRunner().invoke(app, ["plan", str(manifest), "--items", "-1"])
    assert result.exit_code == 2
    assert "Invalid value for '--items'" in result.output


def test_the_run_name_help_says_run_name_wins_over_the_file_name() -> None:
    result = CliRunner().invoke(app, ["status", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "run.name" in text and "file name without extension when it sets none" in text
