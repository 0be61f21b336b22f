"""Converter routes in manifests: `via: converter`, what the converters refuse, and the family check.

A native route serves only models of its own protocol family; a converter base keeps the client
format while calling a model of another family (shared/spec/gateway-interface.md, item 2). A job
chooses the converter explicitly (`via: converter`); relaybatch never switches on its own, so the
route of every item is written in the manifest and part of its key, and a catalog change between
`plan` and `run` cannot silently move calls to another route. With the catalog at hand (`validate`
or `plan` reaching a gateway), a text job whose model is of another family than its kind's native
route is a located error that says to add `via: converter`.

In the request the choice travels as `"via": "converter"`, like `model` for generate-content and
`route` for web search: the engine takes it out and calls the converter base instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relaybatch.manifests.problems import Problem

VIA_FIELD = "via"
CONVERTER = "converter"
NATIVE = "native"
# The family each text kind's native route serves (catalog `type_target` values).
FAMILY_OF_KIND = {
    "chat": "openai",
    "responses": "openai",
    "messages": "anthropic",
    "generate_content": "gemini",
}
_HOSTED_TOOL_FREE = {"function"}  # the only tool type the responses converter runs
_STRUCTURED_FORMATS = {"json_schema", "json_object"}


def take_via(kind: str, request: dict[str, Any]) -> list[tuple[str, str]]:
    """Check the request's `via` in place (a native `via` is dropped, so keys stay as before);
    return (field, message) for a bad one and for what the chosen converter refuses."""
    if VIA_FIELD not in request:
        return []
    via = request[VIA_FIELD]
    if via == NATIVE:
        del request[VIA_FIELD]
        return []
    if via != CONVERTER:
        return [(VIA_FIELD, f"'{via}' is not a route; use converter (or leave it out for the native route)")]
    if kind not in FAMILY_OF_KIND:
        return [(VIA_FIELD, no_converter(kind))]
    return converter_refusals(kind, request)


def no_converter(kind: str) -> str:
    return f"kind {kind} has no converter route; drop `via`, or use one of {', '.join(FAMILY_OF_KIND)}"


def converter_refusals(kind: str, request: dict[str, Any]) -> list[tuple[str, str]]:
    """The responses converter's documented limits: stateless, no stored responses, no hosted
    tools, no structured output formats."""
    if kind != "responses":
        return []
    found = []
    if request.get("previous_response_id"):
        found.append(("previous_response_id", "the responses converter is stateless; drop it"))
    if request.get("store") is True:
        found.append(("store", "the responses converter stores no responses; drop it or set it false"))
    for index, tool in enumerate(request.get("tools") or []):
        if isinstance(tool, dict) and tool.get("type") not in _HOSTED_TOOL_FREE:
            message = (
                f"'{tool.get('type')}' is a hosted tool, which the responses converter does not run; "
                "drop it, or call a model of the openai family natively"
            )
            found.append((f"tools[{index}].type", message))
    text = request.get("text")
    format_type = (text.get("format") or {}).get("type") if isinstance(text, dict) else None
    if format_type in _STRUCTURED_FORMATS:
        message = (
            f"'{format_type}' is a structured output format, which the responses converter does not "
            "support; drop it, or use kind chat through the converter"
        )
        found.append(("text.format", message))
    return found


@dataclass(frozen=True)
class Route:
    """The route a group of items takes: job, kind, model and whether through the converter."""

    job: str
    kind: str
    model: str
    converter: bool


def route_of(job: str, kind: str, request: dict[str, Any]) -> Route | None:
    """The route of a text item (None for the other kinds, which have one route each)."""
    if kind not in FAMILY_OF_KIND:
        return None
    return Route(job, kind, str(request.get("model", "")), request.get(VIA_FIELD) == CONVERTER)


def family_problems(routes: dict[Route, tuple[str, int]], families: dict[str, str]) -> list[Problem]:
    """A problem, at its first item, for each native route whose model the catalog puts in another family.

    `routes` maps each route to (file, line) of its first item; `families` maps model id to the
    catalog's `type_target`. Models the catalog does not list (unlisted ones are callable) pass.
    """
    problems = []
    for route, (file, line) in routes.items():
        family = families.get(route.model)
        if route.converter or family is None or family == FAMILY_OF_KIND[route.kind]:
            continue
        message = (
            f"model '{route.model}' is in the {family} family, and kind {route.kind}'s native route "
            f"serves only {FAMILY_OF_KIND[route.kind]} models; add `via: converter` to job "
            f"'{route.job}' to call it through the {route.kind} converter, or use the kind of its family"
        )
        problems.append(Problem(file, line, "model", message))
    return problems


async def catalog_families(client: Any) -> dict[str, str]:
    """Model id -> family (`type_target`) from the gateway's catalog (GET /v1/models, not billed)."""
    catalog = await client.list_models()
    return {entry.id: entry.type_target for entry in catalog.data if entry.type_target}
