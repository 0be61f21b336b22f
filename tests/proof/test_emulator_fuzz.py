"""Fuzz the emulator's HTTP surface: a malformed request never gets a 5xx (least of all a 500).

The emulator publishes no OpenAPI schema (it is a Starlette app, not a schema-first one), so
schemathesis has nothing to read; instead hypothesis drives requests over every route: wrong
methods, path parameters of any text, bodies that are not JSON, JSON of the wrong type, the right
body with a field removed, replaced by any JSON value or joined by unknown fields, odd query
strings, good and bad credentials, and malformed fault headers. Unhandled exceptions are turned
into a 500 by the transport, so a crash in any handler fails the test. Each example gets a fresh
emulator, so nothing one request changes (a balance, a task) leaks into the next.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.faults import FaultSyntaxError, parse_fault

KEY = "rb-demo-key"
CONFIG = load_config()


def model_of(kind: str, type_target: str | None = None) -> str:
    """A visible model of the shipped catalog doing this kind (names change; kinds do not)."""
    return next(
        model.id
        for model in CONFIG.models
        if model.kind == kind and not model.hidden and type_target in (None, model.type_target)
    )


CHAT, CLAUDE, GEMINI = model_of("chat", "openai"), model_of("chat", "anthropic"), model_of("chat", "gemini")

# One valid body per POST route; the fuzzer breaks them.
VALID_BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": CHAT, "messages": [{"role": "user", "content": "hi"}]},
    "/openai/v1/chat/completions": {
        "model": CHAT,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": {"model": CHAT, "input": "hi"},
    "/openai/v1/responses": {"model": CHAT, "input": "hi"},
    "/v1/messages": {
        "model": CLAUDE,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/anthropic/v1/messages": {
        "model": CLAUDE,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "hi"}],
    },
    f"/v1beta/models/{GEMINI}:generateContent": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    f"/gemini/v1beta/models/{GEMINI}:generateContent": {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]
    },
    "/v1/images/generations": {
        "model": model_of("image", "openai"),
        "prompt": "a square",
        "size": "1024x1024",
    },
    "/v2/videos": {"model": model_of("video"), "prompt": "a pan", "seconds": "4", "size": "1280x720"},
    "/v1/videos/generations": {"model": model_of("video_v1"), "prompt": "waves", "seconds": 5},
    "/v1/typedjudge": {
        "model": model_of("judgment"),
        "input": "my order is late",
        "questions": {"late": {"type": "noul", "instructions": "Is it late?"}},
    },
    "/_emulator/clock/advance": {"seconds": 1},
    "/_emulator/accounts/demo/balance": {"usd": "1.00"},
}
GET_PATHS = [
    "/v1/models",
    "/v1/models/pricing",
    "/v2/videos/{id}",
    "/v2/videos/{id}/content",
    "/v1/tasks/{id}",
    "/v1/videos/generations/{id}/content",
    "/v1/websearch/search",
    "/v1/websearch/simple-search",
    "/v1/websearch/search-news",
    "/v1/websearch/reader",
    "/_emulator/requests",
    "/_emulator/ledger",
    "/_emulator/accounts",
    "/_emulator/clock",
    "/v1beta/models/{id}",
    "/no/such/route",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
path_text = st.text(
    alphabet=st.characters(codec="ascii", exclude_characters="/?#%", exclude_categories=["Cc"]),
    min_size=1,
    max_size=24,
)


@st.composite
def broken_bodies(draw: st.DrawFn, valid: dict[str, Any]) -> bytes:
    kind = draw(st.sampled_from(["drop", "replace", "extra", "not-json", "wrong-type", "deep"]))
    body = json.loads(json.dumps(valid))
    if kind == "not-json":
        return draw(
            st.binary(max_size=64) | st.sampled_from([b"{", b"{'a': 1}", b"nul", b"[1,", b"\xff\xfe"])
        )
    if kind == "wrong-type":
        return json.dumps(
            draw(st.lists(json_values, max_size=3) | st.text(max_size=10) | st.integers())
        ).encode()
    field = draw(st.sampled_from(sorted(body)))
    if kind == "drop":
        body.pop(field)
    elif kind == "replace":
        body[field] = draw(json_values)
    elif kind == "extra":
        body.update(
            draw(st.dictionaries(st.text(min_size=1, max_size=10), json_values, min_size=1, max_size=3))
        )
    else:
        body[field] = {"nested": [draw(json_values)], "again": {"x": draw(json_values)}}
    return json.dumps(body).encode()


def auth_headers(choice: str) -> dict[bytes, bytes]:
    return {
        "bearer": {b"authorization": f"Bearer {KEY}".encode()},
        "anthropic": {b"x-api-key": KEY.encode(), b"anthropic-version": b"2023-06-01"},
        "goog": {b"x-goog-api-key": KEY.encode()},
        "none": {},
        # Bytes outside ASCII are legal on the wire (latin-1); an empty key; a wrong version.
        "garbage": {b"authorization": b"Bearer \xe9\xe9", b"x-api-key": b"", b"anthropic-version": b"1999"},
    }[choice]


@st.composite
def malformed_fault(draw: st.DrawFn) -> str | None:
    if not draw(st.booleans()):
        return None
    text = draw(st.text(alphabet=st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=20))
    try:
        parse_fault(text)
    except FaultSyntaxError:
        return text
    return None  # a well-formed fault asks for an error on purpose: not a malformed request


@st.composite
def malformed_requests(draw: st.DrawFn) -> tuple[str, str, dict[bytes, bytes], bytes, dict[str, str]]:
    headers = auth_headers(draw(st.sampled_from(["bearer", "anthropic", "goog", "none", "garbage"])))
    fault = draw(malformed_fault())
    if fault is not None:
        headers[b"x-emulator-fault"] = fault.encode()
    query = draw(
        st.dictionaries(st.sampled_from(["q", "url", "query", "count", "account", "x"]), st.text(max_size=12))
    )
    if draw(st.booleans()):
        path = draw(st.sampled_from(sorted(VALID_BODIES)))
        method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH"]))
        return method, path, headers, draw(broken_bodies(VALID_BODIES[path])), query
    path = draw(st.sampled_from(GET_PATHS)).replace("{id}", draw(path_text))
    method = draw(st.sampled_from(["GET", "GET", "DELETE", "POST", "PUT"]))
    body = draw(st.binary(max_size=32)) if method in ("POST", "PUT") else b""
    return method, path, headers, body, query


@settings(max_examples=250, deadline=None)
@given(request=malformed_requests())
def test_no_malformed_request_gets_a_server_error(
    request: tuple[str, str, dict[bytes, bytes], bytes, dict[str, str]],
) -> None:
    method, path, headers, body, query = request
    with TestClient(create_app(CONFIG), raise_server_exceptions=False) as client:
        response = client.request(method, path, headers=headers, content=body, params=query)
    assert response.status_code < 500, (
        f"{method} {path} {body[:200]!r} -> {response.status_code}: {response.text[:300]}"
    )
    if response.status_code >= 400 and method != "HEAD":
        envelope = response.json()  # every error is a JSON envelope, never plain text
        assert isinstance(envelope, dict) and ("error" in envelope or "code" in envelope), envelope


def test_the_fuzzer_sees_a_crash_as_a_failure() -> None:
    """The check can fail: a handler that raises is reported as 500 through this client."""
    from starlette.routing import Route

    def broken(request: Any) -> Any:
        raise RuntimeError("boom")

    app = create_app(CONFIG)
    app.router.routes.insert(0, Route("/v1/boom", broken, methods=["POST"]))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/v1/boom", headers=auth_headers("bearer"), content=b"{}").status_code == 500
