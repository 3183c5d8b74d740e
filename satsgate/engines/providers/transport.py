"""The HTTP transport under the provider SDKs: the official ``openai`` and ``anthropic``
clients build, authenticate and check every request (and map its errors), and aiohttp,
satsgate's own HTTP stack, carries it.

Both SDKs take an ``httpx2.AsyncClient`` (``http_client=``), whose transport is pluggable.
Their default transport (httpcore2) spends several times aiohttp's CPU per request; on a
gateway whose upstream answers in a few milliseconds that is most of satsgate's own cost
of a proxied call (bench/proxy_overhead.py).

Timeouts come from the SDK, per request (``extensions["timeout"]``): the connect timeout,
and the read timeout between received bytes, as httpx applies them. A timeout is raised
as ``httpx2.ReadTimeout`` / ``ConnectTimeout`` and a failed connection as
``httpx2.ConnectError``, which the SDKs turn into their APITimeoutError and
APIConnectionError. Response bodies are handed over as received (compressed if they came
so): httpx2 decodes them by their Content-Encoding, as with its own transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx2

# Set by aiohttp itself from the request it sends.
_HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def _timeouts(extensions: Mapping[str, Any]) -> aiohttp.ClientTimeout:
    timeout = extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None,
        connect=timeout.get("connect"),
        sock_connect=timeout.get("connect"),
        sock_read=timeout.get("read"),
    )


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport over one aiohttp session (created in the running loop on first
    use; pooled keep-alive connections)."""

    def __init__(self, connections: int = 100) -> None:
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                auto_decompress=False,  # httpx2 decodes by Content-Encoding
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
            )
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = [
            (name, value)
            for name, value in request.headers.multi_items()
            if name.lower() not in _HOP_HEADERS
        ]
        try:
            async with self._client().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                timeout=_timeouts(request.extensions),
                allow_redirects=False,
            ) as resp:
                content = await resp.read()
                status = resp.status
                raw_headers = list(resp.raw_headers)
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc), request=request) from exc
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx2.ReadTimeout(str(exc), request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.RemoteProtocolError(str(exc), request=request) from exc
        return httpx2.Response(
            status_code=status, headers=raw_headers, content=content, request=request
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def http_client(timeout_s: float) -> httpx2.AsyncClient:
    """The ``http_client`` for an SDK: httpx2's request model, aiohttp's transport."""
    return httpx2.AsyncClient(
        transport=AiohttpTransport(), timeout=timeout_s, follow_redirects=False
    )
