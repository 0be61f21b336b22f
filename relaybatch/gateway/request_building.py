"""Build each attempt's request from parts prepared once per client.

``httpx.AsyncClient.build_request`` re-parses and re-merges the base URL, copies the client's
default headers and re-encodes the JSON body on every call; profiled at 64 requests in flight,
that was about a quarter of the client's CPU per request. The parts never change between calls of
one client, so they are prepared once here and the request is made directly — with exactly what
``build_request`` would have produced: the same absolute URL, the client's default headers plus
the family's auth headers, ``Content-Type: application/json`` with a body, and the client's
default timeout as the ``timeout`` extension (the aiohttp transport reads its limits from it).
``RequestParts`` is what one attempt sends; the httpx path turns it into an ``httpx.Request``, the
aiohttp fast path (exchange.py) hands it to aiohttp as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic_core

from relaybatch.gateway.auth import AuthStyle

# Paths with ids in them (polls, downloads) would grow the URL cache without bound; past this
# many distinct paths the URL is merged per call instead of cached.
MAX_CACHED_PATHS = 256


class NoCookies(httpx.Cookies):
    """A cookie store that never stores: the gateway authenticates by header and sets no cookies.

    httpx offers every response to the client's cookie jar, which wraps it in urllib request and
    response adapters even when there is no ``Set-Cookie`` header — about a tenth of the client's
    CPU per request in a profile. Ignoring cookies also keeps a stray ``Set-Cookie`` (from a proxy
    in front of the gateway, say) from being replayed on later requests.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


@dataclass(frozen=True, slots=True)
class RequestParts:
    """One attempt's request: absolute URL, every header (auth included), body and timeouts."""

    method: str
    url: httpx.URL
    headers: Mapping[str, str]
    content: bytes | None
    timeout: dict[str, float | None]

    def httpx_request(self) -> httpx.Request:
        return httpx.Request(
            self.method,
            self.url,
            headers=self.headers,
            content=self.content,
            extensions={"timeout": self.timeout},
        )


class RequestBuilder:
    """Makes the requests of one ``httpx.AsyncClient``; reads its base URL, headers and timeout once."""

    def __init__(
        self, http: httpx.AsyncClient, headers_for: Callable[[AuthStyle], Mapping[str, str]]
    ) -> None:
        self._base_url = http.base_url  # httpx keeps it with a trailing "/"
        self._client_headers = http.headers
        self._default_timeout = http.timeout.as_dict()
        self._headers_for = headers_for
        self._headers: dict[tuple[AuthStyle, bool], dict[str, str]] = {}
        self._urls: dict[str, httpx.URL] = {}

    def build(
        self,
        method: str,
        path: str,
        auth: AuthStyle,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> RequestParts:
        headers: Mapping[str, str] = self._headers_with_auth(auth, json is not None)
        if extra_headers:
            merged = httpx.Headers(headers)
            merged.update(extra_headers)
            headers = dict(merged.items())
        url = self._url(path)
        if params:
            url = url.copy_merge_params(params)
        return RequestParts(
            method,
            url,
            headers,
            # Serialised once per attempt straight to bytes (compact, UTF-8, the same key order as
            # the dict), instead of httpx's json.dumps + encode.
            pydantic_core.to_json(json) if json is not None else None,
            timeout.as_dict() if timeout is not None else self._default_timeout,
        )

    def _headers_with_auth(self, auth: AuthStyle, has_body: bool) -> dict[str, str]:
        """The client's default headers, then the family's auth headers; never changed once made."""
        key = (auth, has_body)
        prepared = self._headers.get(key)
        if prepared is None:
            headers = httpx.Headers(self._client_headers)
            headers.update(self._headers_for(auth))
            if has_body:
                headers["Content-Type"] = "application/json"
            prepared = self._headers[key] = dict(headers.items())
        return prepared

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._merge(path)
            if len(self._urls) < MAX_CACHED_PATHS:
                self._urls[path] = url
        return url

    def _merge(self, path: str) -> httpx.URL:
        """``base_url`` + ``path`` as httpx merges them: appended to the base path, never replacing it."""
        relative = httpx.URL(path)
        if not relative.is_relative_url:
            return relative
        return self._base_url.copy_with(raw_path=self._base_url.raw_path + relative.raw_path.lstrip(b"/"))
