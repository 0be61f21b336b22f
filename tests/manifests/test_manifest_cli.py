"""`relaybatch validate` and `relaybatch plan` on manifests: located errors, exit codes, no traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from relaybatch.cli import app

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_validate_lists_every_located_problem_and_exits_1(write, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("id,q\n1,hi\n2,\n")
    manifest = write(
        "bad.yaml",
        """
        jobs:
          - {name: a, kind: messages, model: m, prompt: "{q}", data: d.csv}
          - {name: b, kind: image, model: m, prompt: "{missing}", items: [{x: 1}]}
        """,
    )
    result = CliRunner().invoke(app, ["validate", str(manifest)])
    assert result.exit_code == 1
    # The job's own request lacks max_tokens: once, at the job's line, not once per row of d.csv.
    assert (
        f"{manifest}:2: jobs[0].request.max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)"
        in (result.output)
    )
    assert "d.csv" not in result.output
    assert (
        f"{manifest}:3: has no column missing that the job's templates use; "
        "add it to the row, or change the template" in result.output
    )
    assert "Traceback" not in result.output


def test_validate_prints_a_short_plan_and_exits_0() -> None:
    result = CliRunner().invoke(app, ["validate", str(CONFIGS / "manifests" / "everything.yaml")])
    assert result.exit_code == 0, result.output
    assert "valid, 29 items in 11 jobs" in result.output
    assert "quiz-answers" in result.output and "generate_content" in result.output


def test_plan_estimates_each_job_without_billing(write) -> None:
    manifest = write(
        "p.yaml",
        """
        run: {budget_usd: "1.00"}
        jobs:
          - {name: look, kind: web_search, prompt: "{t}", items: [{t: a}, {t: b}, {t: c}]}
        """,
    )
    result = CliRunner().invoke(app, ["plan", str(manifest), "--items", "2"])
    assert result.exit_code == 0, result.output
    assert "0.150000" in result.output  # three searches at 0.05 USD, a flat price needing no lookup
    assert "run budget: 1.00 USD, which covers the worst case" in result.output
    assert "look-1" in result.output and "look-3" not in result.output


def test_plan_checks_each_job_budget_against_its_worst_case(write) -> None:
    manifest = write(
        "p.yaml",
        """
        jobs:
          - {name: look, kind: web_search, budget_usd: "0.10", prompt: "{t}", items: [{t: a}, {t: b}, {t: c}]}
        """,
    )
    result = CliRunner().invoke(app, ["plan", str(manifest)])
    assert result.exit_code == 0, result.output
    assert "job look budget: 0.10 USD, which is BELOW its worst case" in result.output
