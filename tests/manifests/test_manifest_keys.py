"""Stable item keys: same manifest, same keys; one edited row, one changed key; duplicates reported."""

# Expected messages and YAML rows are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

from pathlib import Path

import pytest

from relaybatch.manifests import ManifestInvalid, load_items, open_manifest

MANIFEST = """
    jobs:
      - name: quiz
        kind: chat
        model: m
        request: {max_tokens: 16}
        prompt: "{q}"
        data: d.csv
"""


def _keys(path: Path) -> list[str]:
    return [item.key for item in load_items(path)]


def test_the_same_manifest_gives_the_same_keys_on_every_load(write, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("id,q\n1,alpha\n2,beta\n3,gamma\n")
    manifest = write("m.yaml", MANIFEST)
    first = _keys(manifest)
    assert first == _keys(manifest)
    assert len(set(first)) == 3


def test_editing_one_row_changes_only_that_rows_key(write, tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,q\n1,alpha\n2,beta\n3,gamma\n")
    manifest = write("m.yaml", MANIFEST)
    before = _keys(manifest)
    data.write_text("id,q\n1,alpha\n2,BETA\n3,gamma\n")
    after = _keys(manifest)
    assert [b == a for b, a in zip(before, after, strict=True)] == [True, False, True]


def test_inserting_a_row_keeps_the_other_keys(write, tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,q\n1,alpha\n3,gamma\n")
    manifest = write("m.yaml", MANIFEST)
    before = set(_keys(manifest))
    data.write_text("id,q\n1,alpha\n2,beta\n3,gamma\n")
    assert before < set(_keys(manifest))


def test_keys_ignore_yaml_key_order_and_layout(write) -> None:
    one = write(
        "one.yaml",
        "jobs:\n  - {name: j, kind: chat, model: m, prompt: hi, request: {max_tokens: 5, temperature: 0.5}, items: [{}]}\n",
    )
    two = write(
        "two.yaml",
        "jobs:\n- items: [{}]\n  request:\n    temperature: 0.5\n    max_tokens: 5\n  prompt: hi\n  model: m\n  kind: chat\n  name: j\n",
    )
    assert _keys(one) == _keys(two)


def test_the_key_depends_on_the_job_name(write) -> None:
    manifest = write(
        "m.yaml",
        "jobs:\n  - {name: a, kind: video, model: m, prompt: x, items: [{}]}\n  - {name: b, kind: video, model: m, prompt: x, items: [{}]}\n",
    )
    first, second = _keys(manifest)
    assert first != second


def test_duplicate_items_are_reported_with_both_locations(write, tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,q\n1,alpha\n2,beta\n3,alpha\n")
    manifest = write("m.yaml", MANIFEST)
    with pytest.raises(ManifestInvalid) as caught:
        load_items(manifest)
    assert [str(p) for p in caught.value.problems] == [
        f"{data}:4: item '3' duplicates the item at {data}:2 (same job and request); remove one"
    ]


def test_a_repeated_item_id_in_one_job_is_reported(write, tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,q\n1,alpha\n1,beta\n")
    manifest = write("m.yaml", MANIFEST)
    problems = open_manifest(manifest).validate().problems
    assert [str(p) for p in problems] == [
        f"{data}:3: id: item id '1' is already used at {data}:2; ids are unique per job"
    ]


def test_repeats_in_a_file_two_jobs_read_name_each_job(write, tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,q\n1,alpha\n1,beta\n")
    job = "kind: chat, model: relay-chat-small, data: d.csv, prompt: '{q}'"
    manifest = write("m.yaml", f"jobs:\n  - {{name: a, {job}}}\n  - {{name: b, {job}}}\n")
    problems = open_manifest(manifest).validate().problems
    assert [str(p) for p in problems] == [
        f"{data}:3: id: job 'a': item id '1' is already used at {data}:2; ids are unique per job",
        f"{data}:3: id: job 'b': item id '1' is already used at {data}:2; ids are unique per job",
    ]


def test_duplicates_are_found_across_batches_and_on_one_yaml_line(
    write, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relaybatch.manifests import duplicates

    monkeypatch.setattr(duplicates, "BATCH_ROWS", 2)
    manifest = write(
        "m.yaml",
        "jobs:\n  - {name: j, kind: video, model: m, prompt: '{p}', items: [{p: a}, {p: b}, {p: c}, {p: a}, {p: c}]}\n",
    )
    problems = [str(p) for p in open_manifest(manifest).validate().problems]
    assert problems == [
        f"{manifest}:2: item 'j-4' duplicates the item at {manifest}:2 (same job and request); remove one",
        f"{manifest}:2: item 'j-5' duplicates the item at {manifest}:2 (same job and request); remove one",
    ]


def test_validation_keeps_bounded_counts_when_every_row_names_a_new_model(tmp_path: Path) -> None:
    from relaybatch.manifests.manifest import MAX_GROUPS, OTHER_MODELS

    table = tmp_path / "t.csv"
    rows = "".join(f"r{n},model-{n},hi,8\n" for n in range(MAX_GROUPS + 50))
    table.write_text("id,model,prompt,max_tokens\n" + rows)
    validation = open_manifest(table).validate()
    assert validation.ok and validation.total == MAX_GROUPS + 50
    assert len(validation.counts) == MAX_GROUPS + 1 and len(validation.routes) == MAX_GROUPS
    assert validation.counts[("t", "chat", OTHER_MODELS)] == 50
