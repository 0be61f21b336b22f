"""One run, one truth: a run belongs to one manifest, edits supersede, shards never resend.

Every request is counted at the embedded emulator, so "sent nothing" means nothing reached it.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator
from relaybatch.engine import CheckpointStore

pytestmark = pytest.mark.usefixtures("prefect_harness")

CHATS = ("POST", "/v1/chat/completions")
# A 1x1 PNG: image inputs are embedded in requests (a trailing byte tells copies apart).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def chats_sent() -> int:
    return embedded_emulator().state.emulator.request_count(*CHATS)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), terminal_width=400)
    return result.exit_code, result.output


def write_csv(path: Path, rows: int, prompt: str = "Summarise paragraph {n}.") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["id,model,prompt,max_tokens"]
    lines += [f"p{n},relay-chat-small,{prompt.format(n=n)},16" for n in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def answers(path: Path) -> list[tuple[str, str]]:
    table = pq.read_table(path, columns=["item_id", "output_text"])
    return sorted(
        zip(table.column("item_id").to_pylist(), table.column("output_text").to_pylist(), strict=True)
    )


def test_another_manifest_with_the_same_name_is_refused(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    first = write_csv(tmp_path / "a" / "demo.csv", 2)
    other = write_csv(tmp_path / "elsewhere" / "demo.csv", 1, prompt="Something else {n}.")
    assert run("run", str(first), "--runs-dir", runs)[0] == 0
    before = chats_sent()

    code, output = run("run", str(other), "--runs-dir", runs)

    assert code == 1
    assert str(first.resolve()) in output and str(other.resolve()) in output
    assert "--run-name" in output and "run.name" in output and "Traceback" not in output
    assert chats_sent() == before
    assert answers(tmp_path / "runs" / "demo" / "results" / "demo.parquet")[0][0] == "p0"
    assert pq.read_table(tmp_path / "runs" / "demo" / "results" / "demo.parquet").num_rows == 2

    code, output = run(
        "run", str(other), "--runs-dir", runs, "--run-name", "demo-elsewhere", "--budget", "1.50"
    )

    assert code == 0, output
    with CheckpointStore.open_read_only(tmp_path / "runs" / "demo-elsewhere" / "checkpoint.sqlite") as store:
        assert store.run_settings()["budget_usd"] == "1.50"
        path, identity = store.manifest() or ("", "")
    assert path == str(other.resolve()) and identity != hashlib.sha256(other.read_bytes()).hexdigest()
    assert pq.read_table(tmp_path / "runs" / "demo-elsewhere" / "results" / "demo.parquet").num_rows == 1


def test_an_edited_manifest_sends_only_the_edited_rows_and_keeps_one_row_per_input(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "labels.csv", 6)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    lines = manifest.read_text().splitlines()
    lines[2] = "p1,relay-chat-small,An edited prompt one.,16"
    lines[5] = "p4,relay-chat-small,An edited prompt four.,16"
    manifest.write_text("\n".join(lines) + "\n")
    before = chats_sent()

    code, output = run("run", str(manifest), "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before + 2  # exactly the edited rows
    assert "2 new, 2 superseded" in output and "2 requests sent by this execution" in output
    table = pq.read_table(tmp_path / "runs" / "labels" / "results" / "labels.parquet")
    assert sorted(table.column("item_id").to_pylist()) == [f"p{n}" for n in range(6)]  # one row each
    code, status = run("status", "labels", "--runs-dir", runs)
    assert code == 0
    # an edited row is still in the manifest, with a new request: said so, not "no longer in it"
    assert "superseded" in status and "request changed" in status
    assert "no longer in the manifest" not in status
    assert status.count("labels") >= 3  # the counts row and one row per superseded item

    lines[2] = "p1,relay-chat-small,Summarise paragraph 1.,16"  # the edit undone: its answer is back
    manifest.write_text("\n".join(lines) + "\n")
    before = chats_sent()
    code, output = run("run", str(manifest), "--runs-dir", runs)
    assert code == 0, output
    assert chats_sent() == before
    assert "1 superseded, 1 back from superseded" in output


def test_shards_after_a_full_run_send_nothing_and_merge_to_the_same_results(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", 12)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    results = tmp_path / "runs" / "bulk" / "results" / "bulk.parquet"
    unsharded = answers(results)
    before = chats_sent()

    for shard in ("1/2", "2/2", "1/3", "2/3", "3/3"):
        code, output = run("run", str(manifest), "--runs-dir", runs, "--shard", shard)
        assert code == 0, output
    code, output = run("merge", "bulk", "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before  # 0 requests: every item was done in the run's own store
    assert answers(results) == unsharded


def test_shards_first_then_the_whole_run_sends_nothing_more(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", 10)
    before = chats_sent()
    for shard in ("1/2", "2/2"):
        assert run("run", str(manifest), "--runs-dir", runs, "--shard", shard)[0] == 0
    assert chats_sent() == before + 10
    code, output = run("run", str(manifest), "--runs-dir", runs, "--shard", "2/3")  # another split
    assert code == 0, output

    code, output = run("run", str(manifest), "--runs-dir", runs)  # folds the shards into the run

    assert code == 0, output
    assert chats_sent() == before + 10
    assert "done 10" in output
    assert len(answers(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet")) == 10


def test_failed_items_exit_1_and_status_gives_reasons_and_the_resume_command(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = tmp_path / "mixed.csv"
    manifest.write_text(
        "id,model,prompt,max_tokens\nok,relay-chat-small,Hi.,8\nbad,relay-no-such-model,Hi.,8\n"
    )

    code, output = run(
        "run", str(manifest), "--runs-dir", runs, "--concurrency", "2", "--rate-limit-rpm", "600"
    )

    assert code == 1
    assert "failed 1" in output and "relaybatch status mixed" in output
    code, status = run("status", "mixed", "--runs-dir", runs)
    assert code == 0
    assert "failed items" in status and "relay-no-such-model" in status
    assert "last execution finished" in status
    assert f"resume with: relaybatch run {manifest.resolve()} --runs-dir {Path(runs).resolve()}" in status
    with CheckpointStore.open_read_only(tmp_path / "runs" / "mixed" / "checkpoint.sqlite") as store:
        assert (store.run_settings()["concurrency"], store.run_settings()["rate_limit_rpm"]) == (2, 600)


def test_status_resumes_a_run_named_on_the_command_line_under_its_name(tmp_path: Path) -> None:
    """`relaybatch run FILE --run-name NAME`: the manifest alone names another run (its `run.name`,
    else its file name), so the command `status` gives to resume NAME must name it."""
    runs = str(tmp_path / "runs")
    manifest = tmp_path / "mixed.csv"
    manifest.write_text("id,model,prompt,max_tokens\nbad,relay-no-such-model,Hi.,8\n")

    code, output = run("run", str(manifest), "--runs-dir", runs, "--run-name", "renamed")

    assert code == 1, output
    code, status = run("status", "renamed", "--runs-dir", runs)
    assert code == 0, status
    expected = f"relaybatch run {manifest.resolve()} --run-name renamed --runs-dir {Path(runs).resolve()}"
    assert f"resume with: {expected}" in status


@pytest.mark.parametrize("value", ["abc", "-1", "0"])
def test_a_bad_budget_is_a_usage_error(tmp_path: Path, value: str) -> None:
    code, output = run("run", str(write_csv(tmp_path / "x.csv", 1)), "--budget", value)
    assert code == 2
    assert "--budget" in output


def test_status_of_a_run_with_only_shards_shows_them_and_says_to_merge(tmp_path: Path) -> None:
    """As for partitions not merged yet: each shard's row from its files, and the merge command."""
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", 4)
    assert run("run", str(manifest), "--runs-dir", runs, "--shard", "1/2")[0] == 0

    code, output = run("status", "bulk", "--runs-dir", runs)

    assert code == 0, output
    rows = [line for line in output.splitlines() if line.lstrip("│ ").startswith("shard 1/2")]
    assert len(rows) == 1 and "last execution finished" in rows[0], output
    assert "relaybatch merge bulk" in output and "Traceback" not in output


