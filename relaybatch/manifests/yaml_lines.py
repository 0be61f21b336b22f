"""YAML with line numbers and bounds: map each value's path (as pydantic reports it) to its line.

The document is composed once by a loader that refuses, at the offending line, nesting deeper than
MAX_DEPTH, an alias that refers to itself, and aliases that repeat more than MAX_ALIAS_VALUES values
in total ("billion laughs": PyYAML shares aliased nodes, but everything that walks the document,
the line map, pydantic and the request templates, would copy them out). The line map and the
Python values are then built from that one node tree.

Two things YAML accepts silently would change what is sent, so the walk over the tree reports them
(every one, with its line; the caller checks the rest of the document too): a key written twice
in one mapping (PyYAML keeps the last), and a plain `yes`/`no`/`on`/`off` (YAML 1.1 reads
`country: NO` as false, so a prompt would say "False").
"""

from __future__ import annotations

from typing import Any

import yaml

from relaybatch.manifests.limits import MAX_ALIAS_VALUES, MAX_DEPTH

Path_ = tuple[int | str, ...]


class YamlLimitError(ValueError):
    """A YAML document past one of the loading limits, at `line` (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


# A value YAML would read differently from how it looks: (line, field path, message).
Ambiguity = tuple[int, Path_, str]


# The only booleans a manifest writes plainly; YAML 1.1 also reads yes/no/on/off this way.
_PLAIN_BOOLEANS = {"true": "true", "false": "false"}
_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts nesting and alias expansion while composing, before anything is copied."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._alias_values = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values it stands for, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise YamlLimitError(
                    line, f"alias *{event.anchor} refers to a value that contains it; write the value out"
                )
            self._alias_values += size
            if self._alias_values > MAX_ALIAS_VALUES:
                raise YamlLimitError(
                    line,
                    f"aliases (*name) repeat more than {MAX_ALIAS_VALUES:,} values in this document; "
                    "write the values out, or use fewer and smaller aliases",
                )
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlLimitError(line, f"nests more than {MAX_DEPTH} levels deep; flatten it")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._sizes[id(node)] = 1 + sum(self._sizes.get(id(child), 1) for child in _children(node))
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_with_lines(text: str) -> tuple[Any, dict[Path_, int], list[Ambiguity]]:
    """The parsed document, a map from value path to its 1-based line, and the ambiguities in it.

    Raise yaml.YAMLError for text that is not YAML, YamlLimitError for one past the limits.
    Duplicate keys and YAML 1.1 booleans such as `no` are returned, not raised, so the rest of
    the manifest is still checked in the same pass (the document holds what YAML read).
    """
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}, []
        lines: dict[Path_, int] = {}
        ambiguous: list[Ambiguity] = []
        _walk(node, (), lines, ambiguous)
        return loader.construct_document(node), lines, ambiguous
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int], ambiguous: list[Ambiguity]) -> None:
    """Record each value's line; add duplicate keys and YAML 1.1 booleans to ``ambiguous``.

    Aliased nodes are walked once per use, which the alias limit of the loader keeps bounded.
    """
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            # A key that is itself a list or mapping cannot name a field; its text stands in.
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.start_mark)
            line = key_node.start_mark.line + 1
            if key in seen and key_node.tag != _MERGE_TAG:
                message = f"is written twice in this mapping (first at line {seen[key]}); keep one"
                ambiguous.append((line, (*path, key), message))
            seen.setdefault(key, line)
            # Keys are recorded at the key's line, so a missing or extra field points at its mapping.
            _walk(value_node, (*path, key), lines, ambiguous)
            lines[(*path, key)] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, ambiguous)
    elif node.tag == _BOOL_TAG and node.value.lower() not in _PLAIN_BOOLEANS:
        meaning = "true" if node.value.lower() in ("yes", "on", "y") else "false"
        message = (
            f"{node.value} is read by YAML as {meaning}; quote it ('{node.value}') to keep the text, "
            f"or write {meaning}"
        )
        ambiguous.append((node.start_mark.line + 1, path, message))


def line_of(lines: dict[Path_, int], path: Path_) -> int | None:
    """The line of the deepest known prefix of a path (a missing field points at its parent)."""
    for end in range(len(path), -1, -1):
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None
