"""Every kind of mistake is reported with its file, line or row, and field, all in one list."""

# Expected messages and YAML rows are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

from pathlib import Path

import pytest
from manifest_helpers import problems as _problems

from relaybatch.manifests import ManifestInvalid, open_manifest
from relaybatch.manifests.schema import JobSpec

JOB_FIELDS = ", ".join(JobSpec.model_fields)  # the hint for an unknown job field lists them


def test_structure_mistakes_name_their_yaml_line_and_field(write) -> None:
    manifest = write(
        "m.yaml",
        """
        run:
          concurrency: 0
          uncertain: maybe
        jobs:
          - name: a
            kind: chatt
            model: m
            items: []
          - name: b
            kind: chat
            promt: "{x}"
            items: []
        """,
    )
    problems = _problems(manifest)
    assert (
        f"{manifest}:2: run.concurrency: is 0, below the least allowed (1); use 1 or more (e.g. concurrency: 16)"
        in problems
    )
    assert f"{manifest}:3: run.uncertain: 'maybe' is not allowed here; use one of report, resend" in problems
    assert (
        f"{manifest}:6: jobs[0].kind: 'chatt' is not allowed here; use one of chat, responses, messages, "
        "generate_content, image, video, video_v1, judgment, web_search (did you mean 'chat'?)"
    ) in problems
    assert (
        f"{manifest}:11: jobs[1].promt: is not a manifest field; did you mean `prompt`? the fields here are "
        f"{JOB_FIELDS} (docs/manifests.md)"
    ) in problems


def test_a_job_needs_a_model_and_exactly_one_row_source(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: a, kind: chat, prompt: x, items: [{}]}
          - {name: b, kind: chat, model: m, prompt: x}
        """,
    )
    assert _problems(manifest) == [
        f"{manifest}:2: jobs[0].model: is required for kind chat; name a model ID from GET /v1/models "
        "(e.g. model: relay-chat-small)",
        f"{manifest}:3: jobs[1]: has no rows; give data (a CSV, JSONL or Parquet file, e.g. data: rows.csv) "
        "or items (inline rows)",
    ]


def test_a_key_written_twice_is_refused_at_its_second_line(write) -> None:
    # PyYAML keeps the last of two equal keys: the prompt sent would not be the one the user reads first.
    manifest = write(
        "m.yaml",
        """
        base: &base {kind: chat, model: m}
        jobs:
          - <<: *base
            name: a
            prompt: "hi"
            prompt: "bye"
            model: other
            items: [{x: 1, x: 2}]
        """,
    )
    problems = _problems(manifest)
    assert (
        f"{manifest}:6: jobs[0].prompt: is written twice in this mapping (first at line 5); keep one"
        in problems
    )
    assert (
        f"{manifest}:8: jobs[0].items[0].x: is written twice in this mapping (first at line 8); keep one"
        in problems
    )
    # A merge key's values may be overridden: that is what `<<` is for.
    assert not any("model: is written twice" in problem for problem in problems)


def test_yaml_1_1_booleans_are_refused_and_quoted_ones_are_text(write) -> None:
    # The Norway problem: `country: NO` is false in YAML 1.1, and the prompt would say "False".
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: chat
            model: m
            prompt: "{country}"
            request: {stream: false}
            items: [{country: NO}, {country: 'NO'}, {country: On}, {country: "yes"}, {country: true}]
        """,
    )
    assert _problems(manifest) == [
        f"{manifest}:7: jobs[0].items[0].country: NO is read by YAML as false; quote it ('NO') to keep the text, or write false",
        f"{manifest}:7: jobs[0].items[2].country: On is read by YAML as true; quote it ('On') to keep the text, or write true",
    ]
    fixed = write("fixed.yaml", manifest.read_text().replace("NO}", "'NO'}").replace("On}", "'On'}"))
    prompts = [item.request["messages"][-1]["content"] for item in open_manifest(fixed).iter_items()]
    assert prompts == ["NO", "NO", "On", "yes", "True"]


