"""docs/gateway-client.md keeps up with the code: every public method and every exception class."""

from __future__ import annotations

import inspect
from pathlib import Path

import relaybatch.gateway
from relaybatch.gateway import GatewayClient, GatewayError

DOC = (Path(__file__).resolve().parents[2] / "docs" / "gateway-client.md").read_text(encoding="utf-8")


def test_every_method_is_documented() -> None:
    methods = [
        name
        for name, member in inspect.getmembers(GatewayClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and name != "aclose"
    ]
    assert len(methods) == 17
    missing = [name for name in methods if f"`{name}(" not in DOC]
    assert missing == []


def test_every_exception_is_in_the_drawn_tree() -> None:
    classes = [
        name
        for name in relaybatch.gateway.__all__
        if inspect.isclass(getattr(relaybatch.gateway, name))
        and issubclass(getattr(relaybatch.gateway, name), GatewayError)
    ]
    tree = relaybatch.gateway.errors.__doc__ or ""
    assert [name for name in classes if name not in tree] == []
    assert [name for name in classes if name not in DOC] == []
