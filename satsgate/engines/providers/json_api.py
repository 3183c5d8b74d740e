"""An upstream JSON API called directly: a POST whose answer is JSON, or a stream of
server-sent events. For the paid hot paths (a chat completion, a streamed one): an SDK
builds an options model, merges URL and headers and wraps its transport for every
request, and parses every streamed chunk into typed objects, several times the CPU of
the HTTP exchange itself (bench/README.md, issue 36).

A POST goes out on an aiohttp client session; a stream on an httpx client read with
httpx-sse. An error answer (HTTP status >= 400) is read whole and raised as
:class:`satsgate.engines.providers.upstream.StatusError`, which an adapter's SdkErrors
maps as it maps its SDK's status errors; the transports' own failures are
:data:`TIMEOUTS` and :data:`FAILURES`. Timeouts apply per connect and per read, as the
SDKs apply theirs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
import httpx_sse

from satsgate.engines.providers.upstream import StatusError

# aiohttp's ServerTimeoutError is a TimeoutError and a ClientError: adapters test
# timeouts first.
TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, httpx.TimeoutException)
FAILURES: tuple[type[BaseException], ...] = (aiohttp.ClientError, httpx.TransportError)


def error_body(raw: bytes) -> object:
    """An error answer's body as the SDKs hand it over: its JSON, else its text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


class JsonApi:
    """One provider's API with its headers (key, version) and timeout."""

    def __init__(self, headers: Mapping[str, str], timeout_s: float) -> None:
        self._headers = {"Content-Type": "application/json", **headers}
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None  # made inside the loop
        self._streams: httpx.AsyncClient | None = None

    async def post(self, url: str, content: bytes) -> Any:
        """POST ``content`` (JSON bytes) to ``url``; the answer's JSON (ValueError when it
        is not JSON), or StatusError."""
        if self._session is None:
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self._timeout_s, sock_read=self._timeout_s
            )
            headers = {**self._headers, "Accept": "application/json"}
            self._session = aiohttp.ClientSession(headers=headers, timeout=timeout)
        async with self._session.post(url, data=content) as response:
            raw = await response.read()
            if response.status >= 400:
                raise StatusError(response.status, response, error_body(raw))
        return json.loads(raw)

    async def open_events(self, url: str, content: bytes) -> httpx.Response:
        """POST ``content`` for a stream of server-sent events: the response once its
        status is read (read its events with :func:`events`, close it when done), or
        StatusError with the error answer read whole."""
        if self._streams is None:
            headers = {**self._headers, "Accept": "text/event-stream"}
            self._streams = httpx.AsyncClient(headers=headers, timeout=self._timeout_s)
        request = self._streams.build_request("POST", url, content=content)
        response = await self._streams.send(request, stream=True)
        if response.status_code >= 400:
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            raise StatusError(response.status_code, response, error_body(raw))
        return response

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._streams is not None:
            await self._streams.aclose()


def events(response: httpx.Response) -> AsyncIterator[httpx_sse.ServerSentEvent]:
    """The server-sent events of a response :meth:`JsonApi.open_events` opened."""
    return httpx_sse.EventSource(response).aiter_sse()
