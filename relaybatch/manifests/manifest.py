"""Open a manifest of any format, validate it in one streaming pass, and stream its items.

`open_manifest(path)` reads only the small part up front (YAML structure, headers, templates);
rows are read when `validate()` or `iter_items()` walks them, one at a time, so a data file of
any length expands in flat memory.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from relaybatch.errors import UserError
from relaybatch.manifests.batch_format import batch_job, is_batch_file
from relaybatch.manifests.converters import Route, catalog_families, family_problems, route_of
from relaybatch.manifests.csv_manifest import table_job
from relaybatch.manifests.duplicates import DuplicateFinder, EarlierRows, KeptRows, Repeat, Where
from relaybatch.manifests.expand import JobSource
from relaybatch.manifests.items import Item
from relaybatch.manifests.limits import MAX_INLINE_ITEMS, MAX_YAML_BYTES, megabytes
from relaybatch.manifests.problems import ManifestInvalid, Problem
from relaybatch.manifests.schema import JobSpec, RunSettings
from relaybatch.manifests.sources import RowsFrom
from relaybatch.manifests.text_files import TextFileError, decode_failure, encoding_of
from relaybatch.manifests.wording import closest, findings
from relaybatch.manifests.yaml_jobs import YamlJob
from relaybatch.manifests.yaml_lines import Path_, YamlLimitError, line_of, load_with_lines

MANIFEST_SUFFIXES = (".yaml", ".yml", ".csv", ".jsonl", ".parquet")
# Validation keeps at most this many problems: a million bad rows should not fill memory or a screen.
MAX_PROBLEMS = 500
# Distinct (job, kind, model) groups counted one by one; past it (a table naming a new model on every
# row) the rest are counted together, so the counts stay bounded like everything else validate keeps.
MAX_GROUPS = 1_000
OTHER_MODELS = "(other models)"


@dataclass
class Validation:
    """What a validation pass found: every problem (up to a cap) and item counts per job, kind and model.

    A problem many rows share (same file, field and message) is kept once, with their lines
    (Problem.also_at), so the cap counts distinct problems and a bad column of a million rows
    is one line, not five hundred of the same."""

    problems: list[Problem] = field(default_factory=list)
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # Each text route (job, kind, model, converter or not) and where it is first named: the input of
    # the family check that needs the gateway's catalog (check_routes).
    routes: dict[Route, tuple[str, int]] = field(default_factory=dict)
    truncated: int = 0  # distinct problems found beyond MAX_PROBLEMS
    found: int = 0  # problems found so far, kept, grouped or not
    _kept: dict[tuple[str, str | None, str], int] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, job: str, kind: str, model: str) -> None:
        key = (job, kind, model)
        if key not in self.counts and len(self.counts) >= MAX_GROUPS:
            key = (job, kind, OTHER_MODELS)
        self.counts[key] += 1

    def add(self, problems: list[Problem], cap: int) -> None:
        for problem in problems:
            self.found += 1
            key = (problem.file, problem.field, problem.message)
            index = self._kept.get(key)
            if index is not None and problem.line is not None:
                self.problems[index] = self.problems[index].also_at(problem.line)
            elif len(self.problems) < cap:
                self._kept[key] = len(self.problems)
                self.problems.append(problem)
            else:
                self.truncated += 1

    def raise_if_invalid(self) -> None:
        if self.problems:
            problems = in_file_order(self.problems)
            if self.truncated:
                problems.append(
                    Problem(
                        "",
                        None,
                        None,
                        f"... and {self.truncated} more problems; fix these and validate again to see them",
                    )
                )
            raise ManifestInvalid(problems)


def in_file_order(problems: list[Problem]) -> list[Problem]:
    """Problems by file (in the order the files were first named), then by line."""
    files: dict[str, int] = {}
    for problem in problems:
        files.setdefault(problem.file, len(files))
    return sorted(problems, key=lambda problem: (files[problem.file], problem.line or 0))


@dataclass
class Manifest:
    """A manifest's run settings and jobs; items are expanded on demand."""

    path: Path
    settings: RunSettings
    jobs: list[JobSource]
    problems: list[Problem] = field(default_factory=list)  # structure mistakes found on opening

    @property
    def run_name(self) -> str:
        return self.settings.name or self.path.stem

    def iter_items(self, starts: Mapping[int, RowsFrom | None] | None = None) -> Iterator[Item]:
        """Every item, streamed; raise ManifestInvalid at the first bad row (call validate() first).

        With ``starts`` (job index -> where its appended rows begin, or a partition's range; None:
        the whole job), only the items of those jobs' rows."""
        if self.problems:
            raise ManifestInvalid(self.problems)
        for index, job in enumerate(self.jobs):
            if starts is not None and index not in starts:
                continue
            for item, problems in job.expand(starts[index] if starts is not None else None):
                if problems:
                    raise ManifestInvalid(problems)
                assert item is not None
                yield item

    def validate(
        self,
        max_problems: int = MAX_PROBLEMS,
        *,
        starts: Mapping[int, RowsFrom | None] | None = None,
        earlier: EarlierRows | None = None,
        seen_in: Path | None = None,
        result: Validation | None = None,
    ) -> Validation:
        """Walk every row once, collecting every problem and duplicate; memory stays flat.

        For rows appended since a plan: ``starts`` (job index -> where its new rows begin; other
        jobs are not walked), ``earlier`` (the planned rows' keys and ids, so a new row repeating
        one is found) and ``result`` (what validating the planned rows found, counted on from).
        ``seen_in``: a folder where the keys and ids seen are kept (keys.sqlite, ids.sqlite).
        """
        result = result or Validation()
        result.add(self.problems, max_problems)
        with (
            DuplicateFinder(_seen_file(seen_in, "keys"), earlier.keys if earlier else None) as keys,
            DuplicateFinder(_seen_file(seen_in, "ids"), earlier.ids if earlier else None) as ids,
        ):
            for job_index, job in enumerate(self.jobs):
                if starts is not None and job_index not in starts:
                    continue
                start = starts[job_index] if starts is not None else None
                found_before, items_before = result.found, result.total
                first = start.rows + 1 if start else 1
                for number, (item, problems) in enumerate(job.expand(start), start=first):
                    result.add(problems, max_problems)
                    if item is not None:
                        result.count(item.job, item.kind, _model_of(item))
                        route = route_of(item.job, item.kind, item.request)
                        if (
                            route is not None
                            and route not in result.routes
                            and len(result.routes) < MAX_GROUPS
                        ):
                            result.routes[route] = _route_where(job, item)
                        where = Where(job_index, number, _line_of(item))
                        keys.add(item.key, where, item.item_id)
                        ids.add(id_key(item), where, item.item_id)
                    if keys.full:
                        result.add(self._repeats(keys.flush(), ids.flush()), max_problems)
                empty = (result.found, result.total) == (found_before, items_before)
                if job.empty is not None and start is None and empty:
                    result.add([job.empty], max_problems)
            result.add(self._repeats(keys.flush(), ids.flush()), max_problems)
        return result

    def _repeats(self, same_request: list[Repeat], same_id: list[Repeat]) -> list[Problem]:
        """Problems for repeated requests, and for repeated ids of rows that are not whole repeats."""
        problems = []
        for repeat in same_request:
            first = self._where(repeat.first)
            message = (
                f"{self._job_of(repeat.where)}item '{repeat.label}' duplicates the item at {first} "
                "(same job and request); remove one"
            )
            problems.append(Problem(self.jobs[repeat.where.job].file, repeat.where.line, None, message))
        whole = {repeat.where for repeat in same_request}
        for repeat in same_id:
            if repeat.where not in whole:
                first = self._where(repeat.first)
                message = (
                    f"{self._job_of(repeat.where)}item id '{repeat.label}' is already used at {first}; "
                    "ids are unique per job"
                )
                problems.append(Problem(self.jobs[repeat.where.job].file, repeat.where.line, "id", message))
        return problems

    def _where(self, where: Where) -> str:
        return f"{self.jobs[where.job].file}:{where.line}"

    def _job_of(self, where: Where) -> str:
        """The prefix "job 'b': " when other jobs read the same file (their repeats name the same lines)."""
        file = self.jobs[where.job].file
        shared = sum(job.file == file for job in self.jobs) > 1
        return f"job '{self.jobs[where.job].name}': " if shared else ""


