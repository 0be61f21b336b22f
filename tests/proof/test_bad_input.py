"""Bad input, property-based: malformed manifests and data files given to `validate` and `run`.

Every generated input is invalid by construction (one valid manifest, then a mutation that the
interface forbids). Each must end with exit code 1, an ``error:`` naming the file and the line
of the fault, no traceback, and nothing sent: the served emulator's request count does not move
(beyond the free catalog read that checks model families) and the run flow is never entered.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proof_served import Served, config_with, served_emulator
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.manifests import Kind

KINDS = set(Kind.__args__)  # type: ignore[attr-defined]
PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

identifiers = st.from_regex(r"[a-z][a-z0-9_]{2,12}", fullmatch=True)


@dataclass(frozen=True)
class BadFile:
    """A malformed input: its file name, its bytes, and the line the fault is on (None: anywhere)."""

    name: str
    content: bytes
    line: int | None
    why: str


# -- YAML manifests: a valid one, then one mutation -------------------------------------------


def valid_manifest() -> dict[str, Any]:
    return {
        "run": {"name": "prop", "budget_usd": "1.00", "concurrency": 4},
        "jobs": [
            {
                "name": "ask",
                "kind": "chat",
                "model": "relay-chat-small",
                "request": {"max_tokens": 16},
                "prompt": "{q}",
                "items": [{"q": "hi"}, {"q": "there"}],
            }
        ],
    }


Mutation = Callable[[dict[str, Any]], str]


def _mutations(draw: st.DrawFn) -> Mutation:
    word = draw(identifiers)
    number = draw(st.integers(min_value=-1000, max_value=0))
    choices: list[Mutation] = [
        lambda m: _set(m["jobs"][0], "kind", word if word not in KINDS else word + "x", "unknown kind"),
        lambda m: _pop(m["jobs"][0], "model", "chat without a model"),
        lambda m: _set(m["jobs"][0]["request"], "max_tokens", number, "max_tokens below 1"),
        lambda m: _set(m["jobs"][0], "prompt", "{" + word + "_missing}", "template names a missing column"),
        lambda m: _set(m, word + "_field", 1, "unknown top-level field"),
        lambda m: _set(m["jobs"][0], word + "_field", True, "unknown job field"),
        lambda m: _set(m["jobs"][0], "data", f"{word}.csv", "data file that does not exist"),
        lambda m: _set(m["run"], "budget_usd", word, "budget that is not a number"),
        lambda m: _set(m["run"], "concurrency", number, "concurrency below 1"),
        lambda m: _set(m["jobs"][0], "items", word, "items that are not a list"),
        lambda m: _set(m, "jobs", [m["jobs"][0], dict(m["jobs"][0])], "a job name used twice"),
        lambda m: _set(m["jobs"][0], "name", word + " with spaces", "a job name with spaces"),
    ]
    return draw(st.sampled_from(choices))


def _set(target: dict[str, Any], key: str, value: Any, why: str) -> str:
    target[key] = value
    return why


def _pop(target: dict[str, Any], key: str, why: str) -> str:
    target.pop(key)
    return why


@st.composite
def mutated_manifests(draw: st.DrawFn) -> BadFile:
    manifest = valid_manifest()
    why = _mutations(draw)(manifest)
    return BadFile("bad.yaml", yaml.safe_dump(manifest, sort_keys=False).encode(), None, why)


@st.composite
def broken_yaml(draw: st.DrawFn) -> BadFile:
    """Valid YAML text with a syntax error spliced in at a chosen line."""
    lines = yaml.safe_dump(valid_manifest(), sort_keys=False).splitlines()
    at = draw(st.integers(min_value=0, max_value=len(lines)))
    breaker = draw(st.sampled_from(["jobs: [unclosed", "\t- tab: indented", "key: 'unterminated", "- {a: b"]))
    lines.insert(at, breaker)
    return BadFile("bad.yaml", "\n".join(lines).encode(), None, f"syntax error at line {at + 1}")


# -- table data files: valid rows, one bad row ------------------------------------------------


def valid_row(number: int) -> dict[str, Any]:
    return {"id": f"r{number}", "model": "relay-chat-small", "prompt": f"row {number}", "max_tokens": 16}


@st.composite
def bad_table_rows(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, str]:
    """Rows for a table manifest, one of them bad; returns (rows, bad row index, why)."""
    count = draw(st.integers(min_value=1, max_value=8))
    rows = [valid_row(number) for number in range(count)]
    bad = draw(st.integers(min_value=0, max_value=count - 1))
    word = draw(identifiers)
    mutation = draw(st.sampled_from(["kind", "prompt", "max_tokens"]))
    if mutation == "kind":
        rows[bad]["kind"] = word if word not in KINDS else word + "x"
    elif mutation == "prompt":
        rows[bad]["prompt"] = ""
    else:
        rows[bad]["max_tokens"] = draw(st.integers(min_value=-1000, max_value=0))
    return rows, bad, f"row {bad + 1}: bad {mutation}"


@st.composite
def bad_csv(draw: st.DrawFn) -> BadFile:
    rows, bad, why = draw(bad_table_rows())
    columns = ["id", "kind", "model", "prompt", "max_tokens"]
    lines = [",".join(columns)] + [",".join(str(row.get(column, "")) for column in columns) for row in rows]
    return BadFile("bad.csv", ("\n".join(lines) + "\n").encode(), bad + 2, why)


@st.composite
def bad_jsonl(draw: st.DrawFn) -> BadFile:
    rows, bad, why = draw(bad_table_rows())
    lines = [json.dumps(row) for row in rows]
    if draw(st.booleans()):
        # Not a mutated row but a line that is not a JSON object at all.
        lines[bad] = draw(st.sampled_from(["{not json", "[1, 2]", '"text"', "{'single': 'quotes'}"]))
        why = f"line {bad + 1} is not a JSON object"
    return BadFile("bad.jsonl", ("\n".join(lines) + "\n").encode(), bad + 1, why)


# -- running the CLI --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def emulator() -> Iterator[Served]:
    with served_emulator(config_with()) as served:
        yield served


def _sent(emulator: Served) -> int:
    """Requests other than the free catalog read `validate` and `plan` make to check model families."""
    return emulator.state.total_requests - emulator.state.request_count("GET", "/v1/models")


def check_rejected(bad: BadFile, command: str, emulator: Served, entered: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / bad.name
        path.write_bytes(bad.content)
        sent_before = _sent(emulator)
        runner = CliRunner()
        environment = {"RELAYBATCH_BASE_URL": emulator.url, "RELAYBATCH_RUNS_DIR": str(Path(folder) / "runs")}
        result = runner.invoke(app, [command, str(path)], env=environment)
        output = result.output

    assert result.exit_code == 1, f"{bad.why}: exit {result.exit_code}\n{output}"
    # CliRunner turns an unhandled exception into exit code 1 too: only a clean exit counts.
    assert isinstance(result.exception, SystemExit), f"{bad.why}: raised {result.exception!r}"
    assert "Traceback" not in output
    # `run` may say what it is checking first; the error is a line of its own.
    assert "\nerror: " in "\n" + output, f"{bad.why}: {output}"
    located = _located_lines(bad.name, output)
    assert located, f"{bad.why}: no file:line in {output!r}"
    if bad.line is not None:
        assert bad.line in located, f"{bad.why}: expected line {bad.line} in {output!r}"
    assert _sent(emulator) == sent_before, f"{bad.why}: a request was sent"
    assert entered == [], f"{bad.why}: the run started"


def _located_lines(name: str, output: str) -> set[int]:
    """The lines problems name: `FILE:LINE: ...`, and `rows 2-19, 25 of FILE: ...` for rows sharing one."""
    lines = {int(line) for line in re.findall(rf"{re.escape(name)}:(\d+):", output)}
    for listed in re.findall(
        rf"(?:rows|lines) ([\d, -]+?)(?: and [\d,]+ more)? of \S*{re.escape(name)}:", output
    ):
        for span in listed.split(", "):
            first, _, last = span.partition("-")
            lines.update(range(int(first), int(last or first) + 1))
    return lines


any_bad_file = st.one_of(mutated_manifests(), broken_yaml(), bad_csv(), bad_jsonl())


@PROPERTY_SETTINGS
@given(bad=any_bad_file)
def test_validate_rejects_bad_input_with_a_located_error(
    bad: BadFile, emulator: Served, no_flow: list[Any]
) -> None:
    check_rejected(bad, "validate", emulator, no_flow)


@PROPERTY_SETTINGS
@given(bad=any_bad_file)
def test_run_rejects_bad_input_before_sending_anything(
    bad: BadFile, emulator: Served, no_flow: list[Any]
) -> None:
    check_rejected(bad, "run", emulator, no_flow)


# -- files that cannot be decoded at all: one located error, nothing sent ----------------------

UNREADABLE = [
    BadFile("bad.csv", b"\xff\xfe\x00id,prompt\n1,x\n", 1, "CSV that is not UTF-8"),
    BadFile("bad.parquet", b"not a parquet file at all", None, "a .parquet file that is not Parquet"),
]


@pytest.mark.parametrize("bad", UNREADABLE, ids=[bad.why for bad in UNREADABLE])
def test_unreadable_data_files_are_rejected_cleanly(
    bad: BadFile, emulator: Served, no_flow: list[Any]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / bad.name
        path.write_bytes(bad.content)
        result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and result.output.startswith("error: "), result.output
    assert bad.name in result.output
