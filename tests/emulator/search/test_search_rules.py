"""The pure rules of web search: deterministic results of the asked size."""

from __future__ import annotations

from relaybatch.emulator.search.rules import organic_results, took_ms


def test_search_results_are_deterministic_and_sized() -> None:
    assert organic_results("search", "q", 3) == organic_results("search", "q", 3)
    assert len(organic_results("search-news", "q", 7)) == 7
    assert took_ms("search", "q") == took_ms("search", "q")