LABELS_YAML = """\
run:
  name: labels
jobs:
  - name: docs
    kind: chat
    model: relay-chat-small
    prompt: "Label: {text}"
    data: docs.csv
    carry: [id]
"""


def labelling_folder(folder: Path, rows: int, text: str = "document {n}") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["id,text"] + [f"d{n},{text.format(n=n)}" for n in range(rows)]
    (folder / "docs.csv").write_text("\n".join(lines) + "\n")
    manifest = folder / "labels.yaml"
    manifest.write_text(LABELS_YAML)
    return manifest


def test_a_copy_of_the_yaml_next_to_other_data_is_refused_naming_both(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    first = labelling_folder(tmp_path / "a", 20)
    other = labelling_folder(tmp_path / "b", 1, text="another data set {n}")  # the same YAML text
    assert run("run", str(first), "--runs-dir", runs)[0] == 0
    before = chats_sent()

    code, output = run("run", str(other), "--runs-dir", runs)

    assert code == 1, output
    assert str(first.resolve()) in output and str(other.resolve()) in output
    assert "data or image file" in output and "Traceback" not in output
    assert chats_sent() == before
    assert pq.read_table(tmp_path / "runs" / "labels" / "results" / "docs.parquet").num_rows == 20


def test_a_copy_moved_with_its_data_is_the_same_run_and_sends_nothing(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    first = labelling_folder(tmp_path / "a", 5)
    assert run("run", str(first), "--runs-dir", runs)[0] == 0
    copy = labelling_folder(tmp_path / "moved", 5)  # YAML and data, byte for byte
    before = chats_sent()

    code, output = run("run", str(copy), "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before
    assert pq.read_table(tmp_path / "runs" / "labels" / "results" / "docs.parquet").num_rows == 5


def test_a_copy_naming_another_image_is_refused(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifests = []
    for folder, extra in (("a", b""), ("b", b"\0")):  # the second image differs by a trailing byte
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "photo.png").write_bytes(PNG + extra)
        (tmp_path / folder / "d.csv").write_text("id,photo\np1,photo.png\n")
        manifest = tmp_path / folder / "look.yaml"
        manifest.write_text(
            "run: {name: look}\njobs:\n  - {name: look, kind: chat, model: relay-chat-small, "
            "prompt: Describe it., image: photo, data: d.csv}\n"
        )
        manifests.append(manifest)
    assert run("run", str(manifests[0]), "--runs-dir", runs)[0] == 0

    code, output = run("run", str(manifests[1]), "--runs-dir", runs)

    assert code == 1, output
    assert str(manifests[0].resolve()) in output and str(manifests[1].resolve()) in output


def test_shards_after_an_edit_was_undone_bring_superseded_items_back_without_sending(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = labelling_folder(tmp_path / "a", 20)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    results = tmp_path / "runs" / "labels" / "results" / "docs.parquet"
    original = answers(results)
    data = manifest.parent / "docs.csv"
    first_data = data.read_text()
    data.write_text(first_data.replace("document", "edited document"))  # the same manifest, edited
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0  # 20 superseded, 20 sent
    data.write_text(first_data)  # the edit undone
    before = chats_sent()

    for shard in ("1/2", "2/2"):
        code, output = run("run", str(manifest), "--runs-dir", runs, "--shard", shard)
        assert code == 0, output
        assert "back from superseded" in output
    assert chats_sent() == before  # the 20 items done before the edit were not sent again

    code, output = run("run", str(manifest), "--runs-dir", runs)  # folds the shards into the run

    assert code == 0, output
    assert chats_sent() == before
    assert answers(results) == original


def test_a_data_path_in_a_symlink_loop_is_one_located_error_in_run_as_in_validate(tmp_path: Path) -> None:
    manifest = labelling_folder(tmp_path, 1)
    (tmp_path / "docs.csv").unlink()
    (tmp_path / "docs.csv").symlink_to(tmp_path / "docs.csv")

    for command in (
        ["validate", str(manifest)],
        ["run", str(manifest), "--runs-dir", str(tmp_path / "runs")],
    ):
        code, output = run(*command)

        assert code == 1, output
        assert "Traceback" not in output
        assert f"{manifest}:" in output and "docs.csv" in output and "symbolic link" in output
