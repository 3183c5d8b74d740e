"""POST /api/mcp: MCP's Streamable HTTP transport, stateless.

- No ``Mcp-Session-Id`` is issued; GET and DELETE answer 405 (aiohttp's, in the
  error envelope), so clients do not open a server-to-client stream.
- A request is answered with ``application/json``, or, when the client accepts
  ``text/event-stream`` and the tool sends progress, with an SSE stream
  (``event: message``) whose last event is the response. The stream is opened
  lazily at the first notification, so everything else stays plain JSON.
- Notifications and client responses get 202 with no body. Batches answer an
  array (notifications inside add no entry) and never stream.
- Payment-required never becomes HTTP 402 here: it is inside the JSON-RPC result.
- ``Origin``, when present, must be this service's own origin, a loopback
  origin, or one configured; anything else is 403 (DNS-rebinding defence).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from satsgate.edge import json_input
from satsgate.edge.http import dumps, sse_event
from satsgate.edge.ratelimit import LIMITS, separate_admission
from satsgate.mcp.context import CallContext
from satsgate.mcp.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidMessage,
    RpcError,
    error_message,
    parse_message,
)
from satsgate.mcp.server import SUPPORTED_VERSIONS, ClientGone, McpServer

MCP_PATH = "/api/mcp"
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_NEGOTIATION = frozenset({"initialize", "server/discover"})


@dataclass(frozen=True)
class McpEndpoint:
    """The MCP server and the transport's settings, as the app holds them."""

    server: McpServer
    own_origin: str
    allowed_origins: frozenset[str]
    max_body_bytes: int

    def origin_allowed(self, origin: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if origin == self.own_origin or origin in self.allowed_origins:
            return True
        try:
            parts = urlsplit(origin)
            host = parts.hostname
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and host in _LOOPBACK_HOSTS


MCP = web.AppKey("mcp", McpEndpoint)


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def install(
    app: web.Application,
    make_server: Callable[[web.Application], McpServer],
    *,
    public_base_url: str,
    max_body_bytes: int,
    allowed_origins: Iterable[str] = (),
) -> None:
    """Add POST /api/mcp; the server is made at start-up (``make_server(app)``), once
    what it serves exists."""
    origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins)

    async def mcp_ctx(app: web.Application) -> Any:
        app[MCP] = McpEndpoint(
            server=make_server(app),
            own_origin=_origin_of(public_base_url),
            allowed_origins=origins,
            max_body_bytes=max_body_bytes,
        )
        yield

    async def close_waits(app: web.Application) -> None:
        endpoint = app.get(MCP)
        if endpoint is not None:
            endpoint.server.close()

    app.cleanup_ctx.append(mcp_ctx)
    app.on_shutdown.append(close_waits)
    app.router.add_post(MCP_PATH, handle_post)


def _rpc_response(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


def _accepted() -> web.Response:
    return web.Response(status=202)


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is larger than ``limit``."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def handle_post(request: web.Request) -> web.StreamResponse:
    endpoint = request.app[MCP]
    origin = request.headers.get("Origin")
    if origin is not None and not endpoint.origin_allowed(origin):
        return _rpc_response(
            error_message(None, RpcError(INVALID_REQUEST, f"Origin {origin!r} is not allowed.")),
            403,
        )
    raw = await _read_body(request, endpoint.max_body_bytes)
    if raw is None:
        return _rpc_response(
            error_message(None, RpcError(INVALID_REQUEST, "The request body is too large.")), 413
        )
    try:
        payload = json_input.loads(raw)
    except json_input.JsonInputError as exc:
        return _rpc_response(error_message(None, RpcError(PARSE_ERROR, f"Parse error: {exc}")), 400)
    version = request.headers.get("MCP-Protocol-Version")
    if version is not None and version not in SUPPORTED_VERSIONS and not _negotiates(payload):
        return _rpc_response(
            error_message(
                None,
                RpcError(
                    INVALID_REQUEST,
                    f"Unsupported MCP-Protocol-Version {version!r}; "
                    f"supported: {', '.join(SUPPORTED_VERSIONS)}.",
                ),
            ),
            400,
        )
    if isinstance(payload, list):
        return await _batch(endpoint.server, payload, _rate_check(request))
    return await _single(request, endpoint.server, payload)


def _negotiates(payload: Any) -> bool:
    items = payload if isinstance(payload, list) else [payload]
    return any(isinstance(m, dict) and m.get("method") in _NEGOTIATION for m in items)


async def _single(request: web.Request, server: McpServer, payload: Any) -> web.StreamResponse:
    try:
        message = parse_message(payload)
    except InvalidMessage as exc:
        status = 400 if exc.error.code == INVALID_REQUEST else 200
        return _rpc_response(error_message(exc.request_id, exc.error), status)
    if message is None or message.is_notification:
        return _accepted()
    accept = request.headers.get("Accept", "")
    stream = _LazyEventStream(request) if "text/event-stream" in accept else None
    ctx = CallContext(
        progress_token=message.progress_token,
        send=stream.send if stream is not None else None,
        keepalive=stream.keepalive if stream is not None else None,
        rate_check=_rate_check(request),
    )
    try:
        response = await server.handle(message, ctx)
        if response is None:  # pragma: no cover - requests always have an answer
            return _accepted()
        if stream is not None and stream.response is not None:
            await stream.send(response)
            await stream.response.write_eof()
            return stream.response
    except ClientGone:
        assert stream is not None and stream.response is not None
        return stream.response  # nobody reads it; the connection is gone
    return _rpc_response(response)


def _rate_check(request: web.Request) -> Callable[[str], None] | None:
    limits = request.app.get(LIMITS)
    if limits is None:
        return None
    return functools.partial(limits.limiter.check, client=limits.client(request))


async def _batch(
    server: McpServer, payload: list[Any], rate_check: Callable[[str], None] | None
) -> web.Response:
    if not payload:
        return _rpc_response(
            error_message(None, RpcError(INVALID_REQUEST, "An empty batch is not a request.")),
            400,
        )
    answers: list[dict[str, Any]] = []
    for item in payload:
        try:
            message = parse_message(item)
        except InvalidMessage as exc:
            answers.append(error_message(exc.request_id, exc.error))
            continue
        if message is None or message.is_notification:
            continue
        with separate_admission():  # each message's invoices draw on the challenge limit
            answer = await server.handle(message, CallContext(rate_check=rate_check))
        if answer is not None:
            answers.append(answer)
    if not answers:
        return _accepted()
    return _rpc_response(answers)


class _LazyEventStream:
    """An SSE response that starts only when the first message is sent."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def _open(self) -> web.StreamResponse:
        if self.response is None:
            response = web.StreamResponse(
                headers={
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache, no-store",
                    "X-Accel-Buffering": "no",
                }
            )
            self.response = response
            await response.prepare(self._request)
        return self.response

    async def _write(self, data: bytes) -> None:
        try:
            response = await self._open()
            await response.write(data)
        except (ConnectionResetError, RuntimeError) as exc:
            raise ClientGone(str(exc)) from exc

    async def send(self, message: dict[str, Any]) -> None:
        await self._write(sse_event("message", message))

    async def keepalive(self) -> None:
        await self._write(b": keepalive\n\n")
