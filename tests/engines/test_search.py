"""Web search through the gate on the search provider kinds, against loopback fakes of
a SearXNG instance (``/search?format=json``) and the Brave Search API
(``/res/v1/web/search`` with ``X-Subscription-Token``): results as plain text, the count
and language passed on, a busy provider falling back to the next, and the refund after a
failure."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.conftest import ThreadedServer, free_port, make_settings, paid_l402_auth
from tests.payments.test_gateway import assert_envelope

BRAVE_KEY = "BSA-test-key"


class FakeSearch:
    """A SearXNG instance and the Brave Search API on one loopback server."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.queries: list[tuple[str, dict[str, str]]] = []
        self.brave_status = 200  # what the next Brave call answers
        self.searxng_json = True  # the instance lists json in search.formats
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_get("/res/v1/web/search", self._brave)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _searxng(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.queries.append(("searxng", query))
        if query.get("format") != "json" or not self.searxng_json:
            return web.Response(status=403, text="Forbidden")
        if not query.get("q"):
            return web.json_response({"error": "No query"}, status=400)
        results = [
            {"url": f"https://example.org/{i}", "title": f"Result {i} for {query['q']}",
             "content": f"Snippet &amp; text {i}", "engine": "duckduckgo",
             "parsed_url": ["https", "example.org", f"/{i}", "", "", ""], "score": 1.0}
            for i in range(30)
        ]  # fmt: skip
        results.insert(1, {"url": "javascript:alert(1)", "title": "x", "content": ""})
        return web.json_response({"query": query["q"], "results": results, "answers": []})

    async def _brave(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.queries.append(("brave", query))
        if request.headers.get("X-Subscription-Token") != BRAVE_KEY:
            detail = "The provided subscription token is invalid."
            error = {"id": "x", "status": 422, "code": "SUBSCRIPTION_TOKEN_INVALID",
                     "detail": detail, "meta": {}}  # fmt: skip
            return web.json_response({"type": "ErrorResponse", "error": error}, status=422)
        if self.brave_status != 200:
            status, self.brave_status = self.brave_status, 200
            error = {"id": "x", "status": status, "code": "RATE_LIMITED", "detail": "slow down"}
            return web.json_response({"type": "ErrorResponse", "error": error}, status=status)
        count = int(query.get("count", "20"))
        results = [
            {"title": f"<strong>Brave</strong> {i}", "url": f"https://brave.example/{i}",
             "description": f"About <strong>{query['q']}</strong>, part {i}",
             "type": "search_result", "language": "en", "family_friendly": True}
            for i in range(count)
        ]  # fmt: skip
        return web.json_response(
            {"type": "search", "query": {"original": query["q"]}, "web": {"results": results}}
        )


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSearch]:
    site = FakeSearch()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake: FakeSearch) -> Iterator[ThreadedServer]:
    providers = {
        "brave": {"kind": "brave", "base_url": f"{fake.url}/res/v1", "api_key": BRAVE_KEY,
                  "max_retries": 0},
        "sx": {"kind": "searxng", "base_url": fake.url, "max_retries": 0},
    }  # fmt: skip
    settings = make_settings(
        tmp_path_factory.mktemp("search"), providers=providers, engines={"search": ["brave", "sx"]}
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        yield c


async def paid_search(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, "search", body)
    return await client.post("/api/l402/search", json=body, headers={"Authorization": auth})


async def test_search_answers_plain_text_results(
    client: httpx.AsyncClient, fake: FakeSearch
) -> None:
    resp = await paid_search(client, {"query": "lightning fees", "count": 3, "language": "de"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["count"] == 3 and body["untrusted_output"] is True
    first = body["results"][0]
    assert first == {"title": "Brave 0", "url": "https://brave.example/0",
                     "snippet": "About lightning fees, part 0"}  # fmt: skip
    provider, sent = fake.queries[-1]
    assert provider == "brave" and sent["count"] == "3" and sent["search_lang"] == "de"
    assert sent["safesearch"] == "moderate"


async def test_a_busy_provider_falls_back_to_the_next(
    client: httpx.AsyncClient, fake: FakeSearch
) -> None:
    fake.brave_status = 429
    resp = await paid_search(client, {"query": "sats", "count": 5, "language": "ja"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [p for p, _q in fake.queries[-2:]] == ["brave", "searxng"]
    assert fake.queries[-2][1]["search_lang"] == "jp"  # Brave's code for Japanese
    assert fake.queries[-1][1] == {
        "q": "sats",
        "format": "json",
        "safesearch": "1",
        "language": "ja",
    }
    # The instance's non-web link is dropped, entities are decoded, the count is kept.
    assert body["count"] == 5 and all(r["url"].startswith("https://") for r in body["results"])
    assert body["results"][0]["snippet"] == "Snippet & text 0"


async def test_every_provider_failing_is_refunded(
    client: httpx.AsyncClient, fake: FakeSearch
) -> None:
    fake.brave_status, fake.searxng_json = 503, False
    try:
        resp = await paid_search(client, {"query": "refund me"})
    finally:
        fake.searxng_json = True
    body = assert_envelope(resp, "SERVICE_ERROR", 502)
    assert body["refund"]["amount_sats"] == 21
    assert "brave" not in resp.text.lower() and fake.url not in resp.text


async def test_search_needs_a_provider(tmp_path_factory: pytest.TempPathFactory) -> None:
    srv = ThreadedServer(make_settings(tmp_path_factory.mktemp("no-search")))
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:
            resp = await c.post("/api/l402/search", json={"query": "x"})
        assert resp.status_code == 503 and "invoice" not in resp.json(), resp.text
    finally:
        srv.stop()