def test_a_quote_never_closed_is_refused_at_its_row_instead_of_swallowing_the_rest(write) -> None:
    # Before, the cell ran to the end of the file: 1 item for a table of 3 rows, and no error.
    table = write("t.csv", 'id,model,prompt\nq1,m,fine\nq2,m,"open\nq3,m,lost\nq4,m,lost too\n')
    assert _problems(table) == [
        f"{table}:3: is not valid CSV (unexpected end of data) in the row that starts here; a cell that "
        'opens with a quote must end with one, and a quote inside a quoted cell is written twice ("")'
    ]
    fine = write("fine.csv", 'id,model,prompt\nq1,m,"a ""quoted"" word\nover two lines"\nq2,m,b\n')
    assert [item.item_id for item in open_manifest(fine).iter_items()] == ["q1", "q2"]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            "id,model,prompt,prompt",
            "column 'prompt' is named twice in the header; rename or remove one (each column is one field)",
        ),
        ("id,model,,prompt", "column 3 of the header has no name; name it or remove the column"),
    ],
)
def test_a_csv_header_naming_a_column_twice_or_not_at_all_is_refused(
    write, header: str, message: str
) -> None:
    # Before, the last of two equal columns silently won, and a nameless column became a request field "".
    table = write("t.csv", f"{header}\nq1,m,a,b\n")
    assert _problems(table) == [f"{table}:1: {message}"]
    manifest = write(
        "m.yaml", "jobs:\n  - {name: a, kind: chat, model: m, prompt: '{prompt}', data: t.csv}\n"
    )
    assert _problems(manifest) == [f"{table}:1: {message}"]


def test_a_run_name_of_dots_and_budgets_too_big_to_show_are_refused(write) -> None:
    manifest = write(
        "m.yaml",
        """
        run: {name: "..", budget_usd: "1e400"}
        jobs:
          - {name: a, kind: chat, model: m, prompt: x, items: [{q: 1}], budget_usd: "2000000000000"}
        """,
    )
    assert _problems(manifest) == [
        f"{manifest}:1: run.name: '..' is not a folder name; use letters, digits, . _ -",
        f'{manifest}:1: run.budget_usd: is 1e400, above the most allowed (1,000,000,000,000); use 1,000,000,000,000 or less (e.g. budget_usd: "5.00")',
        f'{manifest}:3: jobs[0].budget_usd: is 2000000000000, above the most allowed (1,000,000,000,000); use 1,000,000,000,000 or less (e.g. budget_usd: "5.00")',
    ]


def test_whole_numbers_written_as_floats_are_integers_and_nan_is_refused(write, tmp_path: Path) -> None:
    # pandas writes an integer column with a gap as floats: 16.0 in Parquet, "16.0" in CSV. Both were
    # refused ("'16.0' is not a number"), and a NaN temperature passed, to be sent as invalid JSON.
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    columns = {"id": ["a", "b", "c"], "model": ["m"] * 3, "prompt": ["x", "y", "z"]}
    pq.write_table(
        pa.table({**columns, "max_tokens": [16.0, 16.5, 8.0], "temperature": [0.5, 1.0, float("nan")]}), table
    )
    assert _problems(table) == [
        f"{table}:2: max_tokens: '16.5' is not a whole number; write one (e.g. max_tokens: 64)",
        f"{table}:3: temperature: 'nan' is not a finite number; write a number (e.g. temperature: 0.2)",
    ]
    csv = write("t.csv", "id,model,prompt,max_tokens,top_p\na,m,x,16.0,0.5\nb,m,y,16,1\n")
    requests = [item.request for item in open_manifest(csv).iter_items()]
    assert [(request["max_tokens"], request["top_p"]) for request in requests] == [(16, 0.5), (16, 1.0)]
    assert all(type(request["max_tokens"]) is int for request in requests)


def test_broken_yaml_names_its_line(write) -> None:
    manifest = write("m.yaml", "jobs:\n  - name: a\n    kind: [chat\n")
    (problem,) = _problems(manifest)
    assert problem.startswith(f"{manifest}:") and "is not valid YAML" in problem


def test_a_template_naming_a_missing_column_points_at_the_template(write, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("id,question\n1,hi\n")
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: chat
            model: m
            prompt: "{questoin}"
            request: {max_tokens: "{limit}"}
            carry: [topic]
            data: d.csv
        """,
    )
    problems = _problems(manifest)
    assert problems == [
        f"{manifest}:5: jobs[0].prompt: names column 'questoin' that d.csv does not have (columns: id, question); use one of them, or add the column",
        f"{manifest}:6: jobs[0].request.max_tokens: names column 'limit' that d.csv does not have "
        "(columns: id, question); use one of them, or add the column",
        f"{manifest}:7: jobs[0].carry: names column 'topic' that d.csv does not have (columns: id, question); use one of them, or add the column",
    ]


def test_a_row_missing_a_template_column_names_its_row(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: chat
            model: m
            prompt: "{q}"
            items:
              - {q: fine}
              - {p: oops}
        """,
    )
    assert _problems(manifest) == [
        f"{manifest}:8: has no column q that the job's templates use; add it to the row, or change the template"
    ]


