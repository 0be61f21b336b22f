"""YAML with line numbers: map each value's path (as pydantic reports it) to its line."""

from __future__ import annotations

from typing import Any

import yaml

Path_ = tuple[int | str, ...]


def load_with_lines(text: str) -> tuple[Any, dict[Path_, int]]:
    """The parsed document and a map from value path to its 1-based line."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    lines: dict[Path_, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return yaml.safe_load(text), lines


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            # Keys are recorded at the key's line, so a missing or extra field points at its mapping.
            lines[(*path, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*path, key), lines)
            lines[(*path, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines)


def line_of(lines: dict[Path_, int], path: Path_) -> int | None:
    """The line of the deepest known prefix of a path (a missing field points at its parent)."""
    for end in range(len(path), -1, -1):
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None
