"""The MCP face of satsgate: JSON-RPC 2.0 tools at ``POST /api/mcp`` (paid with a paymentId).

Layers, outermost first:

- :mod:`satsgate.mcp.http` — Streamable HTTP transport (stateless, SSE for progress,
  Origin check); :func:`install` adds it to the app.
- :mod:`satsgate.mcp.server` — the MCP methods (initialize, ping, tools/list, tools/call).
- :mod:`satsgate.mcp.tools` — the catalog: free tools plus one paid tool per registry spec;
  the free operations (satsgate.operations) become tools there.
- :mod:`satsgate.mcp.payment_tools`, :mod:`satsgate.mcp.free_tools` — the MCP-only tools
  (create_payment and the paid call, the model catalog, await_result); paid calls go
  through the same Gate methods as HTTP.
- :mod:`satsgate.mcp.results`, :mod:`satsgate.mcp.jsonrpc` — result and message shapes.
"""

from satsgate.mcp.context import PlannedSource, RoadmapPlannedServices
from satsgate.mcp.http import MCP, MCP_PATH, McpEndpoint, install
from satsgate.mcp.server import SUPPORTED_VERSIONS, McpServer

__all__ = [
    "MCP",
    "MCP_PATH",
    "SUPPORTED_VERSIONS",
    "McpEndpoint",
    "McpServer",
    "PlannedSource",
    "RoadmapPlannedServices",
    "install",
]
