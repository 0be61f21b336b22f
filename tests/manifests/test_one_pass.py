"""One pass finds every problem of a manifest, each once, at the line that holds it (issue 32)."""

# Expected messages are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.manifests import open_manifest
from relaybatch.manifests.problems import MAX_LISTED_RANGES
from relaybatch.manifests.schema import JobSpec, RunSettings

JOB_FIELDS = ", ".join(JobSpec.model_fields)  # the hint for an unknown field lists them
RUN_FIELDS = ", ".join(RunSettings.model_fields)

# Four jobs and the ordinary mistakes of a new user: a misspelt run setting and job field, a kind
# that does not exist, a missing CSV, YAML 1.1's `NO`, a judgment question type, a one-level
# score, a choice without criteria, and a video length and size the gateway refuses.
NIGHTLY = """
run:
  name: nightly
  concurency: 8
jobs:
  - name: answers
    kind: chat
    model: relay-chat-small
    promt: "Answer briefly: {question}"
    data: nightly.csv
  - name: tags
    kind: chatt
    model: relay-chat-small
    prompt: "Tag {question}"
    data: tags.csv
  - name: triage
    kind: judgment
    model: relay-judge-1
    prompt: "{question}"
    request:
      questions:
        complaint:
          type: yesno
          instructions: Is the customer complaining?
        mood:
          type: score
          instructions: How upset is the customer?
          criteria: [Calm]
        team:
          type: choice
          instructions: Which team should handle this?
    data: nightly.csv
  - name: clips
    kind: video
    model: relay-video-2
    request:
      seconds: "5"
      size: 640x480
    prompt: "A slow pan across {scene}, seen from {country}"
    items:
      - {scene: a misty pine forest, country: NO}
      - {scene: a night market, country: SE}
"""
NIGHTLY_PROBLEMS = [
    "{m}:3: run.concurency: is not a manifest field; did you mean `concurrency`? the fields here are {RUN_FIELDS} (docs/manifests.md)",
    "{m}:8: jobs[0].promt: is not a manifest field; did you mean `prompt`? the fields here are {JOB_FIELDS} (docs/manifests.md)",
    "{m}:11: jobs[1].kind: 'chatt' is not allowed here; use one of chat, responses, messages, generate_content, image, video, video_v1, judgment, web_search (did you mean 'chat'?)",
    "{m}:14: jobs[1].data: data file 'tags.csv' not found next to the manifest; check the path (it is relative to nightly.yaml's folder)",
    "{m}:22: jobs[2].request.questions.complaint.type: 'yesno' is not allowed here; use one of noul, choice, score",
    "{m}:27: jobs[2].request.questions.mood.criteria: score needs criteria: a list of 2 to 10 level descriptions, lowest first; e.g. criteria: [Calm, Frustrated, Angry]",
    "{m}:28: jobs[2].request.questions.team.criteria: choice needs criteria: a map of option id to description, 1 to 255 options; e.g. criteria: {{billing: Charges and refunds, technical: Bugs}}",
    '{m}:36: jobs[3].request.seconds: \'5\' is not a video length; use "4", "8" or "12" (e.g. seconds: 4)',
    "{m}:37: jobs[3].request.size: '640x480' is not a video size; use one of 1024x1792, 1280x720, 1792x1024, 720x1280",
    "{m}:40: jobs[3].items[0].country: NO is read by YAML as false; quote it ('NO') to keep the text, or write false",
]


def _nightly(folder: Path) -> Path:
    rows = "".join(f"q{n},Question {n}?\n" for n in range(1, 19))  # lines 2-19
    (folder / "nightly.csv").write_text("id,question\n" + rows)
    manifest = folder / "nightly.yaml"
    manifest.write_text(NIGHTLY.lstrip("\n"))
    return manifest


def test_the_issues_manifest_gives_every_problem_once_at_its_line(tmp_path: Path) -> None:
    manifest = _nightly(tmp_path)
    result = CliRunner().invoke(app, ["validate", "--offline", str(manifest)])
    assert result.exit_code == 1
    expected = [
        line.format(m=manifest, JOB_FIELDS=JOB_FIELDS, RUN_FIELDS=RUN_FIELDS) for line in NIGHTLY_PROBLEMS
    ]
    assert result.output.splitlines() == [f"error: {len(expected)} problems in the manifest:", *expected]


