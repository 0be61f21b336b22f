"""Every exception class, produced by the emulator (real answers or its fault header) and mapped
in one place from the status and error.type, for all three error envelopes."""

from __future__ import annotations

import pytest
from gateway_support import ClientFactory, RecordingLimiter, require_route
from starlette.applications import Starlette

from relaybatch.gateway import (
    APIStatusError,
    AuthenticationFailed,
    BadRequest,
    Conflict,
    GatewayError,
    InsufficientBalance,
    InvalidRequest,
    NotFound,
    Overloaded,
    PermissionDenied,
    RateLimited,
    RetryPolicy,
    ServerError,
)
from relaybatch.gateway.errors import error_from_response

CHAT = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "hello"}]}
NO_RETRY = RetryPolicy(max_attempts=1)


@pytest.mark.parametrize(
    ("status", "cls", "error_type"),
    [
        (400, BadRequest, "invalid_request_error"),
        (401, AuthenticationFailed, "authentication_error"),
        (402, InsufficientBalance, "insufficient_balance"),
        (403, PermissionDenied, "permission_error"),
        (404, NotFound, "not_found_error"),
        (405, BadRequest, "invalid_request_error"),
        (409, Conflict, None),
        (429, RateLimited, "rate_limit_error"),
        (500, ServerError, "api_error"),
        (503, ServerError, None),
        (529, Overloaded, "overloaded_error"),
    ],
)
async def test_each_status_maps_to_its_class(
    make_client: ClientFactory, status: int, cls: type[APIStatusError], error_type: str | None
) -> None:
    async with make_client(fault=f"status={status}", retry=NO_RETRY) as client:
        with pytest.raises(cls) as caught:
            await client.chat_completions(CHAT)
    assert type(caught.value) is cls
    assert caught.value.status == status
    if error_type is not None:
        assert caught.value.error_type == error_type


async def test_bad_key_is_authentication_failed(make_client: ClientFactory) -> None:
    async with make_client(key="rb-not-a-key") as client:
        with pytest.raises(AuthenticationFailed) as caught:
            await client.chat_completions(CHAT)
    assert caught.value.error_type == "authentication_error"
    assert "rb-not-a-key" not in str(caught.value) and "rb-not-a-key" not in repr(caught.value)


async def test_revoked_key_is_authentication_failed(make_client: ClientFactory) -> None:
    async with make_client(key="rb-revoked-key") as client:
        with pytest.raises(AuthenticationFailed):
            await client.list_models()


async def test_unknown_model_pricing_is_not_found(make_client: ClientFactory) -> None:
    async with make_client() as client:
        with pytest.raises(NotFound) as caught:
            await client.get_pricing("relay-no-such-model")
    assert caught.value.error_type == "not_found_error"


async def test_pricing_conflict_names_the_candidate_providers(make_client: ClientFactory) -> None:
    async with make_client() as client:
        with pytest.raises(Conflict) as caught:
            await client.get_pricing("relay-chat-multi")
        priced = await client.get_pricing("relay-chat-multi", provider="beta")
    assert caught.value.candidate_providers == ["alpha", "beta"]
    assert priced.data.provider == "beta"


async def test_rate_limited_carries_the_body_limit_and_headers(make_client: ClientFactory) -> None:
    async with make_client(key="rb-limited-key", retry=NO_RETRY) as client:
        with pytest.raises(RateLimited) as caught:
            for _ in range(10):
                await client.list_models()
    error = caught.value
    assert error.rate_limit is not None and error.rate_limit["rpm"] == 6
    assert error.rate_limit_headers["limit_requests"] == 6
    assert error.rate_limit_headers["remaining_requests"] == 0


async def test_generate_content_envelope(make_client: ClientFactory, emulator_app: Starlette) -> None:
    """Generate-content errors name their kind in error.status; error.code is an int there."""
    request = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with make_client(fault="status=429", retry=NO_RETRY) as client:
        with pytest.raises(RateLimited) as caught:
            await client.generate_content("relay-gemini-flash", request)
    assert caught.value.error_type == "RESOURCE_EXHAUSTED"
    require_route(emulator_app, "/v1beta/models/relay-gemini-flash:generateContent")
    async with make_client(key="rb-not-a-key") as client:
        with pytest.raises(AuthenticationFailed) as auth:
            await client.generate_content("relay-gemini-flash", request)
    assert auth.value.error_type == "UNAUTHENTICATED"


async def test_web_search_flat_envelope(make_client: ClientFactory) -> None:
    async with make_client(fault="status=403", retry=NO_RETRY) as client:
        with pytest.raises(PermissionDenied) as caught:
            await client.web_search("search", {"q": "relay"})
    assert caught.value.error_type is None
    assert "403" in caught.value.message or caught.value.message


async def test_invalid_request_is_refused_before_sending(
    make_client: ClientFactory, limiter: RecordingLimiter
) -> None:
    async with make_client() as client:
        with pytest.raises(InvalidRequest, match="messages"):
            await client.chat_completions({"model": "relay-chat-small"})
    assert limiter.acquires == []


def test_error_code_never_chooses_the_class() -> None:
    body = {"error": {"type": "invalid_request_error", "code": "rate_limit_exceeded", "message": "no"}}
    assert type(error_from_response(400, {}, body)) is BadRequest
    body = {"error": {"type": "rate_limit_error", "code": "balance_exceeded", "message": "slow"}}
    assert type(error_from_response(429, {}, body)) is RateLimited


def test_type_decides_only_when_status_does_not() -> None:
    """An error document behind a 200 (written after padding) is classed by its type."""
    body = {"error": {"type": "overloaded_error", "code": "529", "message": "busy"}}
    assert type(error_from_response(200, {}, body)) is Overloaded
    assert type(error_from_response(418, {}, {"code": 418, "message": "teapot"})) is APIStatusError


def test_every_class_is_a_gateway_error() -> None:
    for cls in (BadRequest, Conflict, RateLimited, Overloaded, ServerError, InvalidRequest):
        assert issubclass(cls, GatewayError)


async def test_responses_converter_refuses_stateful_requests(make_client: ClientFactory) -> None:
    request = {"model": "relay-claude-haiku", "input": "and then?", "previous_response_id": "resp_1"}
    async with make_client() as client:
        with pytest.raises(BadRequest) as caught:
            await client.responses(request, converter=True)
    assert caught.value.error_type == "invalid_request_error"