def test_unsafe_placeholders_are_refused(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: a, kind: chat, model: m, prompt: "{q.__class__}", items: [{q: x}]}
        """,
    )
    (problem,) = _problems(manifest)
    assert "jobs[0].prompt: bad placeholder {q.__class__}" in problem


def test_missing_data_file_is_named(write) -> None:
    manifest = write("m.yaml", "jobs:\n  - {name: a, kind: chat, model: m, prompt: x, data: none.csv}\n")
    assert _problems(manifest) == [
        f"{manifest}:2: jobs[0].data: data file 'none.csv' not found next to the manifest; "
        "check the path (it is relative to m.yaml's folder)"
    ]


def test_bad_rows_in_a_data_file_name_the_data_file_and_line(write, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "a"}\n{broken\n\n[1, 2]\n{"q": "b", "limit": "lots"}\n')
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: a, kind: messages, model: m, prompt: "{q}", request: {max_tokens: "{limit}"}, data: d.jsonl}
        """,
    )
    data = tmp_path / "d.jsonl"
    assert _problems(manifest) == [
        f"{data}:1: has no column limit that the job's templates use; add it to the row, or change the template",
        f"{data}:2: is not valid JSON (Expecting property name enclosed in double quotes); "
        "write one JSON object per line",
        f"{data}:4: is not a JSON object; write one object per line",
        f"{data}:5: max_tokens: 'lots' is not a number; write a number (e.g. max_tokens: 64)",
    ]


def test_image_inputs_that_cannot_be_read_name_their_row(write, tmp_path: Path, png: bytes) -> None:
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "ok.png").write_bytes(png)
    (tmp_path / "pics" / "fake.png").write_bytes(b"not an image")
    (tmp_path / "pics" / "d.csv").write_text("photo\nok.png\nmissing.png\nfake.png\n!!notbase64!!\n")
    manifest = write(
        "m.yaml",
        "jobs:\n  - {name: a, kind: generate_content, model: m, prompt: edit, image: photo, data: pics/d.csv}\n",
    )
    data = tmp_path / "pics" / "d.csv"
    assert _problems(manifest) == [
        f"{data}:3: photo: image file 'missing.png' not found; check the path (paths are relative to {tmp_path / 'pics'})",
        f"{data}:4: photo: 'fake.png' is not a PNG, JPEG, GIF or WEBP image; convert it to one of those",
        f"{data}:5: photo: is neither an image file path nor valid base64 image bytes; give the path of an image file or its bytes in base64",
    ]


def test_all_problems_come_together_and_are_capped(write) -> None:
    rows = "\n".join(f"      - {{n: {20 + i}}}" for i in range(30))
    manifest = write(
        "m.yaml",
        f'jobs:\n  - name: a\n    kind: image\n    model: m\n    prompt: x\n    request: {{n: "{{n}}"}}\n    items:\n{rows}\n',
    )
    validation = open_manifest(manifest).validate(max_problems=10)
    assert len(validation.problems) == 10 and validation.truncated == 20
    with pytest.raises(ManifestInvalid) as caught:
        validation.raise_if_invalid()
    assert "... and 20 more problems" in str(caught.value)


