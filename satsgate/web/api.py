"""The node's own free routes: health, the error catalog, the model catalog, output
files, LNURL-withdraw refunds, and (with a node that simulates payments) the dev routes.
The free operations' routes are satsgate.web.operation_routes's; discovery's are
satsgate.discovery's; app.py composes them all."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from satsgate import __version__
from satsgate.appkeys import BACKEND, ENGINES, FILES, REFUNDS, STARTED_AT
from satsgate.edge.http import dumps, read_json
from satsgate.errors import ApiError, ErrorCode, catalog_document
from satsgate.lightning.backend import BackendError, SimulatedPayments


def add_routes(app: web.Application, backend: object) -> None:
    r = app.router
    r.add_get("/api/health", health)
    r.add_get("/api/error-codes", error_codes)
    r.add_get("/api/files/{name}", serve_file)
    r.add_get("/api/lnurlw/{k1}", lnurl_withdraw)
    r.add_get("/api/lnurlw/{k1}/callback", lnurl_withdraw_callback)
    if isinstance(backend, SimulatedPayments):
        # Dev-only routes exist only with a node that simulates payments (the dev node).
        r.add_post("/api/dev/pay", dev_pay)
        r.add_get("/api/dev/outgoing", dev_outgoing)
        r.add_post("/api/dev/outgoing-mode", dev_outgoing_mode)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


async def health(request: web.Request) -> web.Response:
    app = request.app
    info = await app[BACKEND].info()
    # Liveness and versions only: business figures are the operator's (/api/operator/ledger).
    return _json(
        {
            "status": "ok",
            "version": __version__,
            "backend": app[BACKEND].name,
            "network": info.network,
            "node_pubkey": info.pubkey,
            "uptime_s": int(time.time() - app[STARTED_AT]),
            "engines": [status.public() for status in app[ENGINES].statuses()],
        }
    )


async def error_codes(request: web.Request) -> web.Response:
    return _json(catalog_document())


async def serve_file(request: web.Request) -> web.StreamResponse:
    files = request.app[FILES]
    path = files.resolve(
        request.match_info["name"], request.query.get("exp", ""), request.query.get("sig", "")
    )
    if path is None:
        raise ApiError(ErrorCode.NOT_FOUND, "No such file, or the link expired.")
    return web.FileResponse(
        path,
        headers={
            "Content-Type": files.content_type(path.name),
            "Cache-Control": "private, max-age=3600",
        },
    )


async def lnurl_withdraw(request: web.Request) -> web.Response:
    return _json(await request.app[REFUNDS].withdraw_request(request.match_info["k1"]))


async def lnurl_withdraw_callback(request: web.Request) -> web.Response:
    k1_path = request.match_info["k1"]
    k1, pr = request.query.get("k1", ""), request.query.get("pr", "")
    if k1 != k1_path or not pr:
        return _json({"status": "ERROR", "reason": "k1 and pr are required."})
    # LUD-03: HTTP 200 with a JSON status in both outcomes.
    return _json(await request.app[REFUNDS].withdraw_callback(k1, pr))


def _simulating(request: web.Request) -> SimulatedPayments:
    backend = request.app[BACKEND]
    assert isinstance(backend, SimulatedPayments)  # the routes exist only then
    return backend


async def dev_pay(request: web.Request) -> web.Response:
    backend = _simulating(request)
    try:
        body = await request.json()
        invoice = str(body["invoice"])
    except (ValueError, KeyError, TypeError):
        raise ApiError(ErrorCode.INVALID_INPUT, 'Send {"invoice": "<bolt11>"}.') from None
    try:
        preimage = await backend.simulate_payment(invoice)
    except BackendError as exc:
        raise ApiError(ErrorCode.INVALID_INPUT, f"Cannot pay: {exc}.") from None
    return _json({"preimage": preimage})


async def dev_outgoing(request: web.Request) -> web.Response:
    backend = _simulating(request)
    return _json({"payments": await backend.outgoing_payments()})


async def dev_outgoing_mode(request: web.Request) -> web.Response:
    backend = _simulating(request)
    body = await read_json(request, 1024)
    if not isinstance(body, dict):
        raise ApiError(ErrorCode.INVALID_INPUT, 'The body is a JSON object: {"mode": ...}.')
    mode = body.get("mode")
    if mode not in ("succeed", "fail", "pending"):
        raise ApiError(ErrorCode.INVALID_INPUT, "mode must be succeed, fail or pending.")
    backend.outgoing_mode = mode
    if body.get("resolve_pending") in ("succeed", "fail"):
        await backend.complete_pending(body["resolve_pending"] == "succeed")
    return _json({"mode": mode})