async def check_routes(validation: Validation, client: Any, max_problems: int = MAX_PROBLEMS) -> None:
    """Add to `validation` each text job whose model the gateway's catalog puts in another family than
    its route serves (one GET /v1/models, not billed); raise the client's error when it cannot be read."""
    families = await catalog_families(client)
    validation.add(family_problems(validation.routes, families), max_problems)


def seen_rows(seen_in: Path, what: str) -> KeptRows:
    """The rows a validation with ``seen_in`` kept of ``what`` ("keys": request keys, "ids": item
    ids): what a plan records as its fingerprint."""
    path = _seen_file(seen_in, what)
    assert path is not None
    return KeptRows(path)


def _seen_file(folder: Path | None, name: str) -> Path | None:
    return None if folder is None else folder / f"{name}.sqlite"


def _route_where(job: JobSource, item: Item) -> tuple[str, int]:
    """Where a route is named: the job's `model:` line in a YAML manifest, else the item's row."""
    return job.model_where or (job.file, _line_of(item))


def _line_of(item: Item) -> int:
    line = item.source.rpartition(":")[2]
    return int(line) if line.isdigit() else 0


def id_key(item: Item) -> str:
    """The hex digest an item's id is checked for repeats by (ids are unique per job)."""
    return hashlib.sha256(f"{item.job}\0{item.item_id}".encode()).hexdigest()


