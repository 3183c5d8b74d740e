"""HTTP edge helpers: the error middleware, bounded JSON bodies, result rendering, the
server-sent event encoding."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from satsgate.edge import json_input
from satsgate.errors import CODES, ApiError, ErrorCode, envelope
from satsgate.services.base import ServiceResult
from satsgate.store.sql import StoreUnavailable

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# No field, path or query parameter takes a NUL character (PostgreSQL's text cannot hold
# one); JSON bodies are refused for it by satsgate.edge.json_input.
NUL_REFUSED = "The request holds a NUL character (%00), which nothing here accepts."


# One encoder for every response: json.dumps with any argument builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def sse_event(name: str | None, data: Any) -> bytes:
    """One server-sent event: an optional ``event:`` line and one ``data:`` line of JSON
    (compact JSON never holds a newline). Every SSE stream satsgate writes (paid streams,
    MCP's) encodes its events here."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {dumps(data)}\n\n".encode()


def error_response(exc: ApiError) -> web.Response:
    resp = web.json_response(exc.envelope(), status=exc.http_status, dumps=dumps)
    resp.headers["X-Error-Code"] = exc.code
    for name, value in exc.headers.items():
        resp.headers[name] = value
    return resp


def _http_error(code: ErrorCode, status_exc: web.HTTPException, message: str) -> web.Response:
    resp = web.json_response(envelope(code, message), status=status_exc.status, dumps=dumps)
    resp.headers["X-Error-Code"] = code
    return resp


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as the spec's envelope with X-Error-Code; nothing else escapes."""
    if "%00" in request.raw_path:  # the path and the query string, as sent
        return error_response(ApiError(ErrorCode.INVALID_INPUT, NUL_REFUSED))
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc)
    except web.HTTPNotFound as exc:
        return _http_error(ErrorCode.NOT_FOUND, exc, f"No such endpoint: {request.path}")
    except web.HTTPMethodNotAllowed as exc:
        resp = _http_error(
            ErrorCode.METHOD_NOT_ALLOWED, exc, f"{request.method} is not allowed here."
        )
        resp.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return resp
    except web.HTTPRequestEntityTooLarge as exc:
        return _http_error(ErrorCode.PAYLOAD_TOO_LARGE, exc, "The request body is too large.")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = ErrorCode.INVALID_INPUT if exc.status < 500 else ErrorCode.INTERNAL_ERROR
        return _http_error(code, exc, exc.text or exc.reason)
    except StoreUnavailable as exc:
        # PostgreSQL restarting or away: the request did not run; the client retries.
        log.warning("%s %s: the store is unavailable: %s", request.method, request.path, exc)
        retry_s = CODES[ErrorCode.STORE_UNAVAILABLE].retry_after_seconds
        return error_response(
            ApiError(
                ErrorCode.STORE_UNAVAILABLE,
                "The node's database did not answer; this request did not run. Retry in a "
                "few seconds with the same request (a payment it carried still pays for it).",
                headers={"Retry-After": str(retry_s)},
            )
        )
    except (ConnectionError, web.RequestPayloadError) as exc:
        # The client went away mid-request (an upload cut short), or sent a body that
        # cannot be decoded: its doing, so one debug line, never a traceback.
        log.debug(
            "%s %s from %s ended early: %r", request.method, request.path, request.remote, exc
        )
        return _http_error(
            ErrorCode.INVALID_INPUT, web.HTTPBadRequest(), "The request body was cut short."
        )
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        exc500 = ApiError(ErrorCode.INTERNAL_ERROR, "An unexpected error inside satsgate.")
        return error_response(exc500)


async def read_json(request: web.Request, limit: int) -> Any:
    """Read and parse a JSON body of at most ``limit`` bytes; 413 early, without reading it all."""
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"The request body is {request.content_length} bytes; "
            f"this endpoint accepts at most {limit}.",
        )
    if request.content_length is not None:
        raw = await request.read()  # known and within the limit: one read
    else:  # chunked: count while reading, stop at the limit
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > limit:
                raise ApiError(
                    ErrorCode.PAYLOAD_TOO_LARGE, f"The request body is larger than {limit} bytes."
                )
            chunks.append(chunk)
        raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        return json_input.loads(raw)
    except json_input.JsonInputError as exc:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"The request body is not valid JSON: {exc}",
            example='{"prompt": "..."}',
        ) from None


async def read_form(request: web.Request) -> dict[str, str]:
    """A posted form's text fields (a file part is not text: left out); INVALID_INPUT
    for a body that is no readable form (bytes beyond its charset, an unknown charset, a
    broken multipart) or a NUL character in a field."""
    try:
        form = await request.post()
    except (ValueError, LookupError):  # UnicodeDecodeError is a ValueError
        raise ApiError(ErrorCode.INVALID_INPUT, "The form could not be read.") from None
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if any("\x00" in value for value in fields.values()):
        raise ApiError(ErrorCode.INVALID_INPUT, NUL_REFUSED)
    return fields


def result_response(result: ServiceResult) -> web.Response:
    body = result.body
    if isinstance(body, dict):
        resp = web.json_response(body, status=result.status, dumps=dumps)
    elif isinstance(body, str):
        resp = web.Response(
            text=body,
            status=result.status,
            content_type=result.content_type or "text/plain",
            charset="utf-8",
        )
    else:
        resp = web.Response(
            body=body,
            status=result.status,
            content_type=result.content_type or "application/octet-stream",
        )
    for name, value in result.headers.items():
        resp.headers[name] = value
    return resp
