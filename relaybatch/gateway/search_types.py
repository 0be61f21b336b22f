"""Web search answers: search-like routes and the reader."""

from __future__ import annotations

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class SearchContext(WireModel):
    idx: int = 0
    text: str = ""


class SearchHit(WireModel):
    title: str = ""
    link: str = ""
    snippet: str = ""
    contexts: list[SearchContext] | None = None


class SearchData(WireModel):
    organic: list[SearchHit] = Field(default_factory=list)


class SearchResult(WireModel):
    """``search``, ``simple-search`` and ``search-news``."""

    code: int = 200
    message: str = ""
    took_ms: int | None = None
    data: SearchData = SearchData()


class ReaderResult(WireModel):
    """``reader``: the fetched page as markdown text."""

    code: int = 200
    message: str = ""
    content: str = ""
