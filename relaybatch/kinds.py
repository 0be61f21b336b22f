"""The kinds of item, in one home: each kind, its families, and where its per-kind tables are.

A kind is one gateway route family; an item of that kind is one billed call of it. The module sits
at the bottom of the layers (it imports nothing), so manifests, the cost model, the engine and
telemetry all take kinds from here.

Adding a kind starts here: add it to ``Kind`` and to its families below, then fill the per-kind
tables ``tests/test_kinds.py`` lists. That test fails naming each table that lacks the new kind:

- ``manifests/checks.py`` ``REQUEST_MODELS``: the request's shape, checked before anything is sent;
- ``manifests/build.py`` ``FILLED_BY_INPUTS``: which request fields a table's columns fill;
- ``engine/kinds.py`` ``CALLS``: how an item is sent (and, for polled kinds, polled and cancelled);
- ``engine/result_columns.py`` ``KIND_COLUMNS``: the results' columns the kind fills;
- ``telemetry/run.py`` ``OPERATIONS``: the operation name of the call's span;
- the cost model (``relaybatch/cost_model``): ``usage_for_call`` (its usage object's reader in
  ``usage.USAGE_READERS`` when its answer carries one), ``worst_case_usd`` and ``expected_usage``
  must each answer for the kind.

Tables that cover one family only say so beside them (``manifests/converters.py``
``FAMILY_OF_KIND``: the text kinds; ``engine/result_columns.py`` ``USAGE_TYPES``: kinds whose
answer carries a usage object).
"""

from __future__ import annotations

from typing import Literal, get_args

Kind = Literal[
    "chat",
    "responses",
    "messages",
    "generate_content",
    "image",
    "video",
    "video_v1",
    "judgment",
    "web_search",
]
KINDS: tuple[str, ...] = get_args(Kind)

CHAT: Kind = "chat"
RESPONSES: Kind = "responses"
MESSAGES: Kind = "messages"
GENERATE_CONTENT: Kind = "generate_content"
IMAGE: Kind = "image"
VIDEO: Kind = "video"
VIDEO_V1: Kind = "video_v1"
JUDGMENT: Kind = "judgment"
WEB_SEARCH: Kind = "web_search"

# The text routes, one per vendor family (chat completions, responses, messages, generate-content):
# a prompt in, text out, priced per token.
TEXT_KINDS: frozenset[str] = frozenset({CHAT, RESPONSES, MESSAGES, GENERATE_CONTENT})
# Video, V2 and the legacy V1 media task: created, then polled until done; billed at creation.
VIDEO_KINDS: frozenset[str] = frozenset({VIDEO, VIDEO_V1})
# Priced by the gateway's pricing route (the others follow fixed rules of the interface).
ROUTE_PRICED_KINDS: frozenset[str] = TEXT_KINDS | {IMAGE} | VIDEO_KINDS

__all__ = [
    "CHAT",
    "GENERATE_CONTENT",
    "IMAGE",
    "JUDGMENT",
    "KINDS",
    "MESSAGES",
    "RESPONSES",
    "ROUTE_PRICED_KINDS",
    "TEXT_KINDS",
    "VIDEO",
    "VIDEO_KINDS",
    "VIDEO_V1",
    "WEB_SEARCH",
    "Kind",
]
