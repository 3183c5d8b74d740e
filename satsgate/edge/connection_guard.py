"""Slow clients and connection floods: timeouts and caps on every connection.

aiohttp's own defaults suit a server behind a reverse proxy: no limit on open
connections, and an idle connection kept 3630 s. satsgate listens directly, so
each connection is served by :class:`GuardedRequestHandler` (aiohttp's handler with
three timers and a cap check) through :class:`GuardedSite`:

- the **head timer** (``header_timeout_s``): a new connection must deliver a complete
  request head within this of opening; on a kept-alive connection, a request's head
  must be complete within this of its first byte. A Slowloris client that trickles
  header lines is closed when it runs out.
- the **body timer** (``body_timeout_s``): the body must have arrived within this of
  the head being read; otherwise the connection is closed (the handler's read fails,
  which is logged at debug).
- **keep-alive** (``keepalive_timeout_s``): aiohttp's own timer; it closes a connection
  with no request in progress this long after its last response, whether or not part
  of a next request arrived.
- **caps** (``max_connections``, ``max_connections_per_client``): a connection over
  either is answered at once with 429 ``RATE_LIMITED`` (the error envelope,
  ``Retry-After``) and closed, before anything is read from it. A client is its address
  (the /64 of an IPv6 one); trusted proxies (``trusted_proxies``) count only toward the
  total.

The handler also answers aiohttp's own protocol errors (a malformed request line, an
oversized header, a bad Content-Length) with the error envelope instead of
``text/plain``, logging them at debug: they are the client's fault, and a hostile
client can send thousands. (A request line or header over aiohttp's limits is still
answered 400, not 431: the parser reports one status for all of them.)
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from satsgate.config.settings import Settings
from satsgate.edge.http import Handler, dumps
from satsgate.edge.ratelimit import IpNetwork, address_key, parse_networks
from satsgate.errors import ApiError, ErrorCode, envelope

log = logging.getLogger(__name__)

REFUSE_RETRY_AFTER_S = 5
REPORT_EVERY_S = 60.0
_AIOHTTP_KEEPALIVE_S = 3630.0  # aiohttp's default, for keepalive_timeout_s = 0


@dataclass(frozen=True)
class GuardConfig:
    header_timeout_s: float
    body_timeout_s: float
    keepalive_timeout_s: float
    max_connections: int
    max_connections_per_client: int
    trusted_proxies: tuple[IpNetwork, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> GuardConfig:
        return cls(
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            keepalive_timeout_s=settings.keepalive_timeout_s,
            max_connections=settings.max_connections,
            max_connections_per_client=settings.max_connections_per_client,
            trusted_proxies=parse_networks(settings.trusted_proxies),
        )


class ConnectionGuard:
    """Counts open connections, in total and per client, against the caps."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.total = 0
        self.per_client: Counter[str] = Counter()
        self.refused = 0
        self._reported_refused = 0
        self._reported_at = 0.0

    def note_refusal(self, reason: str, now: float) -> None:
        """Count a refused connection; say so in the log at most once a minute."""
        self.refused += 1
        if now - self._reported_at >= REPORT_EVERY_S:
            log.warning(
                "refused %d connection(s) since the last report (%s; caps: %d in total, "
                "%d per client)",
                self.refused - self._reported_refused,
                reason.rstrip("."),
                self.config.max_connections,
                self.config.max_connections_per_client,
            )
            self._reported_refused = self.refused
            self._reported_at = now

    def client_of(self, peername: Any) -> tuple[str, bool]:
        """(the client's key, whether it is a trusted proxy) for a transport's peername."""
        host = peername[0] if isinstance(peername, tuple) and peername else str(peername)
        try:
            address = ipaddress.ip_address(str(host).split("%", 1)[0])
        except ValueError:
            return str(host), False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        proxy = any(
            address in net for net in self.config.trusted_proxies if net.version == address.version
        )
        return address_key(address), proxy

    def admit(self, client: str, proxy: bool) -> str:
        """Count a new connection in; '' when admitted, else why it is refused."""
        cfg = self.config
        if cfg.max_connections and self.total >= cfg.max_connections:
            return "The server has too many open connections."
        if (
            cfg.max_connections_per_client
            and not proxy
            and self.per_client[client] >= cfg.max_connections_per_client
        ):
            return "Too many open connections from this address."
        self.total += 1
        self.per_client[client] += 1
        return ""

    def release(self, client: str) -> None:
        self.total -= 1
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]


def _refusal(message: str) -> bytes:
    body = dumps(
        envelope(ErrorCode.RATE_LIMITED, message, retry_after_seconds=REFUSE_RETRY_AFTER_S)
    ).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Retry-After: {REFUSE_RETRY_AFTER_S}\r\n"
        "X-Error-Code: RATE_LIMITED\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


