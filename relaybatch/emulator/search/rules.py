"""The four web-search routes' query rules and deterministic synthetic results.

Pure functions; ``search_route.py`` adds auth, billing and the flat error envelope. Query
parameters beyond ``q`` and ``url`` are not public: the emulator accepts ``num`` (1-20 results,
default 5) on the search-like routes and documents it as an assumption.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

from relaybatch.emulator.problems import InvalidRequest

SEARCH_ROUTES = ("search", "simple-search", "search-news")
ROUTES = (*SEARCH_ROUTES, "reader")
MAX_QUERY_CHARS = 2_000
DEFAULT_RESULTS, MAX_RESULTS = 5, 20
# Latency the real routes report (public-facts.md: simple about 1 s, the others 3 to 15 s); the
# emulator reports a deterministic figure in this band in took_ms without sleeping for it.
TOOK_MS_BANDS: dict[str, tuple[int, int]] = {
    "simple-search": (600, 1_400),
    "search": (3_000, 15_000),
    "search-news": (3_000, 15_000),
    "reader": (3_000, 15_000),
}


def _number(seed: str, low: int, high: int) -> int:
    digest = hashlib.sha256(seed.encode()).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low + 1)


def took_ms(route: str, key: str) -> int:
    low, high = TOOK_MS_BANDS[route]
    return _number(f"{route}\n{key}\ntook", low, high)


def parse_search_query(params: dict[str, str]) -> tuple[str, int]:
    query = params.get("q", "").strip()
    if not query:
        raise InvalidRequest("query parameter 'q' is required", param="q")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRequest(f"'q' is longer than {MAX_QUERY_CHARS} characters", param="q")
    raw_count = params.get("num")
    if raw_count is None:
        return query, DEFAULT_RESULTS
    if not raw_count.isdigit() or not 1 <= int(raw_count) <= MAX_RESULTS:
        raise InvalidRequest(f"'num' must be an integer from 1 to {MAX_RESULTS}", param="num")
    return query, int(raw_count)


def parse_reader_query(params: dict[str, str]) -> str:
    url = params.get("url", "").strip()
    if not url:
        raise InvalidRequest("query parameter 'url' is required", param="url")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidRequest("'url' must be an absolute http or https URL", param="url")
    return url


def _slug(text: str) -> str:
    words = "".join(char if char.isalnum() else " " for char in text.lower()).split()
    return "-".join(words[:6]) or "result"


def organic_results(route: str, query: str, count: int) -> list[dict[str, Any]]:
    """``count`` results for a query; only the deep and news searches carry ``contexts``."""
    results = []
    for index in range(count):
        site = f"site{_number(f'{query}#{index}', 1, 90)}.example"
        kind = "news" if route == "search-news" else "article"
        result: dict[str, Any] = {
            "title": f"{query} - {kind} {index + 1}",
            "link": f"https://{site}/{kind}/{_slug(query)}-{index + 1}",
            "snippet": f"Result {index + 1} about {query}: a synthetic snippet from the emulator.",
        }
        if route != "simple-search":
            result["contexts"] = [
                {"idx": part, "text": f"Passage {part + 1} of result {index + 1} on {query}."}
                for part in range(2)
            ]
        results.append(result)
    return results


def search_response(route: str, query: str, count: int) -> dict[str, Any]:
    return {
        "code": 200,
        "message": "ok",
        "took_ms": took_ms(route, query),
        "data": {"organic": organic_results(route, query, count)},
    }


def reader_response(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    title = parts.path.strip("/").split("/")[-1] or parts.netloc
    content = (
        f"# {title}\n\nSource: {url}\n\n"
        f"This page was fetched by the emulator's reader. It stands in for the text of {parts.netloc}.\n\n"
        f"- fetched path: {parts.path or '/'}\n- digest: {hashlib.sha256(url.encode()).hexdigest()[:12]}\n"
    )
    return {"code": 200, "message": "success", "content": content}
