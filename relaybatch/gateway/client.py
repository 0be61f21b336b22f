"""One async client per run for every gateway route, on httpx, with a transport seam.

The client is handed to the code that uses it; it never builds its own limiter or transport
policy. ``relaybatch.connect.open_client`` builds one from settings.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, SecretStr, ValidationError

from relaybatch.gateway.auth import AuthStyle, auth_headers
from relaybatch.gateway.catalog_types import ModelList, PricingResponse
from relaybatch.gateway.chat_types import ChatCompletion, ChatCompletionRequest
from relaybatch.gateway.errors import InvalidRequest, UnexpectedResponse
from relaybatch.gateway.exchange import exchange_for
from relaybatch.gateway.generate_content_types import GenerateContentRequest, GenerateContentResponse
from relaybatch.gateway.judgment_types import TypedJudgment, TypedJudgmentRequest
from relaybatch.gateway.media import MediaFile, write_stream_to_file
from relaybatch.gateway.media_types import (
    ImageGenerationRequest,
    ImagesResponse,
    Task,
    TaskCreated,
    Video,
    VideoCreateRequest,
    VideoDeleted,
    VideoV1CreateRequest,
)
from relaybatch.gateway.messages_types import Message, MessagesRequest
from relaybatch.gateway.request_building import NoCookies
from relaybatch.gateway.responses_types import Response, ResponsesRequest
from relaybatch.gateway.retry import CallKind, RetryPolicy
from relaybatch.gateway.routes import WEB_SEARCH_ROUTES, RouteSettings, WebSearchRoute
from relaybatch.gateway.search_types import ReaderResult, SearchResult
from relaybatch.gateway.sending import Call, Sender, Sleep
from relaybatch.gateway.streaming import (
    Aggregator,
    ChatCompletionAggregator,
    GenerateContentAggregator,
    MessagesAggregator,
    ResponsesAggregator,
    read_events,
)
from relaybatch.gateway.timeouts import ClientTimeouts
from relaybatch.limiting import Limiter, RequestPurpose, Unlimited

ModelT = TypeVar("ModelT", bound=BaseModel)
RequestLike = BaseModel | Mapping[str, Any]


class GatewayClient:
    """Sends requests to the gateway; every attempt first takes a token from the limiter."""

    def __init__(
        self,
        base_url: str,
        api_key: SecretStr,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        limiter: Limiter | None = None,
        retry: RetryPolicy | None = None,
        timeouts: ClientTimeouts | None = None,
        routes: RouteSettings | None = None,
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
        random_fraction: Callable[[], float] = random.random,
    ) -> None:
        """``headers`` go on every request (never put the key here: it is added per family);
        ``sleep`` and ``random_fraction`` are injectable so tests run retries without waiting."""
        self._api_key = api_key
        self._timeouts = timeouts or ClientTimeouts()
        self._routes = routes or RouteSettings()
        self._http = httpx.AsyncClient(
            base_url=base_url, transport=transport, timeout=self._timeouts.default(), headers=headers
        )
        # The gateway sets no cookies; see NoCookies for the per-request cost this saves. httpx's
        # public ``cookies`` setter copies into a plain jar, so the store is replaced directly.
        self._http._cookies = NoCookies()
        self._sender = Sender(
            http=self._http,
            headers_for=lambda style: auth_headers(style, self._api_key),
            limiter=limiter or Unlimited(),
            policy=retry or RetryPolicy(),
            sleep=sleep,
            random_fraction=random_fraction,
            exchange=exchange_for(self._http, transport),
        )

    def __repr__(self) -> str:
        return f"GatewayClient(base_url={str(self._http.base_url)!r})"

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._sender.policy

    def with_retry(self, policy: RetryPolicy) -> GatewayClient:
        """The same client (connections, limiter, key) sending with another retry policy.

        The engine uses ``with_retry(replace(policy, max_attempts=1))``: it owns the retries of the
        items it sends, so the client must not repeat them too. Close the original, not the view.
        """
        view = copy.copy(self)
        view._sender = dataclasses.replace(self._sender, policy=policy)
        return view

    async def take_token(self, purpose: RequestPurpose = "submit") -> None:
        """Wait for the limiter's token of the next request this task sends, now (sending.py)."""
        await self._sender.take_token(purpose)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # Chat, four families ------------------------------------------------------------------

    async def chat_completions(
        self, request: RequestLike, *, stream: bool = False, converter: bool = False
    ) -> ChatCompletion:
        body = _request_body(ChatCompletionRequest, request, stream=stream)
        if stream:
            body.setdefault("stream_options", {"include_usage": True})
        call = self._chat_call(self._routes.chat_completions(converter), AuthStyle.BEARER, body)
        if stream:
            return await self._stream(call, ChatCompletionAggregator)
        return await self._json(call, ChatCompletion)

    async def responses(
        self, request: RequestLike, *, stream: bool = False, converter: bool = False
    ) -> Response:
        body = _request_body(ResponsesRequest, request, stream=stream)
        call = self._chat_call(self._routes.responses(converter), AuthStyle.BEARER, body)
        if stream:
            return await self._stream(call, ResponsesAggregator)
        return await self._json(call, Response)

    async def messages(
        self, request: RequestLike, *, stream: bool = False, converter: bool = False
    ) -> Message:
        body = _request_body(MessagesRequest, request, stream=stream)
        call = self._chat_call(self._routes.messages(converter), AuthStyle.MESSAGES, body)
        if stream:
            return await self._stream(call, MessagesAggregator)
        return await self._json(call, Message)

    async def generate_content(
        self, model: str, request: RequestLike, *, stream: bool = False, converter: bool = False
    ) -> GenerateContentResponse:
        # This family chooses streaming by path, not by a body flag.
        body = _request_body(GenerateContentRequest, request, stream=None)
        path = self._routes.generate_content(model, stream=stream, converter=converter)
        call = self._chat_call(
            path, AuthStyle.GENERATE_CONTENT, body, params={"alt": "sse"} if stream else None
        )
        if stream:
            return await self._stream(call, GenerateContentAggregator)
        return await self._json(call, GenerateContentResponse)

    def _chat_call(
        self, path: str, auth: AuthStyle, body: dict[str, Any], params: Mapping[str, str] | None = None
    ) -> Call:
        return Call("POST", path, auth, CallKind.BILLED, "submit", json=body, params=params)

    # Media ----------------------------------------------------------------------------------

    async def images_generate(self, request: RequestLike) -> ImagesResponse:
        body = _request_body(ImageGenerationRequest, request)
        call = Call(
            "POST",
            "/v1/images/generations",
            AuthStyle.BEARER,
            CallKind.BILLED_CREATE,
            "submit",
            json=body,
            timeout=self._timeouts.long_image(),
        )
        return await self._json(call, ImagesResponse)

    async def video_create(self, request: RequestLike) -> Video:
        body = _request_body(VideoCreateRequest, request)
        call = Call("POST", "/v2/videos", AuthStyle.BEARER, CallKind.BILLED_CREATE, "submit", json=body)
        return await self._json(call, Video)

    async def video_get(self, video_id: str) -> Video:
        call = Call("GET", f"/v2/videos/{video_id}", AuthStyle.BEARER, CallKind.READ, "poll")
        return await self._json(call, Video)

    async def video_delete(self, video_id: str) -> VideoDeleted:
        call = Call("DELETE", f"/v2/videos/{video_id}", AuthStyle.BEARER, CallKind.READ, "other")
        return await self._json(call, VideoDeleted)

    async def video_download(self, video_id: str, path: Path) -> MediaFile:
        """Stream a finished video's bytes to ``path`` (written whole or not at all)."""
        call = Call(
            "GET",
            f"/v2/videos/{video_id}/content",
            AuthStyle.BEARER,
            CallKind.READ,
            "other",
            timeout=self._timeouts.download(),
        )
        return await self._download(call, Path(path))

    async def download_file(self, url: str, path: Path) -> MediaFile:
        """Stream the file a task result links to (``data.video_url`` ...) to ``path``, written
        whole or not at all. The account key is sent only when the link is on the gateway's own
        host; a link elsewhere carries its own credential and is fetched without the key."""
        link = httpx.URL(url)
        base = self._http.base_url
        own_host = link.is_relative_url or (link.scheme, link.host, link.port) == (
            base.scheme,
            base.host,
            base.port,
        )
        call = Call(
            "GET",
            url,
            AuthStyle.BEARER if own_host else AuthStyle.NONE,
            CallKind.READ,
            "other",
            timeout=self._timeouts.download(),
        )
        return await self._download(call, Path(path))

    async def _download(self, call: Call, target: Path) -> MediaFile:
        """Stream a download's body to ``target``: written whole (length checked) or not at all."""
        return await self._sender.run(
            call,
            lambda response: write_stream_to_file(response.aiter_bytes(), target, _promised_length(response)),
        )

    async def video_v1_create(self, request: RequestLike) -> TaskCreated:
        body = _request_body(VideoV1CreateRequest, request)
        call = Call(
            "POST", "/v1/videos/generations", AuthStyle.BEARER, CallKind.BILLED_CREATE, "submit", json=body
        )
        return await self._json(call, TaskCreated)

    async def task_get(self, task_id: str) -> Task:
        call = Call("GET", f"/v1/tasks/{task_id}", AuthStyle.BEARER, CallKind.READ, "poll")
        return await self._json(call, Task)

    # Judgment, search, catalog ------------------------------------------------------------------

    async def typed_judgment(self, request: RequestLike) -> TypedJudgment:
        body = _request_body(TypedJudgmentRequest, request)
        call = Call("POST", "/v1/typedjudge", AuthStyle.BEARER, CallKind.BILLED, "submit", json=body)
        return await self._json(call, TypedJudgment)

    async def web_search(
        self, route: WebSearchRoute, params: Mapping[str, str]
    ) -> SearchResult | ReaderResult:
        """``route`` is one of search, simple-search, search-news (``q``) or reader (``url``)."""
        if route not in WEB_SEARCH_ROUTES:
            raise InvalidRequest(f"unknown web search route {route!r}; expected one of {WEB_SEARCH_ROUTES}")
        call = Call(
            "GET", f"/v1/websearch/{route}", AuthStyle.BEARER, CallKind.BILLED, "submit", params=dict(params)
        )
        result_type: type[SearchResult | ReaderResult] = ReaderResult if route == "reader" else SearchResult
        return await self._json(call, result_type)

    async def list_models(self) -> ModelList:
        call = Call("GET", "/v1/models", AuthStyle.BEARER, CallKind.READ, "other")
        return await self._json(call, ModelList)

    async def get_pricing(
        self, model: str, provider: str | None = None, mapping_id: int | None = None
    ) -> PricingResponse:
        params = {"model": model}
        if provider is not None:
            params["provider"] = provider
        if mapping_id is not None:
            params[self._routes.pricing_mapping_parameter] = str(mapping_id)
        call = Call("GET", "/v1/models/pricing", AuthStyle.BEARER, CallKind.READ, "other", params=params)
        return await self._json(call, PricingResponse)

    # Plumbing -------------------------------------------------------------------------------------

    async def _json(self, call: Call, result_type: type[ModelT]) -> ModelT:
        body = await self._sender.json(call)
        try:
            return result_type.model_validate(body)
        except ValidationError as exc:
            raise UnexpectedResponse(
                f"{call.label}: answer does not match {result_type.__name__}: {exc}"
            ) from None

    async def _stream(self, call: Call, new_aggregator: Callable[[], Aggregator[ModelT]]) -> ModelT:
        async def aggregate(response: httpx.Response) -> ModelT:
            aggregator = new_aggregator()
            async for event in read_events(response.aiter_lines()):
                aggregator.feed(event)
            try:
                return aggregator.result()
            except ValidationError as exc:
                raise UnexpectedResponse(f"{call.label}: streamed answer does not validate: {exc}") from None

        return await self._sender.run(call, aggregate)


def _request_body(
    model_type: type[BaseModel], request: RequestLike, *, stream: bool | None = False
) -> dict[str, Any]:
    """Validate a request (a model or a plain mapping) and return the JSON body to send.

    ``stream`` is the method argument: it decides the body's flag, so a stray ``stream: true`` in a
    manifest cannot turn a JSON answer into events. None leaves the body alone.
    """
    try:
        if isinstance(request, model_type):
            model = request
        else:
            raw = request.model_dump(exclude_unset=True) if isinstance(request, BaseModel) else dict(request)
            model = model_type.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(body)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidRequest(f"{model_type.__name__}: {problems}") from None
    body = model.model_dump(mode="json", exclude_unset=True, by_alias=True)
    if stream is not None:
        body.pop("stream", None)
        if stream:
            body["stream"] = True
    return body


def _promised_length(response: httpx.Response) -> str | None:
    """The body length the answer promised, when the bytes we save are the bytes it counted."""
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        return None  # the length counts the compressed body; we save the decoded one
    return response.headers.get("content-length")
