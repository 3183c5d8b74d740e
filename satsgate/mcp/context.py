"""What a tool handler gets: the gate and registry (ToolEnv, the operations' OperationEnv)
and its call (CallContext)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from satsgate.errors import invalid_params
from satsgate.mcp.jsonrpc import notification
from satsgate.operations.base import OperationEnv, PlannedSource, RoadmapPlannedServices
from satsgate.services.base import ServiceSpec

__all__ = [
    "AnySpec",
    "CallContext",
    "PlannedSource",
    "RoadmapPlannedServices",
    "ToolEnv",
    "validate_args",
]

M = TypeVar("M", bound=BaseModel)
AnySpec = ServiceSpec[Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# What every tool reaches: the app's gate, jobs, refunds, settings, engines, paid tools.
ToolEnv = OperationEnv


@dataclass(frozen=True)
class CallContext:
    """One tools/call. ``send`` is set when the response may become an SSE stream."""

    progress_token: str | int | None = None
    send: Send | None = None
    keepalive: Callable[[], Awaitable[None]] | None = None
    # The transport's per-client rate limit: rate_check(rule) raises RATE_LIMITED.
    rate_check: Callable[[str], None] | None = None
    # MCP carries no credential: a payment is proven by its paymentId (create_payment's).
    authorization: tuple[str, ...] = ()

    def limit(self, rule: str) -> None:
        """Spend one request of this call's client under ``rule`` (satsgate/edge/ratelimit.py)."""
        if self.rate_check is not None:
            self.rate_check(rule)

    @property
    def can_stream(self) -> bool:
        return self.send is not None and self.progress_token is not None

    async def progress(self, progress: float, total: float | None, message: str) -> None:
        """notifications/progress on this response; the caller keeps ``progress`` increasing."""
        if self.send is None or self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message:
            params["message"] = message
        await self.send(notification("notifications/progress", params))


def validate_args(model: type[M], arguments: Mapping[str, Any], example: str = "") -> M:
    """Check a free tool's arguments; L402_INVALID_PARAMS lists every bad field."""
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        raise invalid_params(exc, "arguments", example) from None
