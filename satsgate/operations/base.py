"""OperationSpec: one free operation, declared once, served on every face.

A paid call is a :class:`~satsgate.services.base.ServiceSpec`; a free one (refund, job
status, payment status, a voice-bridge session's follow-ups, the AI-call confirmation
and poll, the vote listing, the price estimate) is an :class:`OperationSpec`. From it
come the HTTP route (``web/operation_routes.py``), the MCP tool (``mcp/tools.py``), the
OpenAPI operation (``discovery/openapi.py``) and the llms.txt line
(``discovery/llms.py``).

A handler gets the :class:`OperationEnv` (what the app holds: gate, jobs, refunds,
settings, engines, the paid registry, the vote source), its validated params and its
:class:`Call` (the face's per-call abilities), and returns its result model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from aiohttp import web
from pydantic import BaseModel

from satsgate.config.settings import Settings
from satsgate.engines import Engines
from satsgate.errors import ErrorCode
from satsgate.jobs.lifecycle import JobRunner
from satsgate.payments.gate import Gate
from satsgate.payouts.refunds import RefundService
from satsgate.services.base import ServiceSpec
from satsgate.services.catalog import planned
from satsgate.services.catalog.rates import Rates
from satsgate.services.comms.bridge_calls import BridgeCalls
from satsgate.services.documents.esign_desk import ESignDesk
from satsgate.store.deliveries import DeliveryRepository

if TYPE_CHECKING:
    from satsgate.services.comms.ai_call_runner import AiCallRunner
    from satsgate.services.comms.faxes import FaxDesk

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
AnySpec = ServiceSpec[Any]


class PlannedSource(Protocol):
    """Planned (not yet offered) services with their votes; the vote module provides one."""

    async def planned_services(self) -> Sequence[Mapping[str, Any]]: ...


class RoadmapPlannedServices:
    """The default: the roadmap of satsgate.services.catalog.planned, with its votes."""

    def __init__(self, votes: planned.VoteCounts) -> None:
        self._votes = votes

    async def planned_services(self) -> Sequence[Mapping[str, Any]]:
        return await planned.planned_services(self._votes)


@dataclass(frozen=True)
class OperationEnv:
    """Everything an operation (or an MCP tool) reaches: the gate (the paid-call flow),
    the jobs, the refunds, the settings, the engines, the paid tools and the votes."""

    gate: Gate
    jobs: JobRunner
    refunds: RefundService
    settings: Settings
    engines: Engines
    paid: Mapping[str, AnySpec]  # by tool name
    by_slug: Mapping[str, AnySpec]
    planned: PlannedSource
    # The node's voice-bridge sessions (services/comms/bridge_calls.py); None without an app.
    voice_bridge: BridgeCalls | None = None
    # Delivery records of sent SMS and calls (their free status reads); None: no store.
    deliveries: DeliveryRepository | None = None
    # The node's AI calls (confirm, poll, claim-refund); None outside an app.
    ai_calls: AiCallRunner | None = None
    # Set at shutdown: waiting calls answer at once instead of holding the server open.
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    esign: ESignDesk | None = None  # the e-signature desk (its free status read)
    faxes: FaxDesk | None = None  # the fax desk (its free status and inbox reads)
    # The app's BTC rate book (estimates and quotes of BTC-pegged prices); the fallback
    # rates for an env built without an app.
    rates: Rates = field(default_factory=Rates)


# What the free operations reach, on the application (set by satsgate.server.app).
OPERATION_ENV = web.AppKey("operation_env", OperationEnv)


class Call(Protocol):
    """What a face offers one call: ``limit(rule)`` spends one request of the caller
    under a rate-limit rule (satsgate/edge/ratelimit.py), raising RATE_LIMITED;
    ``authorization`` is the credential the request carried (HTTP), which proves a
    payment (satsgate.payments.proof)."""

    @property
    def authorization(self) -> Sequence[str]: ...

    def limit(self, rule: str) -> None: ...


@dataclass(frozen=True)
class HttpCall:
    """An HTTP call: its Authorization headers; HTTP limits by route in its middleware."""

    authorization: Sequence[str] = ()

    def limit(self, rule: str) -> None:
        return None


@dataclass(frozen=True)
class Family:
    """Operations that belong to one paid service (its follow-ups): they are available
    where it is, and llms.txt gives them one line."""

    name: str  # "Voice bridge"
    service: str  # the paid service's slug
    note: str = ""  # after "free" in the llms.txt line


@dataclass(frozen=True)
class HttpRoute:
    """Where an operation answers over HTTP.

    ``path`` is its own route, or, with ``on_service``, the path of that paid service,
    shared explicitly: ``when`` picks this operation's requests there (by the body's or
    the query's keys; None: every request of this method). Params come from the JSON
    body (POST) or the query string plus path parameters (GET)."""

    method: Literal["GET", "POST"]
    path: str
    example: str = ""  # shown with L402_INVALID_PARAMS
    max_body_bytes: int = 64 * 1024
    on_service: str | None = None
    when: Callable[[Mapping[str, Any]], bool] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Query parameters beyond the params model's own (documented only, e.g. per estimator).
    extra_parameters: Callable[[], list[dict[str, Any]]] | None = None
    # The form's answer on a service's GET path extends that service's description.
    with_description: bool = False
    summary: str = ""  # OpenAPI summary; the title when empty
    # Takes the credential a payment was paid with in Authorization, optionally, as its
    # proof (satsgate.payments.proof): OpenAPI lists L402/Payment security beside none.
    payer_credential: bool = False
    llms: str = ""  # its llms.txt fragment; {url} is the full URL of the path


@dataclass(frozen=True)
class OperationSpec(Generic[P, R]):
    """One free operation.

    ``params`` is its arguments model on every face; ``tool_params`` the MCP arguments
    model where MCP is stricter (and the handler gets that one there). ``result`` is its
    answer model. On MCP a result is a tool failure when ``tool_failure`` says so (a
    FAILED job's result), and fenced as untrusted when ``untrusted`` says so."""

    name: str  # the operationId
    title: str
    description: str
    params: type[P]
    result: type[R]
    handler: Callable[[OperationEnv, Any, Call], Awaitable[R]]
    http: HttpRoute | None = None
    tool: str | None = None
    tool_params: type[BaseModel] | None = None
    read_only: bool = True
    error_codes: tuple[ErrorCode, ...] = (
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.NOT_FOUND,
        ErrorCode.INTERNAL_ERROR,
    )
    family: Family | None = None
    rate_rule: str | None = None  # MCP: limited per call; HTTP: by route in the middleware
    tags: tuple[str, ...] = ("free",)
    tool_failure: Callable[[Any], bool] | None = None
    untrusted: Callable[[Any], bool] | None = None

    @property
    def arguments(self) -> type[BaseModel]:
        """The MCP arguments model."""
        return self.tool_params or self.params


AnyOperation = OperationSpec[Any, Any]


def asks_for(*keys: str) -> Callable[[Mapping[str, Any]], bool]:
    """An :class:`HttpRoute` ``when``: the request's query (or body) has one of ``keys``
    (a parameter and its other spellings)."""
    return lambda query: any(key in query for key in keys)


def free_status_read(
    *,
    name: str,
    title: str,
    description: str,
    params: type[P],
    result: type[R],
    handler: Callable[[OperationEnv, Any, Call], Awaitable[R]],
    service: AnySpec,
    path: str,
    keys: tuple[str, ...],
    reads: str,
    llms: str,
    error_codes: tuple[ErrorCode, ...],
    family: Family,
) -> OperationSpec[P, R]:
    """The free status read of a paid communication (a sent SMS, call or fax, a fax
    inbox, a signing request): ``GET path?<keys[0]>=...`` as a form of the service's own
    GET path, chosen by any of ``keys``, never cached, and the MCP tool ``name``. Its
    OpenAPI summary is "Describe <the service>, or <reads> with <keys[0]> (free)"."""
    key = keys[0]
    return OperationSpec(
        name=name,
        title=title,
        description=description,
        params=params,
        result=result,
        handler=handler,
        http=HttpRoute(
            "GET",
            path,
            example=f"GET {path}?{key}=<{key}>",
            on_service=service.slug,
            when=asks_for(*keys),
            headers={"Cache-Control": "no-store"},  # the status moves on between reads
            summary=f"Describe {service.title}, or {reads} with {key} (free)",
            llms=llms,
        ),
        tool=name,
        error_codes=error_codes,
        family=family,
        tags=(service.category, "free"),
    )


def dump(result: BaseModel) -> dict[str, Any]:
    """A result model as its JSON body: the fields it was given (None included when
    given), extras kept."""
    return result.model_dump(mode="json", exclude_unset=True, by_alias=True)


def query_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic field schema as a query parameter schema: no title, no null option."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        schema.update(options[0])
    elif options:
        schema["anyOf"] = options
    if schema.get("default", 0) is None:
        del schema["default"]
    return schema
