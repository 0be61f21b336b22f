"""The plan fingerprint: an unchanged manifest is not planned again, rows appended to a data file
are planned alone (and exactly as a whole plan would plan them), anything else is a whole plan."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from relaybatch.engine import CheckpointStore
from relaybatch.manifests import Manifest, ManifestInvalid
from relaybatch.run import PlannedRun, RunOverrides, Shard, fingerprint, plan_run

# A 1x1 PNG: image inputs are embedded in requests (a trailing byte tells copies apart).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
COLUMNS = ["key", "item_id", "job", "kind", "request", "carry", "source", "state"]


def jsonl_rows(first: int, count: int, blank_every: int = 0) -> str:
    lines = []
    for number in range(first, first + count):
        lines.append(json.dumps({"id": f"r{number}", "model": "relay-chat-small", "prompt": f"row {number}"}))
        if blank_every and number % blank_every == 0:
            lines.append("")  # blank lines move line numbers, not row numbers
    return "\n".join(lines) + "\n"


def csv_rows(first: int, count: int) -> str:
    # A quoted cell holding a line break and CRLF line ends: lines and rows differ.
    return "".join(f'{number},"line one\r\nline {number}"\r\n' for number in range(first, first + count))


def yaml_manifest(folder: Path, image: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.jsonl").write_text(jsonl_rows(0, 30, blank_every=7))
    (folder / "notes.csv").write_text("n,text\r\n" + csv_rows(0, 20))
    image_job = ""
    if image:
        (folder / "a.png").write_bytes(PNG + b"a")
        (folder / "b.png").write_bytes(PNG + b"b")
        (folder / "images.csv").write_text("picture\na.png\nb.png\n")
        image_job = """
  - name: look
    kind: chat
    model: relay-chat-small
    data: images.csv
    prompt: "Describe it."
    image: picture
"""
    manifest = folder / "work.yaml"
    manifest.write_text(
        f"""run:
  name: work
jobs:
  - name: table
    kind: chat
    model: relay-chat-small
    data: table.jsonl
    prompt: "{{prompt}}"
  - name: notes
    kind: chat
    model: relay-chat-small
    data: notes.csv
    prompt: "Note {{n}}: {{text}}"
{image_job}"""
    )
    return manifest


def items(store_path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every item per job, in the order the store holds them (the results' order)."""
    per_job: dict[str, list[dict[str, Any]]] = {}
    with CheckpointStore.open_read_only(store_path) as store:
        for item in store.iter_items(columns=COLUMNS):
            per_job.setdefault(item["job"], []).append(item)
    return per_job


