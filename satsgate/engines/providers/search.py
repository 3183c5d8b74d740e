"""Provider kinds ``searxng`` and ``brave``: web search (engine ``search``).

- ``searxng``: a SearXNG instance (``base_url``, usually the operator's own), ``GET
  /search?q=&format=json``; the instance must list ``json`` in ``search.formats`` of its
  settings.yml, or it answers 403 (logged for the operator). No key unless the
  instance sits behind one (``api_key`` is then sent as ``Authorization: Bearer``).
- ``brave``: the Brave Search API, ``GET /res/v1/web/search`` with the key in
  ``X-Subscription-Token``; ``web.results[]`` title, url and description (which may
  hold ``<strong>`` marks: removed).

Snippets become plain text, results without an http(s) URL are dropped, and the count
is cut to what was asked. Failures map through ``upstream`` like every provider's.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

import httpx

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.providers import upstream
from satsgate.engines.registry import EngineDeps
from satsgate.engines.search import SearchHit, SearchRequest, SearchResult
from satsgate.errors import ErrorCode

BRAVE_BASE_URL = "https://api.search.brave.com/res/v1"
# Brave's search_lang values where they differ from the ISO 639-1 code; a language
# outside BRAVE_LANGUAGES is not sent (the results are then not filtered by language).
_BRAVE_CODES: Mapping[str, str] = {"ja": "jp", "zh": "zh-hans", "pt": "pt-br", "no": "nb"}
BRAVE_LANGUAGES = frozenset(
    {
        "ar",
        "eu",
        "bn",
        "bg",
        "ca",
        "zh-hans",
        "zh-hant",
        "hr",
        "cs",
        "da",
        "nl",
        "en",
        "en-gb",
        "et",
        "fi",
        "fr",
        "gl",
        "de",
        "gu",
        "he",
        "hi",
        "hu",
        "is",
        "it",
        "jp",
        "kn",
        "ko",
        "lv",
        "lt",
        "ms",
        "ml",
        "mr",
        "nb",
        "pl",
        "pt-br",
        "pt-pt",
        "pa",
        "ro",
        "ru",
        "sr",
        "sk",
        "sl",
        "es",
        "sv",
        "ta",
        "te",
        "th",
        "tr",
        "uk",
        "vi",
    }
)
_TAG = re.compile(r"<[^>]{0,200}>")
_SPACE = re.compile(r"\s+")
SNIPPET_MAX_CHARS = 500


def plain(text: object, limit: int = SNIPPET_MAX_CHARS) -> str:
    """Markup removed, entities decoded, whitespace folded, cut at ``limit``."""
    out = _SPACE.sub(" ", html.unescape(_TAG.sub("", str(text or "")))).strip()
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def hit(title: object, url: object, snippet: object) -> SearchHit | None:
    address = str(url or "").strip()
    if not address.lower().startswith(("https://", "http://")) or len(address) > 2048:
        return None
    return SearchHit(plain(title, 300) or address, address, plain(snippet))


class _SearchProvider:
    KIND = ""

    def __init__(self, config: ProviderConfig, deps: EngineDeps, base_url: str) -> None:
        self.config = config
        self.base_url = base_url.rstrip("/")
        self.retries = upstream.retries_option(config)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=10.0), follow_redirects=False
        )

    def engine(self, name: str) -> object | None:
        return self if name == "search" else None

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _get(self, path: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
        """The JSON of one GET (repeated on a dropped connection or a transient error)."""

        async def once() -> Any:
            try:
                resp = await self.http.get(self.base_url + path, params=params, headers=headers)
            except httpx.TimeoutException:
                raise upstream.timeout_error() from None
            if resp.status_code >= 400:
                raise _HttpStatus(resp)
            try:
                return resp.json()
            except ValueError:
                raise upstream.malformed_error() from None

        try:
            return await upstream.with_retry(once, retries=self.retries, retryable=_retryable)
        except _HttpStatus as exc:
            error = upstream.status_error(exc.resp.status_code, exc.resp.headers, None)
            upstream.log_failure("search", self.KIND, error, f"HTTP {exc.resp.status_code}")
            raise error from None
        except httpx.HTTPError as exc:
            error = EngineError(ErrorCode.L402_UPSTREAM_FAILED, upstream.UNAVAILABLE_MESSAGE)
            upstream.log_failure("search", self.KIND, error, type(exc).__name__)
            raise error from None


class _HttpStatus(Exception):
    def __init__(self, resp: httpx.Response) -> None:
        super().__init__(resp.status_code)
        self.resp = resp


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, _HttpStatus):
        return exc.resp.status_code in upstream.RETRY_STATUSES
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.TimeoutException)


class SearxngProvider(_SearchProvider):
    KIND = "searxng"

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        if not config.base_url:
            raise EngineConfigError(f"[providers.{config.name}] needs the instance's base_url")
        super().__init__(config, deps, config.base_url)

    async def search(self, request: SearchRequest) -> SearchResult:
        params: dict[str, Any] = {"q": request.query, "format": "json", "safesearch": 1}
        if request.language:
            params["language"] = request.language
        headers = {"Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        doc = await self._get("/search", params, headers)
        results = doc.get("results") if isinstance(doc, Mapping) else None
        if not isinstance(results, list):
            raise upstream.malformed_error()
        return _result(
            (hit(r.get("title"), r.get("url"), r.get("content")) for r in results if _obj(r)),
            request.count,
        )


class BraveProvider(_SearchProvider):
    KIND = "brave"

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        if not config.api_key:
            raise EngineConfigError(f"[providers.{config.name}] needs api_key or api_key_env")
        super().__init__(config, deps, config.base_url or BRAVE_BASE_URL)

    async def search(self, request: SearchRequest) -> SearchResult:
        params: dict[str, Any] = {
            "q": request.query,
            "count": request.count,
            "safesearch": "moderate",
        }
        language = _BRAVE_CODES.get(request.language or "", request.language or "")
        if language in BRAVE_LANGUAGES:
            params["search_lang"] = language
        headers = {"Accept": "application/json", "X-Subscription-Token": self.config.api_key}
        doc = await self._get("/web/search", params, headers)
        web = doc.get("web") if isinstance(doc, Mapping) else None
        results = web.get("results", []) if isinstance(web, Mapping) else []
        if not isinstance(results, list):
            raise upstream.malformed_error()
        return _result(
            (hit(r.get("title"), r.get("url"), r.get("description")) for r in results if _obj(r)),
            request.count,
        )


def _obj(value: object) -> bool:
    return isinstance(value, Mapping)


def _result(hits: Any, count: int) -> SearchResult:
    kept: list[SearchHit] = []
    seen: set[str] = set()
    for found in hits:
        if found is not None and found.url not in seen:
            seen.add(found.url)
            kept.append(found)
        if len(kept) == count:
            break
    return SearchResult(tuple(kept))
