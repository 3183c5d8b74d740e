"""What a service is: ServiceSpec, the context a handler gets, and what it returns.

A handler knows nothing about payment: it receives validated params and a
context, and returns a result or raises :class:`satsgate.errors.ApiError` /
:class:`EngineError`. The gate turns a failure after payment into a refund.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict

from satsgate.config import Settings

if TYPE_CHECKING:
    from satsgate.files import FileStore
    from satsgate.store import Store

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R")


class Params(BaseModel):
    """Base of every service's params: unknown fields are refused, names are exact."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)


class EngineError(Exception):
    """An engine failed; ``code`` is TIMEOUT, CONTENT_FILTERED, INVALID_INPUT or SERVICE_ERROR."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ServiceResult:
    """JSON (dict) or plain text (str) or raw bytes with a content type."""

    body: dict[str, Any] | str | bytes
    status: int = 200
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ServiceContext:
    call_id: str
    settings: Settings
    files: FileStore
    http: httpx.AsyncClient
    cpu_pool: Executor
    store: Store
    # Progress of a job (0..100, message); a no-op for synchronous calls.
    progress: Callable[[float, str], None]

    async def run_cpu(self, fn: Callable[..., R], *args: Any) -> R:
        """Run CPU-bound engine work in the process pool, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.cpu_pool, fn, *args)


Handler = Callable[[ServiceContext, P], Awaitable[ServiceResult]]
Validator = Callable[[P], Awaitable[None]]


@dataclass(frozen=True)
class ServiceSpec(Generic[P]):
    """One paid service. The registry is an explicit tuple of these."""

    slug: str  # HTTP: /api/l402/<slug>
    tool_name: str  # MCP tools/call name
    category: str
    title: str
    description: str
    params: type[P]
    # Price of one call in msat. The gate rounds up to whole sats for the invoice.
    price_msat: Callable[[P], int]
    handler: Handler[P]
    mode: Literal["sync", "job"] = "sync"
    job_type: str | None = None
    untrusted_output: bool = False
    model_ids: tuple[int, ...] = ()
    failure_codes: tuple[str, ...] = ("SERVICE_ERROR",)
    max_body_bytes: int = 1024 * 1024
    # Extra checks before any invoice that need more than the schema (e.g. a PDF
    # that must parse); raise ApiError("L402_INVALID_PARAMS", ...).
    prevalidate: Validator[P] | None = None
    example: Mapping[str, Any] = field(default_factory=dict)
    # Whether an engine for this service is configured on this node; None: always.
    # An unavailable service is listed everywhere but refuses before any invoice.
    available: Callable[[Settings], bool] | None = None

    def is_available(self, settings: Settings) -> bool:
        return self.available is None or self.available(settings)

    def quote_sats(self, params: P) -> int:
        return sats_for_msat(self.price_msat(params))


def sats_for_msat(amount_msat: int) -> int:
    """Whole sats, rounded up: invoices are for whole sats, never less than the price."""
    return max(1, -(-amount_msat // 1000))


def request_digest(slug: str, params: BaseModel) -> str:
    """Fingerprint of a priced request: the same call gives the same digest."""
    body = params.model_dump_json(exclude_defaults=False)
    return hashlib.sha256(f"{slug}\n{body}".encode()).hexdigest()