def _model_of(item: Item) -> str:
    model = item.request.get("model")
    if model:
        return str(model)
    return f"route:{item.request.get('route', 'search')}" if item.kind == "web_search" else "-"


def open_manifest(path: Path) -> Manifest:
    """Read a manifest's structure (not its rows); raise ManifestInvalid or UserError when it is unusable."""
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the path of a manifest")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _open_yaml(path)
    if suffix == ".jsonl" and is_batch_file(path):
        return Manifest(path, RunSettings(), [batch_job(path)])
    if suffix in (".csv", ".jsonl", ".parquet"):
        return Manifest(path, RunSettings(), [table_job(path)])
    raise UserError(f"{path}: unsupported manifest type '{path.suffix}'; use {', '.join(MANIFEST_SUFFIXES)}")


def _open_yaml(path: Path) -> Manifest:
    document, lines, ambiguous = _load_yaml(path)
    if document is None:
        raise ManifestInvalid(
            [Problem(str(path), 1, None, "is empty; a manifest needs `jobs:` (docs/manifests.md)")]
        )
    if not isinstance(document, dict):
        raise ManifestInvalid(
            [
                Problem(
                    str(path),
                    1,
                    None,
                    "is not a manifest; write a mapping with `jobs:` (and `run:` if needed), "
                    "see docs/manifests.md",
                )
            ]
        )
    # A value YAML reads differently from how it looks (`kind: no`) is reported as that, not again
    # as whatever the schema makes of what YAML read.
    said = [Problem(str(path), line, _field_name(loc), text) for line, loc, text in ambiguous]
    problems = [
        Problem(str(path), line_of(lines, (key,)), str(key), _not_a_field(str(key), _TOP_FIELDS))
        for key in document
        if key not in _TOP_FIELDS
    ]
    settings = RunSettings()
    try:
        settings = RunSettings.model_validate(document.get("run") or {})
    except ValidationError as error:
        problems += _located(path, error, lines, ("run",))
    specs, found = _job_specs(path, document.get("jobs"), lines)
    problems += found
    # An inline row holding such a value is reported as that alone: what YAML made of it (a
    # duplicate of another row, say) is not what the user meant.
    unclear = {loc[:4] for _, loc, _ in ambiguous if loc[:1] == ("jobs",) and loc[2:3] == ("items",)}
    jobs = [
        YamlJob(
            spec, index, path, lines, broken, {row for _, job, _, row in unclear if job == index}
        ).source()
        for index, spec, broken in specs
    ]
    fields = {problem.field for problem in said}
    problems = said + [problem for problem in problems if problem.field not in fields]
    return Manifest(path, settings, jobs, in_file_order(problems))


