"""JSON-RPC to /api/mcp by hand, for the tests whose point is one tool call or one raw
message (tests/mcp/test_mcp.py drives the official ``mcp`` client where a session is the
point)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

# Streamable HTTP: a client accepts both, the server picks JSON for a plain answer.
ACCEPT_BOTH = {"Accept": "application/json, text/event-stream"}


async def rpc(
    client: httpx.AsyncClient, body: Any, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """POST one JSON-RPC message (or a batch) to /api/mcp."""
    return await client.post("/api/mcp", json=body, headers=dict(headers or ACCEPT_BOTH))


def call(method: str, params: dict[str, Any] | None = None, id: int | str = 1) -> dict[str, Any]:
    """A JSON-RPC request message."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


async def tool_result(
    client: httpx.AsyncClient, name: str, arguments: Mapping[str, Any], id: int | str = 1
) -> dict[str, Any]:
    """``tools/call`` of ``name``: its ``result`` (``isError``, ``structuredContent``,
    ``content``); the HTTP answer must be 200."""
    resp = await rpc(client, call("tools/call", {"name": name, "arguments": dict(arguments)}, id))
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["result"])


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a text/event-stream answer, in order."""
    messages = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith(":")]
        if not lines:
            continue
        assert lines[0] == "event: message", block
        assert lines[1].startswith("data: ")
        messages.append(json.loads(lines[1][len("data: ") :]))
    return messages
