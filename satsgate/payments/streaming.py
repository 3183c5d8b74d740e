"""A streamed paid answer as server-sent events (encoded by ``edge.http.sse_event``): the
one relay, for calls paid one by one (L402, the Payment scheme's charge, Cashu) and calls
paid from a payment session alike.

The events: each text piece as ``data: {"text": ...}``; at the end ``event:
payment-receipt`` (what the call cost, the model that ran and the provider's token
counts), then ``data: [DONE]``. A failure after the first piece ends the stream with
``event: error``: the usual error envelope, with what was given back (``refund`` or the
session's credit), given once. A failure before the first piece never reaches here: the
call answers it as any failure, with the usual envelope and status.

Invariants: the relay pulls the next piece only once the last one is written, and a
write waits while the client's connection is backed up (aiohttp drains past 64 KiB), so a
slow reader holds the upstream back instead of satsgate buffering the answer; the pieces'
iterator is always closed (the upstream connection with it), whether the stream ended,
failed or the client left; a client that reads nothing for ``WRITE_STALL_S`` is cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from satsgate.edge.http import sse_event
from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode, envelope
from satsgate.payments import mpp
from satsgate.services.base import OpenStream, StreamPiece, StreamSettle

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"
# A caller whose connection takes no byte for this long is cut off (and served): its
# stream would otherwise hold the upstream connection open.
WRITE_STALL_S = 60.0


def use_members(last: StreamPiece, units: int) -> dict[str, Any]:
    """What the payment-receipt event says of the answer itself: its text pieces, the model
    that ran and the provider's token counts (null when the provider reported none)."""
    usage = None
    if last.input_tokens is not None or last.output_tokens is not None:
        usage = {"inputTokens": last.input_tokens, "outputTokens": last.output_tokens}
    return {"units": units, "model": last.model_id, "usage": usage}


async def relay(
    request: web.Request,
    stream: OpenStream,
    settle: StreamSettle,
    headers: Mapping[str, str],
) -> web.StreamResponse:
    """Send ``stream`` as server-sent events and end its payment through ``settle``: the
    caller leaving (or reading nothing for ``WRITE_STALL_S``) is served; a failure, or a
    shutdown cutting the stream, gives the payment back."""
    resp = web.StreamResponse(
        headers={
            **headers,
            "Content-Type": CONTENT_TYPE,
            "Cache-Control": "private, no-store",
            "X-Accel-Buffering": "no",  # a proxy in front passes each event on at once
        }
    )
    pieces = stream.pieces
    units = 0
    last = StreamPiece()
    try:
        try:
            await resp.prepare(request)
            async for piece in pieces:
                if piece.is_final:
                    last = piece
                if piece.text:
                    units += 1
                    await _send(request, resp, sse_event(None, {"text": piece.text}))
        except ConnectionError:
            log.info("a client left a stream; the call counts as served")
            settle.abandoned()
            return resp
        except asyncio.CancelledError:  # a shutdown (client disconnects do not cancel)
            cut = settle.failed(ErrorCode.L402_UPSTREAM_FAILED, "The stream was cut.")
            await asyncio.shield(cut)
            raise
        except (ApiError, EngineError) as exc:
            extra = exc.envelope_extra() if isinstance(exc, EngineError) else exc.extra
            await _fail(request, resp, settle, exc.code, exc.message, extra)
            return resp
        except Exception:
            log.exception("a streamed call failed after its first piece")
            await _fail(
                request, resp, settle, ErrorCode.L402_UPSTREAM_FAILED, "The stream failed.", {}
            )
            return resp
        receipt = await settle.finished(last)
        receipt = {
            "status": "success",
            "timestamp": mpp.rfc3339(int(time.time())),
            **stream.receipt,
            **receipt,
            **use_members(last, units),
        }
        with contextlib.suppress(ConnectionError):
            await _send(request, resp, sse_event("payment-receipt", receipt) + DONE)
            await resp.write_eof()
        return resp
    finally:
        await pieces.aclose()


async def _send(request: web.Request, resp: web.StreamResponse, data: bytes) -> None:
    """Write, waiting while the caller's connection is backed up, for at most
    ``WRITE_STALL_S``: a caller that reads nothing that long is cut off (ConnectionError)."""
    try:
        async with asyncio.timeout(WRITE_STALL_S):
            await resp.write(data)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("the caller read nothing for too long") from None


async def _fail(
    request: web.Request,
    resp: web.StreamResponse,
    settle: StreamSettle,
    code: ErrorCode,
    message: str,
    extra: Mapping[str, Any],
) -> None:
    given_back = await settle.failed(code, message)
    with contextlib.suppress(ConnectionError):
        data = {**envelope(code, message), **extra, **given_back}
        await _send(request, resp, sse_event("error", data))
        await resp.write_eof()