_STATUS_CODES = {
    400: ErrorCode.INVALID_INPUT,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    504: ErrorCode.TIMEOUT,
}


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection handler with the head and body timers and the caps."""

    def __init__(self, guard: ConnectionGuard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._client = ""
        self._admitted = False
        self._in_request = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    # -- connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client, proxy = self._guard.client_of(transport.get_extra_info("peername"))
        refusal = self._guard.admit(client, proxy)
        if refusal:
            self._guard.note_refusal(refusal, self._loop.time())
            tcp = cast(asyncio.Transport, transport)
            tcp.write(_refusal(refusal))
            tcp.close()
            return
        self._client = client
        self._admitted = True
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return  # refused: aiohttp never saw this connection
        self._admitted = False
        self._guard.release(self._client)
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if data and not self._in_request and self._head_timer is None:
            self._arm_head_timer()  # the first byte of a kept-alive connection's next request
        super().data_received(data)

    # -- timers -------------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        timeout = self._guard.config.header_timeout_s
        if timeout > 0:
            self._head_timer = self._loop.call_later(timeout, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_request:
            log.debug("closing a connection whose request head did not arrive in time")
            self.force_close()

    def request_started(self, request: web.BaseRequest) -> None:
        """From the middleware: the head is read; the body, if any, has its own timer."""
        self._in_request = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        timeout = self._guard.config.body_timeout_s
        if timeout > 0 and request.body_exists and not request.content.is_eof():
            self._body_timer = self._loop.call_later(timeout, self._body_timed_out, request.content)

    def _body_timed_out(self, content: Any) -> None:
        self._body_timer = None
        if not content.is_eof():
            log.debug("closing a connection whose request body did not arrive in time")
            self.force_close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._in_request = False
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

    # -- aiohttp's own errors, in the envelope ------------------------------------------

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """A body the client sent broken (a Content-Encoding it does not decode to) fails
        again when aiohttp drains what the handler left unread: the client's error, not
        ours (the answer has gone out already)."""
        exc = kw.get("exc_info")
        if isinstance(exc, RequestPayloadError):
            log.debug("a request body that did not decode: %s", exc)
            return
        super().log_exception(*args, **kw)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError) or status < 500:
            log.debug("bad request from %s: %s", request.remote, message or exc)
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response is already under way")
        code = _STATUS_CODES.get(status, ErrorCode.INTERNAL_ERROR)
        if code == ErrorCode.INVALID_INPUT:
            text = f"Malformed HTTP request: {message or exc or 'unreadable'}"
        elif code == ErrorCode.INTERNAL_ERROR:
            text = "An unexpected error inside satsgate."
        else:
            text = ApiError(code, "").envelope()["suggestion"]
        resp = web.json_response(envelope(code, text), status=status, dumps=dumps)
        resp.headers["X-Error-Code"] = code
        resp.force_close()
        return resp


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection its request head has been read (stops the head timer)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        protocol.request_started(request)
    return await handler(request)


class GuardedSite(web.BaseSite):
    """A TCP site whose connections are served by :class:`GuardedRequestHandler`."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        backlog: int = 1024,
        **handler_kwargs: Any,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self.guard = guard
        self._handler_kwargs = handler_kwargs

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    def _protocol(self) -> GuardedRequestHandler:
        server = self._runner.server
        assert server is not None
        return GuardedRequestHandler(
            self.guard,
            server,
            loop=asyncio.get_running_loop(),
            keepalive_timeout=self.guard.config.keepalive_timeout_s or _AIOHTTP_KEEPALIVE_S,
            access_log=None,
            **self._handler_kwargs,
        )

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
        )


# File descriptors a server needs besides its client connections: the databases, the
# process pool's pipes, outgoing HTTP, output files, the node's RPC socket.
_FD_RESERVE = 256


def ensure_fd_limit(max_connections: int) -> int:
    """Raise the soft open-file limit so that ``max_connections`` clients fit beside what
    the server itself holds; returns the connection cap that fits. When the hard limit
    cannot hold the configured cap, the cap is lowered to what fits and the log says so:
    refused connections are answered, whereas a process out of file descriptors fails
    accept() and whatever else needs a file."""
    if max_connections <= 0:
        return max_connections
    wanted = max_connections + _FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return max_connections
    new_soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    except (ValueError, OSError):
        new_soft = soft
    if new_soft >= wanted:
        return max_connections
    fitting = max(1, new_soft - _FD_RESERVE)
    log.warning(
        "max_connections %d needs about %d open files but the limit is %d: serving at most "
        "%d connections (raise the limit, ulimit -n / LimitNOFILE, to allow more)",
        max_connections,
        wanted,
        new_soft,
        fitting,
    )
    return fitting