def _load_yaml(path: Path) -> tuple[Any, dict[Path_, int], list[tuple[int, Path_, str]]]:
    """The YAML document, its line map and its ambiguities; raise ManifestInvalid (located) when it
    cannot be loaded (the only problems that hide the rest of the manifest)."""
    import yaml

    try:
        text = _yaml_text(path)
        return load_with_lines(text)
    except (TextFileError, YamlLimitError) as error:
        raise ManifestInvalid([Problem(str(path), error.line, None, error.message)]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(error, "problem", None) or str(error).splitlines()[0]
        message = f"is not valid YAML ({reason}); check indentation, colons and quotes"
        raise ManifestInvalid([Problem(str(path), line, None, message)]) from None


def _yaml_text(path: Path) -> str:
    """The manifest's text in its encoding, refusing one past MAX_YAML_BYTES at the line it crosses it."""
    encoding = encoding_of(path)
    with open(path, "rb") as handle:
        head = handle.read(MAX_YAML_BYTES + 1)
    if len(head) > MAX_YAML_BYTES:
        line = head[:MAX_YAML_BYTES].count(b"\n") + 1
        raise TextFileError(
            line,
            f"the YAML manifest is longer than {megabytes(MAX_YAML_BYTES)}; "
            "put the rows in a data file (data: rows.csv, .jsonl or .parquet), which streams",
        )
    try:
        return head.decode(encoding)
    except UnicodeDecodeError:
        raise decode_failure(path, encoding) from None


def _job_specs(
    path: Path, jobs: Any, lines: dict[Path_, int]
) -> tuple[list[tuple[int, JobSpec, frozenset[str]]], list[Problem]]:
    """Every job that parses, by its index, with the fields it was refused in (a job refused in some
    fields is kept without them, so its data file and rows are still checked), and a problem for
    each mistake."""
    if not isinstance(jobs, list) or not jobs:
        message = (
            "is required: a list of at least one job; add `jobs:` with `- name: ...` entries"
            if jobs is None
            else "must be a list of at least one job; write each job as `- name: ...` under `jobs:`"
        )
        return [], [Problem(str(path), line_of(lines, ("jobs",)), "jobs", message)]
    specs: list[tuple[int, JobSpec, frozenset[str]]] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        items = job.get("items") if isinstance(job, dict) else None
        if isinstance(items, list) and len(items) > MAX_INLINE_ITEMS:
            message = (
                f"has {len(items):,} inline rows; a job holds at most {MAX_INLINE_ITEMS:,} inline, "
                "put the rows in a data file (data: rows.csv, .jsonl or .parquet)"
            )
            problems.append(
                Problem(str(path), line_of(lines, ("jobs", index, "items")), f"jobs[{index}].items", message)
            )
            continue
        broken: frozenset[str] = frozenset()
        try:
            spec = JobSpec.model_validate(job)
        except ValidationError as error:
            problems += _located(path, error, lines, ("jobs", index))
            salvaged = _without_broken_fields(job, error, index)
            if salvaged is None:
                continue
            spec, broken = salvaged
        if "name" not in broken and spec.name in seen:
            message = (
                f"job name '{spec.name}' is already used by jobs[{seen[spec.name]}]; job names are unique"
            )
            problems.append(
                Problem(str(path), line_of(lines, ("jobs", index, "name")), f"jobs[{index}].name", message)
            )
            # Still checked, under a name of its own: its rows must not look like repeats of the other's.
            spec, broken = spec.model_copy(update={"name": f"job-{index + 1}"}), broken | {"name"}
        seen.setdefault(spec.name, index)
        specs.append((index, spec, broken))
    return specs, problems


def _without_broken_fields(
    job: Any, error: ValidationError, index: int
) -> tuple[JobSpec, frozenset[str]] | None:
    """The job without the fields the schema refused (stand-ins for the required ones), and their
    names; None when a rule over the whole job failed (no model, not one row source)."""
    locations = [finding.loc for finding in findings(error)]
    if not isinstance(job, dict) or any(not loc for loc in locations):
        return None
    broken = frozenset(str(loc[0]) for loc in locations)
    kept = {key: value for key, value in job.items() if key not in broken}
    stand_ins = {"name": f"job-{index + 1}", "kind": "chat", "model": "-"}
    kept.update({name: stand_ins[name] for name in broken & stand_ins.keys()})
    try:
        return JobSpec.model_validate(kept), broken
    except ValidationError:
        return None


# Fields that were documented once: say what replaced them rather than "check its spelling".
_REMOVED = {
    "run.output": "was removed (it never moved the run's files); the run folder is "
    "RUNS_DIR/<run.name>: set --runs-dir or RELAYBATCH_RUNS_DIR",
}
_TOP_FIELDS = ("run", "jobs")


def _not_a_field(name: str, allowed: tuple[str, ...] | list[str]) -> str:
    guess = closest(name, allowed)
    meant = f"did you mean `{guess}`? " if guess else ""
    return f"is not a manifest field; {meant}the fields here are {', '.join(allowed)} (docs/manifests.md)"


def _field_name(loc: tuple[Any, ...]) -> str:
    """A value's path as the user reads it: jobs[0].request.max_tokens."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _located(path: Path, error: ValidationError, lines: dict[Path_, int], prefix: Path_) -> list[Problem]:
    """Each finding of the schema in the project's words, at its YAML line."""
    allowed = list((RunSettings if prefix == ("run",) else JobSpec).model_fields)
    problems = []
    for finding in findings(error, allowed):
        full = (*prefix, *finding.loc)
        field_name = _field_name(full)
        words = finding.words
        if finding.type == "extra_forbidden":
            words = _REMOVED.get(field_name) or _not_a_field(str(finding.loc[-1]), allowed)
        problems.append(Problem(str(path), line_of(lines, full), field_name or None, words))
    return problems