def test_run_refuses_it_with_the_same_problems_and_writes_nothing(tmp_path: Path) -> None:
    manifest = _nightly(tmp_path)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs)])
    assert result.exit_code == 1
    for line in NIGHTLY_PROBLEMS:
        assert (
            line.format(m=manifest, JOB_FIELDS=JOB_FIELDS, RUN_FIELDS=RUN_FIELDS)
            in result.output.splitlines()
        )
    assert "Traceback" not in result.output
    assert not runs.exists() or not any(runs.iterdir())


def test_validate_format_json_gives_each_problem_as_one_json_line(tmp_path: Path) -> None:
    manifest = _nightly(tmp_path)
    result = CliRunner().invoke(app, ["validate", "--offline", "--format", "json", str(manifest)])
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == len(NIGHTLY_PROBLEMS)
    assert lines[3] == {
        "file": str(manifest),
        "line": 14,
        "field": "jobs[1].data",
        "message": "data file 'tags.csv' not found next to the manifest",
        "hint": "check the path (it is relative to nightly.yaml's folder)",
        "rows": [[14, 14]],
        "more_rows": 0,
    }
    valid = tmp_path / "ok.csv"
    valid.write_text("id,model,prompt\n1,relay-chat-small,hi\n")
    result = CliRunner().invoke(app, ["validate", "--offline", "--format", "json", str(valid)])
    assert (result.exit_code, result.stdout) == (0, "")
    missing = CliRunner().invoke(app, ["validate", "--format", "json", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 1
    assert json.loads(missing.stdout)["hint"] == "give the path of a manifest"


def test_a_bad_request_field_of_a_100000_row_job_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "big.csv").write_text("id,question\n" + "".join(f"q{n},Q{n}?\n" for n in range(100_000)))
    manifest = tmp_path / "big.yaml"
    manifest.write_text(
        "jobs:\n"
        "  - name: big\n"
        "    kind: chat\n"
        "    model: relay-chat-small\n"
        "    request: {max_tokens: 0}\n"
        '    prompt: "{question}"\n'
        "    data: big.csv\n"
    )
    validation = open_manifest(manifest).validate()
    assert [str(problem) for problem in validation.problems] == [
        f"{manifest}:5: jobs[0].request.max_tokens: is 0, below the least allowed (1); use 1 or more (e.g. max_tokens: 64)"
    ]
    assert (validation.truncated, validation.total) == (0, 0)


def test_a_problem_many_rows_share_is_one_line_listing_them(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    temperature = ["abc"] * 18 + ["0.5"] + ["3", "3", "0.1"] * 6
    table.write_text(
        "id,model,prompt,temperature\n"
        + "".join(f"r{n},relay-chat-small,Q{n},{value}\n" for n, value in enumerate(temperature))
    )
    problems = [str(problem) for problem in open_manifest(table).validate().problems]
    assert MAX_LISTED_RANGES == 5
    assert problems == [
        f"rows 2-19 of {table}: temperature: 'abc' is not a number; write a number (e.g. temperature: 0.2)",
        f"rows 21-22, 24-25, 27-28, 30-31, 33-34 and 2 more of {table}: temperature: is 3, above the most allowed (2); use 2 or less (e.g. temperature: 0.2)",
    ]


def test_a_job_refused_in_one_field_still_has_its_data_file_and_rows_checked(
    tmp_path: Path, png: bytes
) -> None:
    (tmp_path / "cat.png").write_bytes(png)
    (tmp_path / "d.csv").write_text("q,photo\nhi,cat.png\nho,dog.png\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "jobs:\n"
        "  - {name: a, kind: chat, model: m, prompt: '{q}', image: photo, budget_usd: -1, data: d.csv}\n"
        "  - {name: b, kind: chat, model: m, prompt: '{q}', data: none.csv, colour: blue}\n"
    )
    problems = [str(problem) for problem in open_manifest(manifest).validate().problems]
    assert problems == [
        f'{manifest}:2: jobs[0].budget_usd: is -1 and must be above 0; use a number above 0 (e.g. budget_usd: "5.00")',
        f"{manifest}:3: jobs[1].colour: is not a manifest field; the fields here are {JOB_FIELDS} (docs/manifests.md)",
        f"{tmp_path / 'd.csv'}:3: photo: image file 'dog.png' not found; check the path (paths are relative to {tmp_path})",
        f"{manifest}:3: jobs[1].data: data file 'none.csv' not found next to the manifest; check the path (it is relative to m.yaml's folder)",
    ]
