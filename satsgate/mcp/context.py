"""What a tool handler gets: the gate and registry (ToolEnv) and its call (CallContext)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from satsgate.config import Settings
from satsgate.engines import Engines
from satsgate.errors import invalid_params
from satsgate.jobs import JobRunner
from satsgate.mcp.jsonrpc import notification
from satsgate.payments.gate import Gate
from satsgate.refunds import RefundService
from satsgate.services import planned
from satsgate.services.base import ServiceSpec

M = TypeVar("M", bound=BaseModel)
AnySpec = ServiceSpec[Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class PlannedSource(Protocol):
    """Planned (not yet offered) services with their votes; the vote module provides one."""

    async def planned_services(self) -> Sequence[Mapping[str, Any]]: ...


class RoadmapPlannedServices:
    """The default: the roadmap of satsgate.services.planned, with its votes."""

    def __init__(self, votes: planned.VoteCounts) -> None:
        self._votes = votes

    async def planned_services(self) -> Sequence[Mapping[str, Any]]:
        return await planned.planned_services(self._votes)


@dataclass(frozen=True)
class ToolEnv:
    """Everything a tool reaches: the gate (the paid-call flow), the jobs, the refunds,
    the settings, the engines and the paid tools."""

    gate: Gate
    jobs: JobRunner
    refunds: RefundService
    settings: Settings
    engines: Engines
    paid: Mapping[str, AnySpec]  # by tool name
    by_slug: Mapping[str, AnySpec]
    planned: PlannedSource
    # Set at shutdown: waiting tools answer at once instead of holding the server open.
    closing: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class CallContext:
    """One tools/call. ``send`` is set when the response may become an SSE stream."""

    progress_token: str | int | None = None
    send: Send | None = None
    keepalive: Callable[[], Awaitable[None]] | None = None
    # The transport's per-client rate limit: rate_check(rule) raises RATE_LIMITED.
    rate_check: Callable[[str], None] | None = None

    def limit(self, rule: str) -> None:
        """Spend one request of this call's client under ``rule`` (satsgate/ratelimit.py)."""
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
    """Check a free tool's arguments; L402_INVALID_PARAMS (so -32602) lists every bad field."""
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        raise invalid_params(exc, "arguments", example) from None