def test_one_pass_reports_structure_templates_rows_files_and_kind_checks_together(
    write, tmp_path: Path, png: bytes
) -> None:
    (tmp_path / "cat.png").write_bytes(png)
    (tmp_path / "d.csv").write_text("id,q,photo\n1,hi,cat.png\n2,ho,dog.png\n")
    (tmp_path / "r.jsonl").write_text('{"q": "a"}\n{broken\n{"q": "b", "n": "lots"}\n')
    manifest = write(
        "m.yaml",
        """
        run:
          concurrency: 0
        colour: blue
        jobs:
          - {name: bad, kind: chatt, model: m, prompt: x, items: [{q: 1}]}
          - {name: cols, kind: chat, model: m, prompt: "{questoin}", image: photo, data: d.csv}
          - {name: rows, kind: image, model: m, prompt: "{q}", request: {n: "{n}"}, data: r.jsonl}
          - {name: kinds, kind: messages, model: m, prompt: "{q}", items: [{q: 1}, {q: 2}]}
          - {name: kinds, kind: chat, model: m, prompt: x, items: [{q: 1}]}
          - {name: none, kind: chat, model: m, prompt: x, items: []}
        """,
    )
    data, rows = tmp_path / "d.csv", tmp_path / "r.jsonl"
    assert _problems(manifest) == [
        f"{manifest}:2: run.concurrency: is 0, below the least allowed (1); use 1 or more (e.g. concurrency: 16)",
        f"{manifest}:3: colour: is not a manifest field; the fields here are run, jobs (docs/manifests.md)",
        f"{manifest}:5: jobs[0].kind: 'chatt' is not allowed here; use one of chat, responses, messages, "
        "generate_content, image, video, video_v1, judgment, web_search (did you mean 'chat'?)",
        f"{manifest}:6: jobs[1].prompt: names column 'questoin' that d.csv does not have (columns: id, q, photo); use one of them, or add the column",
        # Once, at the job's line: the request the manifest writes lacks it, whatever the row.
        f"{manifest}:8: jobs[3].request.max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)",
        f"{manifest}:9: jobs[4].name: job name 'kinds' is already used by jobs[3]; job names are unique",
        f"{manifest}:10: jobs[5].items: gives no rows; give at least one row",
        f"{data}:3: photo: image file 'dog.png' not found; check the path (paths are relative to {tmp_path})",
        f"{rows}:1: has no column n that the job's templates use; add it to the row, or change the template",
        f"{rows}:2: is not valid JSON (Expecting property name enclosed in double quotes); "
        "write one JSON object per line",
        f"{rows}:3: n: 'lots' is not a number; write a number (e.g. n: 1)",
    ]


def test_a_row_with_a_bad_input_still_gets_its_gateway_checks(write, tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("q,photo,limit\nhi,missing.png,lots\n")
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: a, kind: messages, model: m, prompt: "{q}", image: photo, request: {temperature: 3}, data: d.csv}
        """,
    )
    data = tmp_path / "d.csv"
    assert _problems(manifest) == [
        f"{manifest}:2: jobs[0].request.max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)",
        f"{manifest}:2: jobs[0].request.temperature: is 3, above the most allowed (1); use 1 or less (e.g. temperature: 0.2)",
        f"{data}:2: photo: image file 'missing.png' not found; check the path (paths are relative to {tmp_path})",
    ]


def test_run_output_was_removed_and_says_what_replaced_it(write) -> None:
    manifest = write(
        "m.yaml", "run:\n  output: out\njobs:\n  - {name: a, kind: chat, model: m, prompt: x, items: [{}]}\n"
    )
    assert _problems(manifest) == [
        f"{manifest}:2: run.output: was removed (it never moved the run's files); the run folder is "
        "RUNS_DIR/<run.name>: set --runs-dir or RELAYBATCH_RUNS_DIR"
    ]


def test_gif_inputs_are_refused_for_generate_content_only(write, tmp_path: Path) -> None:
    gif = b"GIF89a" + b"\x00" * 20
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "anim.gif").write_bytes(gif)
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: edit, kind: generate_content, model: m, prompt: x, image: photo, items: [{photo: pics/anim.gif}, {photo: pics/none.png}]}
          - {name: look, kind: chat, model: m, prompt: x, image: photo, items: [{photo: pics/anim.gif}]}
          - name: raw
            kind: generate_content
            model: m
            request: {contents: [{parts: [{inlineData: {mimeType: image/gif, data: R0lG}}]}]}
            items: [{}]
        """,
    )
    assert _problems(manifest) == [
        f"{manifest}:2: photo: is image/gif, which generate-content does not accept; convert it to PNG, JPEG or WEBP",
        f"{manifest}:2: photo: image file 'pics/none.png' not found; check the path (paths are relative to {tmp_path})",
        f"{manifest}:7: jobs[2].request.contents[0].parts[0]: mimeType image/gif is not accepted; use PNG, JPEG or WEBP",
    ]
