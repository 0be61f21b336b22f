"""Web search: GET /v1/websearch/{search,simple-search,search-news,reader}.

``rules`` reads queries and makes results; ``route`` authenticates, limits and bills.
"""

from relaybatch.emulator.search.route import routes

__all__ = ["routes"]
