"""JSON-RPC 2.0 framing as MCP uses it: parse one message, build results and errors.

MCP narrows JSON-RPC: ``params`` is an object, and a request id is a string or
an integer, never null. A message that carries ``result`` or ``error`` and no
``method`` is a response from the client; this server never asks the client
anything, so such messages are accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

RequestId = str | int


class RpcError(Exception):
    """A JSON-RPC error; ``data`` carries satsgate's error envelope where there is one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            body["data"] = self.data
        return body


class InvalidMessage(Exception):
    """A message that cannot be served; ``request_id`` is its id when that much was readable."""

    def __init__(self, request_id: RequestId | None, error: RpcError) -> None:
        super().__init__(error.message)
        self.request_id = request_id
        self.error = error


@dataclass(frozen=True)
class Request:
    """One request, or a notification when ``id`` is None."""

    method: str
    id: RequestId | None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def is_notification(self) -> bool:
        return self.id is None

    @property
    def progress_token(self) -> str | int | None:
        meta = self.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        return token if _is_id(token) else None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_message(raw: Any) -> Request | None:
    """Read one message. None for a client response; raises InvalidMessage otherwise."""
    if not isinstance(raw, dict):
        raise InvalidMessage(None, RpcError(INVALID_REQUEST, "A message must be a JSON object."))
    has_id = "id" in raw
    request_id = raw.get("id")
    if has_id and not _is_id(request_id):
        raise InvalidMessage(
            None, RpcError(INVALID_REQUEST, "The id must be a string or an integer (not null).")
        )
    rid: RequestId | None = request_id if has_id else None
    if raw.get("jsonrpc") != "2.0":
        raise InvalidMessage(
            rid, RpcError(INVALID_REQUEST, 'The message must say "jsonrpc": "2.0".')
        )
    if "method" not in raw:
        if has_id and ("result" in raw or "error" in raw):
            return None  # a response from the client; nothing was asked, nothing to do
        raise InvalidMessage(rid, RpcError(INVALID_REQUEST, "The message has no method."))
    method = raw["method"]
    if not isinstance(method, str) or not method:
        raise InvalidMessage(rid, RpcError(INVALID_REQUEST, "The method must be a string."))
    params = raw.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidMessage(rid, RpcError(INVALID_PARAMS, "The params must be a JSON object."))
    return Request(method=method, id=rid, params=params)


def result_message(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: RequestId | None, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}