def plan(manifest: Path, runs: Path, **kwargs: Any) -> PlannedRun:
    return plan_run(manifest, runs, **kwargs)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every Manifest.validate call, with the job starts it was given (None: every row)."""
    calls: list[dict[str, Any]] = []
    original = Manifest.validate

    def counted(self: Manifest, *args: Any, **kwargs: Any) -> Any:
        calls.append({"starts": kwargs.get("starts")})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Manifest, "validate", counted)
    return calls


def test_an_unchanged_manifest_is_neither_validated_nor_planned_and_settings_are_still_saved(
    tmp_path: Path, validations: list[dict[str, Any]]
) -> None:
    manifest = yaml_manifest(tmp_path / "in")
    first = plan(manifest, tmp_path / "runs")
    assert (first.planned, first.added) == ("whole", 50)
    before = items(first.paths.checkpoint)

    again = plan(manifest, tmp_path / "runs", overrides=RunOverrides(budget_usd=Decimal("2")))

    assert (again.planned, again.added, again.superseded) == ("unchanged", 0, 0)
    assert len(validations) == 1  # the first plan's only
    assert items(again.paths.checkpoint) == before
    with CheckpointStore.open_read_only(again.paths.checkpoint) as store:
        assert store.run_settings()["budget_usd"] == "2"


def test_the_catalog_check_of_an_unchanged_manifest_sees_the_recorded_routes(tmp_path: Path) -> None:
    manifest = yaml_manifest(tmp_path / "in")
    seen: list[Any] = []
    plan(
        manifest, tmp_path / "runs", check=lambda found: seen.append((dict(found.counts), dict(found.routes)))
    )

    plan(
        manifest, tmp_path / "runs", check=lambda found: seen.append((dict(found.counts), dict(found.routes)))
    )

    assert seen[0] == seen[1]
    assert sum(seen[1][0].values()) == 50 and len(seen[1][1]) == 2


def test_rows_appended_are_planned_alone_and_exactly_as_a_whole_plan_gives_them(
    tmp_path: Path, validations: list[dict[str, Any]]
) -> None:
    manifest = yaml_manifest(tmp_path / "in")
    plan(manifest, tmp_path / "runs")
    with (tmp_path / "in" / "table.jsonl").open("a") as handle:
        handle.write("\n" + jsonl_rows(30, 12, blank_every=5))
    with (tmp_path / "in" / "notes.csv").open("a", newline="") as handle:
        handle.write(csv_rows(20, 4))

    grown = plan(manifest, tmp_path / "runs")
    whole = plan(manifest, tmp_path / "fresh")

    assert (grown.planned, grown.added, grown.superseded) == ("appended", 16, 0)
    assert validations[1]["starts"] is not None and validations[2]["starts"] is None
    assert items(grown.paths.checkpoint) == items(whole.paths.checkpoint)
    last = items(grown.paths.checkpoint)["notes"][-1]
    assert last["source"].endswith("notes.csv:49") and last["item_id"] == "notes-24"
    with (
        CheckpointStore.open_read_only(grown.paths.checkpoint) as incremental,
        CheckpointStore.open_read_only(whole.paths.checkpoint) as fresh,
    ):
        assert incremental.plan_summary() == fresh.plan_summary()
        assert list(incremental.plan_inputs()) == list(fresh.plan_inputs())
    assert plan(manifest, tmp_path / "runs").planned == "unchanged"


def test_an_appended_bad_row_is_named_by_its_line_in_the_whole_file(tmp_path: Path) -> None:
    manifest = yaml_manifest(tmp_path / "in")
    plan(manifest, tmp_path / "runs")
    table = tmp_path / "in" / "table.jsonl"
    lines = len(table.read_text().splitlines())
    with table.open("a") as handle:
        handle.write(jsonl_rows(30, 2) + "{not json\n")

    with pytest.raises(ManifestInvalid) as refused:
        plan(manifest, tmp_path / "runs")

    assert [(problem.file, problem.line) for problem in refused.value.problems] == [(str(table), lines + 3)]
    assert len(items(tmp_path / "runs" / "work" / "checkpoint.sqlite")["table"]) == 30  # nothing added


def test_appended_rows_repeating_planned_rows_are_refused_with_where_the_first_is(tmp_path: Path) -> None:
    manifest = tmp_path / "labels.jsonl"
    manifest.write_text(jsonl_rows(0, 5))
    plan(manifest, tmp_path / "runs")
    with manifest.open("a") as handle:
        handle.write(jsonl_rows(2, 1))  # the same request as line 3
        handle.write(json.dumps({"id": "r4", "model": "relay-chat-small", "prompt": "other"}) + "\n")
        handle.write(jsonl_rows(5, 1) + jsonl_rows(5, 1))  # a repeat among the new rows

    with pytest.raises(ManifestInvalid) as refused:
        plan(manifest, tmp_path / "runs")

    found = sorted((problem.line, problem.field or "", problem.message) for problem in refused.value.problems)
    assert found[0][0] == 6 and f"{manifest}:3" in found[0][2] and "same job and request" in found[0][2]
    assert found[1][:2] == (7, "id") and f"{manifest}:5" in found[1][2]
    assert found[2][0] == 9 and f"{manifest}:8" in found[2][2]
    assert len(found) == 3


def test_an_appended_row_that_was_superseded_comes_back(tmp_path: Path) -> None:
    manifest = tmp_path / "labels.jsonl"
    manifest.write_text(jsonl_rows(0, 3))
    plan(manifest, tmp_path / "runs")
    manifest.write_text(jsonl_rows(0, 2))  # truncated: row r2 is superseded
    assert plan(manifest, tmp_path / "runs").superseded == 1

    with manifest.open("a") as handle:
        handle.write(jsonl_rows(2, 1))
    back = plan(manifest, tmp_path / "runs")

    assert (back.planned, back.added, back.restored) == ("appended", 0, 1)
    states = [item["state"] for item in items(back.paths.checkpoint)["labels"]]
    assert states == ["pending"] * 3


@pytest.mark.parametrize(
    "change",
    ["a byte in the middle", "truncated", "replaced by one of equal size", "no newline at the end"],
)
def test_any_other_change_of_a_data_file_is_a_whole_plan(tmp_path: Path, change: str) -> None:
    manifest = yaml_manifest(tmp_path / "in")
    table = tmp_path / "in" / "table.jsonl"
    if change == "no newline at the end":
        table.write_bytes(table.read_bytes().rstrip(b"\n"))
    plan(manifest, tmp_path / "runs")
    text = table.read_text()
    if change == "a byte in the middle":
        table.write_text(text.replace("row 12", "row 99", 1) + jsonl_rows(40, 1))  # and grown
    elif change == "truncated":
        table.write_text(text[: text.index('{"id": "r20"')])
    elif change == "replaced by one of equal size":
        table.write_text(text.replace("row 12", "wor 12", 1))
    else:
        table.write_text(text + "\n" + jsonl_rows(50, 1))  # ended mid-line: not a clean append

    again = plan(manifest, tmp_path / "runs")
    whole = plan(manifest, tmp_path / "fresh")

    assert again.planned == "whole"
    assert again.superseded >= 1 or change == "no newline at the end"

    def by_key(per_job: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        # An edited row's item is added after the others: the order is the store's, not the file's.
        return {
            job: sorted(
                (item for item in rows if item["state"] != "superseded"), key=lambda item: item["key"]
            )
            for job, rows in per_job.items()
        }

    assert by_key(items(again.paths.checkpoint)) == by_key(items(whole.paths.checkpoint))


def test_a_changed_yaml_or_parquet_file_is_a_whole_plan(tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder = tmp_path / "in"
    manifest = yaml_manifest(folder)
    plan(manifest, tmp_path / "runs")
    manifest.write_text(manifest.read_text().replace("Note {n}", "Note number {n}"))
    assert plan(manifest, tmp_path / "runs").planned == "whole"

    table = folder / "rows.parquet"
    pq.write_table(
        pyarrow.table({"id": ["a", "b"], "model": ["relay-chat-small"] * 2, "prompt": ["x", "y"]}), table
    )
    assert plan(table, tmp_path / "runs").added == 2
    assert plan(table, tmp_path / "runs").planned == "unchanged"
    pq.write_table(
        pyarrow.table({"id": ["a", "b", "c"], "model": ["relay-chat-small"] * 3, "prompt": ["x", "y", "z"]}),
        table,
    )
    again = plan(table, tmp_path / "runs")
    assert (again.planned, again.added) == ("whole", 1)


def test_a_changed_image_file_is_a_whole_plan(tmp_path: Path) -> None:
    manifest = yaml_manifest(tmp_path / "in", image=True)
    plan(manifest, tmp_path / "runs")
    assert plan(manifest, tmp_path / "runs").planned == "unchanged"

    (tmp_path / "in" / "b.png").write_bytes(PNG + b"c")  # same size, other bytes
    again = plan(manifest, tmp_path / "runs")

    assert (again.planned, again.added, again.superseded) == ("whole", 1, 1)
    assert plan(manifest, tmp_path / "runs").planned == "unchanged"


def test_each_shard_plans_its_share_of_the_appended_rows(tmp_path: Path) -> None:
    manifest = tmp_path / "labels.jsonl"
    manifest.write_text(jsonl_rows(0, 40))
    shards = [Shard.parse("1/2"), Shard.parse("2/2")]
    for shard in shards:
        plan(manifest, tmp_path / "runs", shard=shard)
    with manifest.open("a") as handle:
        handle.write(jsonl_rows(40, 20))

    grown = [plan(manifest, tmp_path / "runs", shard=shard) for shard in shards]
    whole = plan(manifest, tmp_path / "fresh")

    assert [planned.planned for planned in grown] == ["appended", "appended"]
    assert sum(planned.added for planned in grown) == 20
    shares = [item for planned in grown for item in items(planned.paths.checkpoint)["labels"]]
    assert sorted(shares, key=lambda item: item["key"]) == sorted(
        items(whole.paths.checkpoint)["labels"], key=lambda item: item["key"]
    )
    # A new row repeating an old one is refused by every shard, whichever holds the old row.
    with manifest.open("a") as handle:
        handle.write(jsonl_rows(3, 1))
    for shard in shards:
        with pytest.raises(ManifestInvalid, match=f"{manifest}:4"):
            plan(manifest, tmp_path / "runs", shard=shard)


def test_items_added_outside_a_plan_make_the_next_plan_whole(tmp_path: Path) -> None:
    manifest = tmp_path / "labels.jsonl"
    manifest.write_text(jsonl_rows(0, 3))
    planned = plan(manifest, tmp_path / "runs")
    other = tmp_path / "other.jsonl"
    other.write_text(jsonl_rows(10, 1))
    with CheckpointStore(planned.paths.checkpoint) as store:
        from relaybatch.manifests import open_manifest

        store.add_items(open_manifest(other).iter_items())
        assert store.plan_summary() is None

    again = plan(manifest, tmp_path / "runs")

    assert (again.planned, again.superseded) == ("whole", 1)


@pytest.mark.parametrize("state", ["pending", "superseded"])
def test_an_item_named_anew_by_the_manifest_takes_its_new_id_source_and_carried_values(
    tmp_path: Path, state: str
) -> None:
    # The key is (job, kind, request): a row whose id (or carried column, or line) changed with the
    # same request is the same item, and it keeps its answer; it must not keep its old names.
    manifest = tmp_path / "labels.csv"
    manifest.write_text("id,model,prompt,tag\nr0,relay-chat-small,zero,a\nr1,relay-chat-small,one,b\n")
    first = plan(manifest, tmp_path / "runs")
    if state == "superseded":  # r1 left the manifest; it comes back under another id
        manifest.write_text("id,model,prompt,tag\nr0,relay-chat-small,zero,a\n")
        assert plan(manifest, tmp_path / "runs").superseded == 1
    with CheckpointStore.open_read_only(first.paths.checkpoint) as store:
        mark = store.change_mark()
    manifest.write_text("id,model,prompt,tag\n\nx1,relay-chat-small,one,b\nr0,relay-chat-small,zero,a\n")

    again = plan(manifest, tmp_path / "runs")
    whole = plan(manifest, tmp_path / "fresh")

    assert again.added == 0
    named = {item["key"]: item for item in items(again.paths.checkpoint)["labels"]}
    fresh = {item["key"]: item for item in items(whole.paths.checkpoint)["labels"]}
    for key, item in fresh.items():
        assert {name: named[key][name] for name in ("item_id", "carry", "source")} == {
            name: item[name] for name in ("item_id", "carry", "source")
        }
    with CheckpointStore.open_read_only(again.paths.checkpoint) as store:
        assert store.change_mark() != mark  # the results show the new id: they are written again
        renamed = [event for event in store.iter_events() if event["state"] == "renamed"]
    assert len(renamed) == 1  # x1's id; r0 only moved to another line


def test_a_file_that_grows_while_it_is_read_leaves_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relaybatch.run import fingerprint

    manifest = tmp_path / "labels.jsonl"
    manifest.write_text(jsonl_rows(0, 3))
    plan(manifest, tmp_path / "runs")
    with manifest.open("a") as handle:
        handle.write(jsonl_rows(3, 2))
    real_size = fingerprint._size
    monkeypatch.setattr(fingerprint, "_size", lambda path: (real_size(path) or 0) + 1)  # it grew meanwhile

    grown = plan(manifest, tmp_path / "runs")  # appended rows first, then the whole file

    assert (grown.planned, grown.added, grown.superseded) == ("whole", 2, 0)
    with CheckpointStore.open_read_only(grown.paths.checkpoint) as store:
        assert store.plan_summary() is None  # the next run plans the whole manifest again
    monkeypatch.undo()
    assert plan(manifest, tmp_path / "runs").planned == "whole"
    assert plan(manifest, tmp_path / "runs").planned == "unchanged"


def test_line_ends_are_counted_as_the_readers_count_them(tmp_path: Path) -> None:
    from relaybatch.run.fingerprint import read_file

    table = tmp_path / "rows.csv"
    table.write_bytes(b'a,b\r\n1,"x\r\ny"\n2,z\r3,w\n')
    state, prefix_sha = read_file(table, "data", prefix=5)

    assert (state.lines, state.ends_with_newline, state.quotes_even, state.appendable) == (
        5,
        True,
        True,
        True,
    )
    assert prefix_sha is not None
    table.write_bytes(b"a,b\r\n1,z\r")  # ends in a lone \r: an appended \n would join it
    assert not read_file(table, "data")[0].appendable
    table.write_bytes(b'a,b\n1,"open\n')  # ends inside a quoted cell
    assert not read_file(table, "data")[0].appendable


@pytest.mark.parametrize("first", ["whole", "appended"])
def test_rows_appended_while_a_plan_reads_the_file_are_not_taken_for_new_rows_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    # A producer appends to the data file while a run plans: the plan may read the new rows, so
    # the next run must not plan them again as rows appended after what the fingerprint recorded.
    manifest = yaml_manifest(tmp_path / "in")
    table = tmp_path / "in" / "table.jsonl"
    if first == "appended":
        plan(manifest, tmp_path / "runs")
        with table.open("a") as handle:
            handle.write(jsonl_rows(30, 3))
    original = fingerprint.compare

    def then_append(store_path: Path, manifest: Manifest) -> fingerprint.Decision:
        decision = original(store_path, manifest)
        with table.open("a") as handle:
            handle.write(jsonl_rows(100, 4))
        return decision

    monkeypatch.setattr(fingerprint, "compare", then_append)
    during = plan(manifest, tmp_path / "runs")
    monkeypatch.setattr(fingerprint, "compare", original)
    assert during.planned == "whole"  # an append read while it grew is planned again, whole

    again = plan(manifest, tmp_path / "runs")
    whole = plan(manifest, tmp_path / "fresh")

    assert again.planned == "whole" and again.added == 0
    assert items(again.paths.checkpoint) == items(whole.paths.checkpoint)
    assert plan(manifest, tmp_path / "runs").planned == "unchanged"
