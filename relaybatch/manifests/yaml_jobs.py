"""YAML jobs to job sources: template checks up front, then one item per inline or data row."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from relaybatch.kinds import TEXT_KINDS
from relaybatch.manifests.build import FILLED_BY_INPUTS, place_inputs
from relaybatch.manifests.converters import CONVERTER, FAMILY_OF_KIND, VIA_FIELD, no_converter
from relaybatch.manifests.expand import Expanded, JobSource, finish_item, request_problems
from relaybatch.manifests.images import ImageInputError, InlineImage, load_image
from relaybatch.manifests.problems import Problem
from relaybatch.manifests.schema import JobSpec
from relaybatch.manifests.sources import (
    DATA_SUFFIXES,
    Row,
    RowsFrom,
    columns_of,
    iter_rows,
    jsonable,
)
from relaybatch.manifests.templates import TemplateError, fields_in, fill, render
from relaybatch.manifests.yaml_lines import Path_, line_of
from relaybatch.structured import STRUCTURED_KINDS, SchemaError, ask_for_schema, load_output_schema

# The job fields a row's item does not depend on. With any other field refused by the schema (a
# misspelt one may be any field), the job's rows are read only for what does not need it (readable
# rows, images), and the request the manifest writes is not checked: its findings would follow
# from the mistake already reported.
_NOT_IN_ITEMS = frozenset({"name", "budget_usd", "provider", "data", "items", "max_reasks", "noul_threshold"})


class YamlJob:
    """Turns the rows of one YAML job into items.

    A job the schema refused in some fields comes here without them (``broken`` names them, and
    stand-ins fill the required ones), so its data file and rows are still checked in the same pass.
    """

    def __init__(
        self,
        spec: JobSpec,
        index: int,
        manifest: Path,
        lines: dict[Path_, int],
        broken: frozenset[str] = frozenset(),
        unclear_rows: Collection[Any] = (),
    ) -> None:
        self.spec = spec
        self.broken = broken
        self.unclear_rows = unclear_rows  # indexes of inline rows holding a value YAML reads unlike it looks
        self.index = index
        self.manifest = manifest
        self.lines = lines
        self.data = (manifest.parent / spec.data) if spec.data else None
        self.images_dir = self.data.parent if self.data else manifest.parent
        self.request_template = jsonable(spec.request)  # YAML may hold dates: keep requests plain JSON
        self._needed: set[str] = set()  # every column the job reads, filled by the up-front check
        # Set by the up-front check (or a broken field): rows are still read, but only checked for
        # what does not need the broken parts (readable rows, images), so one pass reports both.
        self._templates_broken = bool(broken - _NOT_IN_ITEMS)
        # (field, message) of problems in the request the manifest itself writes: reported once, at
        # their YAML line, and left out of each row's problems.
        self._said: set[tuple[str, str]] = set()
        # Inputs the kind cannot take, reported once up front instead of on every row.
        self._takes_image = self._takes_system = True
        self.output_schema: dict[str, Any] | None = None  # loaded by the up-front check

    def source(self) -> JobSource:
        file = str(self.data) if self.data else str(self.manifest)
        problems = self._upfront_problems()
        readable = self.data is None or (self.data.suffix.lower() in DATA_SUFFIXES and self.data.is_file())
        where = "items" if self.data is None else "data"
        line, field = self._where(where)
        # Rows that make no item for a reason reported otherwise are not "no rows".
        unusable = self.broken or self.unclear_rows
        empty = (
            None
            if unusable
            else Problem(str(self.manifest), line, field, "gives no rows; give at least one row")
        )
        return JobSource(
            name=self.spec.name,
            file=file,
            rows=self._rows,
            to_item=self._to_item,
            kind=self.spec.kind,
            model=self.spec.model,
            budget_usd=self.spec.budget_usd,
            provider=self.spec.provider,
            output_schema=self.output_schema,
            max_reasks=self.spec.max_reasks,
            noul_threshold=self.spec.noul_threshold
            if "noul_threshold" in self.spec.model_fields_set
            else None,
            video=self.spec.video.model_dump(exclude_none=True) if self.spec.video else None,
            problems=problems,
            rows_readable=readable,
            empty=empty,
            model_where=self._model_where(),
            rows_from=self._rows_from,
        )

    def _rows_from(self, start: RowsFrom) -> Iterator[Row]:
        """The rows from ``start`` on: of the data file, or inline items ``start.offset`` up to
        ``start.until`` (a partition's range, relaybatch/manifests/ranges.py)."""
        if self.data is not None:
            yield from iter_rows(self.data, start)  # type: ignore[misc]
            return
        items = self.spec.items or []
        for index in range(start.offset, min(len(items), start.until or len(items))):
            line, _ = self._where("items", index)
            yield Row(line or 0, jsonable(items[index]), index + 1)

    # --- where things are -------------------------------------------------------------------

    def _model_where(self) -> tuple[str, int] | None:
        line, _ = self._where("model")
        if self.spec.model is None or "model" in self.spec.request or line is None:
            return None
        return str(self.manifest), line

    def _where(self, *path: int | str) -> tuple[int | None, str]:
        full = ("jobs", self.index, *path)
        field = f"jobs[{self.index}]" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        return line_of(self.lines, full), field

    def _problem(self, message: str, *path: int | str) -> Problem:
        line, field = self._where(*path)
        return Problem(str(self.manifest), line, field, message)

    # --- checks before any row --------------------------------------------------------------

    def _used_columns(self) -> list[tuple[tuple[int | str, ...], str]]:
        """(location in the job, column) for every template, image column and carried column."""
        spec = self.spec
        used: list[tuple[tuple[int | str, ...], str]] = []
        for name in ("prompt", "system", "id", "request"):
            try:
                found = list(fields_in(getattr(spec, name)))
            except TemplateError as error:
                error.location = (name,)
                raise
            for location, column in found:
                used.append(((name, *location.split(".")) if location else (name,), column))
        used += [(("image",), column) for column in spec.image_columns]
        used += [(("carry",), column) for column in spec.carry]
        return used

    def _upfront_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        try:
            used = self._used_columns()
        except TemplateError as error:
            self._templates_broken = True
            problems.append(self._problem(str(error), *error.location))
            used = None
        self._needed = {column for _, column in used or []}
        if "kind" not in self.broken:
            problems += self._kind_problems()
        if used is not None and not self.broken - _NOT_IN_ITEMS:
            problems += self._request_problems()
        if self.data is not None:
            problems += self._data_problems(used or [])
        return problems

    def _kind_problems(self) -> list[Problem]:
        """Inputs the kind cannot take, and a converter it does not have."""
        problems = []
        if self.spec.via == CONVERTER and self.spec.kind not in FAMILY_OF_KIND:
            problems.append(self._problem(no_converter(self.spec.kind), "via"))
        if self.spec.output_schema is not None:
            problems += self._output_schema_problems()
        if self.spec.kind not in TEXT_KINDS:
            if self.spec.image is not None:
                message = f"kind {self.spec.kind} takes no image input; use generate_content to edit images"
                problems.append(self._problem(message, "image"))
                self._takes_image = False
            if self.spec.system is not None:
                message = f"kind {self.spec.kind} has no system instruction; put it in the prompt"
                problems.append(self._problem(message, "system"))
                self._takes_system = False
        return problems

    def _output_schema_problems(self) -> list[Problem]:
        spec = self.spec
        if spec.kind not in STRUCTURED_KINDS:
            message = f"kind {spec.kind} has no structured output; use one of {', '.join(STRUCTURED_KINDS)}"
            return [self._problem(message, "output_schema")]
        if spec.kind == "responses" and spec.via == CONVERTER:
            message = (
                "the responses converter does not support structured output formats; "
                "call a chat-completions model natively, or use kind chat through the converter"
            )
            return [self._problem(message, "output_schema")]
        try:
            self.output_schema = load_output_schema(spec.output_schema, self.manifest.parent)
        except SchemaError as error:
            return [self._problem(str(error), "output_schema")]
        return []

    def _data_problems(self, used: list[tuple[tuple[int | str, ...], str]]) -> list[Problem]:
        """A data file that is not there or not a data file, and columns the job uses that it lacks."""
        assert self.data is not None
        if self.data.suffix.lower() not in DATA_SUFFIXES:
            return [
                self._problem(
                    f"'{self.spec.data}' is not a data file; use a {', '.join(DATA_SUFFIXES)} file", "data"
                )
            ]
        if not self.data.is_file():
            message = (
                f"data file '{self.spec.data}' not found next to the manifest; "
                f"check the path (it is relative to {self.manifest.name}'s folder)"
            )
            if self.data.is_symlink():  # a link whose target is missing, or a loop of links
                message = (
                    f"data file '{self.spec.data}' is a symbolic link that leads to no file "
                    "(a missing target or a loop); point it at the data file"
                )
            return [self._problem(message, "data")]
        columns = columns_of(self.data)
        problems = []
        for location, column in used:
            if columns is not None and column not in columns:
                self._templates_broken = True
                problems.append(
                    self._problem(
                        f"names column '{column}' that {self.data.name} does not have "
                        f"(columns: {', '.join(columns)}); use one of them, or add the column",
                        *location,
                    )
                )
        return problems

    def _request_problems(self) -> list[Problem]:
        """What the gateway would refuse in the request the manifest itself writes, once, at its line.

        The job's request is built for a stand-in row (every column its templates use, as 'x'); of
        what the gateway's rules find in it, only what no row can change is kept (_written_here).
        Every row has those problems: they are left out of the rows' (self._said)."""
        request = self._request({column: "x" for column in self._needed}, [])
        found = request_problems(self.spec.kind, request, [])
        fixed = [(name, message) for name, message in found if self._written_here(name)]
        self._said = set(fixed)
        return [self._problem(message, *self._request_path(name)) for name, message in fixed]

    def _written_here(self, field: str) -> bool:
        """Whether no row can change this request field: the manifest writes it (or leaves it out)
        with no template in it, and the row's prompt, system text and images do not go into it."""
        parts = _parts(field)
        if parts == ["model"]:
            return not _templated(self.request_template.get("model"))
        inputs = self.spec.prompt is not None or self.spec.system is not None or self.spec.image is not None
        if parts == ["request"] or (inputs and parts[0] in FILLED_BY_INPUTS[self.spec.kind]):
            return False
        node: Any = self.request_template
        for part in parts:
            if isinstance(node, str):
                return not _templated(node)
            inside = isinstance(node, dict) and part in node
            inside |= isinstance(node, list) and isinstance(part, int) and part < len(node)
            if not inside:
                return True  # not in the manifest: no row can add it
            node = node[part]
        return not _templated(node)

    def _request_path(self, field: str) -> tuple[int | str, ...]:
        if field == "model" and "model" not in self.request_template:
            return ("model",)
        return ("request", *_parts(field))

    # --- rows -------------------------------------------------------------------------------

    def _rows(self) -> Iterator[Row]:
        if self.data is not None:
            yield from iter_rows(self.data)  # type: ignore[misc]
            return
        for index, values in enumerate(self.spec.items or []):
            line, _ = self._where("items", index)
            if index not in self.unclear_rows:
                yield Row(line or 0, jsonable(values), index + 1)

    def _to_item(self, row: Row) -> Expanded:
        spec = self.spec
        file = str(self.data) if self.data else str(self.manifest)
        images, earlier = self._images(row)
        if self._templates_broken:
            # The templates' problems were reported up front; what else this row holds is still checked.
            return None, [Problem(file, row.line, column, message) for column, message in earlier]
        missing = sorted(column for column in self._needed if column not in row.values)
        if missing:
            message = (
                f"has no column {', '.join(missing)} that the job's templates use; "
                "add it to the row, or change the template"
            )
            return None, [Problem(file, row.line, None, message)]
        request = fill(self.request_template, row.values)
        earlier += self._inputs(request, row.values, images)
        return finish_item(
            job=spec.name,
            kind=spec.kind,
            request=request,
            item_id=self._item_id(row),
            carry={column: row.values[column] for column in spec.carry},
            file=file,
            line=row.line,
            earlier=earlier,
            said=self._said,
        )

    def _request(self, values: dict[str, Any], images: list[InlineImage]) -> dict[str, Any]:
        """The job's request for a stand-in row (the up-front check): templates filled, inputs placed."""
        request = fill(self.request_template, values)
        self._inputs(request, values, images)
        return request

    def _inputs(
        self, request: dict[str, Any], values: dict[str, Any], images: list[InlineImage]
    ) -> list[tuple[str, str]]:
        """Put the model, the route and the row's prompt, system text and images into its request."""
        spec = self.spec
        if spec.model is not None:
            request.setdefault("model", spec.model)
        if spec.via == CONVERTER and spec.kind in FAMILY_OF_KIND:
            request[VIA_FIELD] = CONVERTER
        text = render(spec.prompt, values) if spec.prompt is not None else None
        system = render(spec.system, values) if spec.system is not None and self._takes_system else None
        problems = place_inputs(spec.kind, request, text, system, images)
        if self.output_schema is not None:
            ask_for_schema(spec.kind, request, self.output_schema)
        return problems

    def _images(self, row: Row) -> tuple[list[InlineImage], list[tuple[str, str]]]:
        """The row's images, and (column, message) for each that cannot be used."""
        images: list[InlineImage] = []
        problems: list[tuple[str, str]] = []
        if not self._takes_image:
            return images, problems
        for column in self.spec.image_columns:
            if column not in row.values:
                continue  # reported up front (data file) or as a missing column (this row)
            try:
                images.append(load_image(row.values[column], self.images_dir, self.spec.kind))
            except ImageInputError as error:
                problems.append((column, str(error)))
        return images, problems

    def _item_id(self, row: Row) -> str:
        if self.spec.id is not None:
            return render(self.spec.id, row.values)
        if row.values.get("id") not in (None, ""):
            return str(row.values["id"])
        return f"{self.spec.name}-{row.number}"


def _templated(value: Any) -> bool:
    """Whether a value of the manifest holds a `{column}` template anywhere (a row changes it)."""
    if isinstance(value, str):
        return "{" in value or "}" in value
    if isinstance(value, dict):
        return any(_templated(inner) for inner in value.values())
    if isinstance(value, list):
        return any(_templated(inner) for inner in value)
    return False


def _parts(field: str) -> list[int | str]:
    """A request field as its path: 'tools[1].type' and 'tools.1.type' -> ['tools', 1, 'type']."""
    return [int(part) if part.isdigit() else part for part in re.split(r"[.\[\]]+", field) if part]
