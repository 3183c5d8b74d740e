"""Web search: the capability the ``search`` engine name serves (the search service).

Results come from the open web: titles and snippets are the pages' own words, so the
service marks them ``untrusted_output``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SearchRequest:
    query: str  # 1..1000 characters, as the caller wrote it
    count: int  # results wanted, 1..20
    language: str | None = None  # ISO 639 code of the preferred result language


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str  # http(s) only
    snippet: str  # plain text


@dataclass(frozen=True)
class SearchResult:
    hits: tuple[SearchHit, ...]  # best first, at most request.count


class SearchEngine(Protocol):
    async def search(self, request: SearchRequest) -> SearchResult:
        """The web's answers to ``request``; EngineError on failure."""
        ...
