"""What a service is: ServiceSpec, the context a handler gets, and what it returns.

A handler knows nothing about payment: it receives validated params and a
context, and returns a result or raises :class:`satsgate.errors.ApiError` /
:class:`satsgate.engines.EngineError`. The gate turns a failure after payment into a refund.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    cast,
    runtime_checkable,
)

import httpx
from pydantic import BaseModel, ConfigDict

from satsgate.config.settings import Settings
from satsgate.domain.telephony import validation_context
from satsgate.engines import CpuRunner, Engines
from satsgate.errors import ApiError, ErrorCode
from satsgate.files import OutputCaps
from satsgate.services.catalog.rates import FALLBACK, RateBook
from satsgate.store.deliveries import DeliveryRepository

if TYPE_CHECKING:
    from satsgate.files import FileStore

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R")
D = TypeVar("D")


@runtime_checkable
class ChosenModel(Protocol):
    """Params that pick one of the service's models
    (satsgate.services.inputs.params.ModelChoice)."""

    @property
    def chosen_model(self) -> int: ...


@runtime_checkable
class FitsModel(Protocol):
    """Params whose model may move to one this node serves (ModelChoice.fit_model)."""

    def fit_model(self, served: Callable[[int], bool]) -> None: ...


def _class_has(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` have ``name`` from their class (a method or a
    property). Asked of the class: a runtime protocol check on the instance would read
    every member of it on each call, a property's value among them."""
    return hasattr(cls, name)


def _chosen_model_of(params: object) -> ChosenModel | None:
    """``params`` as ChosenModel when its class picks a model, else None."""
    return cast(ChosenModel, params) if _class_has(type(params), "chosen_model") else None


class Params(BaseModel):
    """Base of every service's params: unknown fields are refused, names are exact."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)

    def callback_target(self) -> tuple[str, str | None] | None:
        """The caller's (callback_url, callback_id) for a signed callback, if it asked."""
        return None

    async def prechecks(self) -> None:
        """The checks beyond the schema every request of these params gets before any
        invoice (ApiError): each kind of params adds its own and calls ``super()``'s."""


@dataclass(frozen=True)
class ServiceResult:
    """JSON (dict) or plain text (str) or raw bytes with a content type."""

    body: dict[str, Any] | str | bytes
    status: int = 200
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # What the call actually earned, in msat, when it delivered less than was quoted
    # (e.g. fewer boarding passes than documents): the gate refunds the rest and puts
    # the refund in the body as ``partial_refund``. None: the quote stands.
    charged_msat: int | None = None
    # What the call costs by what it actually used (a chat model's tokens, from the
    # provider's usage), in msat, for a payer billed by use: a payment session reserves
    # the quote, debits this (never more than the quote) and credits the rest back.
    # None: the quote stands. Calls paid one by one keep their quoted price.
    metered_msat: int | None = None
    # A streamed answer (the service's ``stream_handler``): its pieces still to come, the
    # first of them already generated. The body is then empty; the face relays the
    # pieces as server-sent events (satsgate.payments.streaming).
    stream: OpenStream | None = None


class Votes(Protocol):
    """The roadmap's vote box (the store's votes repository), for the vote service."""

    async def record(self, slug: str, call_id: str) -> int:
        """Count one vote for ``slug``, once per ``call_id``; the slug's total."""
        ...


class JobState(Protocol):
    """A job's resume state: what a restart needs to take the job up again (the params,
    a remote prediction's id). Saved while the job runs, dropped when it ends."""

    async def load(self) -> dict[str, Any] | None: ...

    async def save(self, state: dict[str, Any]) -> None: ...


class _NoJobState:
    async def load(self) -> dict[str, Any] | None:
        return None

    async def save(self, state: dict[str, Any]) -> None:
        return None


NO_JOB_STATE: JobState = _NoJobState()


class DeskKey(Generic[D]):
    """Names one of the app's desks in a handler's context (:meth:`ServiceContext.desk`);
    ``D`` is what the desk is. Each desk's own module defines its key beside the desk, so
    this module names no desk and a handler asks with the module it already imports."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"DeskKey({self.name!r})"


@dataclass(frozen=True)
class Desks:
    """The app's desks by their keys; immutable. Filled only by :meth:`with_desk`, which
    takes a ``DeskKey[D]`` and a ``D`` together: what :meth:`get` finds under a key is of
    the key's type."""

    by_key: Mapping[object, object] = field(default_factory=dict)

    def with_desk(self, key: DeskKey[D], desk: D | None) -> Desks:
        """These desks with ``desk`` under ``key`` (None: without one)."""
        found = {k: v for k, v in self.by_key.items() if k is not key}
        if desk is not None:
            found[key] = desk
        return Desks(found)

    def get(self, key: DeskKey[D]) -> D | None:
        """The desk under ``key``, or None."""
        return cast("D | None", self.by_key.get(key))


NO_DESKS = Desks()


@dataclass
class ServiceContext:
    call_id: str
    settings: Settings
    files: FileStore
    http: httpx.AsyncClient
    cpu: CpuRunner
    votes: Votes
    # The engines of this node: ``await ctx.engines.run("text", ChatEngine, ...)``.
    engines: Engines
    # Progress of a job (0..100, message); a no-op for synchronous calls.
    progress: Callable[[float, str], None]
    # What resumes this job after a restart (a remote prediction's id); for synchronous
    # calls nothing is kept (load gives None, save does nothing).
    job_state: JobState = field(default_factory=lambda: NO_JOB_STATE)
    # The app's desks, each under the key its own module defines (:class:`DeskKey`):
    # ``ctx.desk(FAX_DESK)``. The node's screen (screening.SCREENER; without it
    # screening.screen applies the rules alone), the voice-bridge sessions
    # (bridge_calls.BRIDGE_CALLS), the e-signature desk (esign_desk.ESIGN_DESK), the
    # AI calls (ai_call_runner.AI_CALL_RUNNER), the fax desk (faxes.FAX_DESK). None outside
    # an app.
    desks: Desks = NO_DESKS
    # Delivery records of sent SMS, calls and faxes (the store's repository); None only
    # where no store exists.
    deliveries: DeliveryRepository | None = None
    # The app's BTC rate book when the call began (services/catalog/rates.py): what a handler
    # prices a BTC-pegged amount with; the fallback rates outside an app.
    rate_book: RateBook = FALLBACK

    def desk(self, key: DeskKey[D]) -> D | None:
        """The app's desk under ``key``; None when this context has none (built outside an
        app, or on a node without it)."""
        return self.desks.get(key)

    async def run_cpu(
        self, fn: Callable[..., R], *args: Any, quick: bool = False, limit_s: float | None = None
    ) -> R:
        """Run CPU-bound engine work in the process pool, off the event loop, within
        ``settings.cpu_job_time_limit_s`` (or the tighter ``limit_s``); past it,
        EngineError TIMEOUT (refunded). ``quick``: short bounded work that may use any
        worker (engines.cpu_jobs: long work leaves one worker free for it)."""
        return await self.cpu(fn, *args, quick=quick, limit_s=limit_s)


Handler = Callable[[ServiceContext, P], Awaitable[ServiceResult]]


@dataclass(frozen=True)
class StreamPiece:
    """One piece of a streamed answer: its text; the last one says what the call used (the
    provider's token counts, the model that ran) and what it cost by use."""

    text: str = ""
    metered_msat: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model_id: int | None = None

    @property
    def is_final(self) -> bool:
        """The piece that reports the use, not text."""
        return (
            self.metered_msat is not None
            or self.input_tokens is not None
            or self.output_tokens is not None
            or self.model_id is not None
        )


class PrecheckMemo:
    """Outcomes of deterministic checks made before any invoice (a card's layout fit: an
    error message, or None when it fits), kept for the ``size`` most recent requests, so
    the 402 and the paid repeat of one request (and its retries) share one run. One per
    app (``appkeys.PRECHECKS``), handed to every ``ServiceSpec.prevalidate``; bounded:
    the least recently used outcome goes first. ``caps`` are the app's output caps
    (``FileStore.caps``), for a check that knows an output's size from the input (an
    image converted to an uncompressed format): refused before the invoice at the cap
    the paid call would be held to."""

    def __init__(self, size: int = 2048, *, caps: OutputCaps | None = None) -> None:
        self._size = size
        self.caps = caps if caps is not None else OutputCaps()
        self._outcomes: OrderedDict[str, str | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._outcomes)

    async def outcome(self, key: str, check: Callable[[], Awaitable[str | None]]) -> str | None:
        """The outcome remembered under ``key``, else ``await check()`` (remembered)."""
        if key in self._outcomes:
            self._outcomes.move_to_end(key)
            return self._outcomes[key]
        result = await check()
        self._outcomes[key] = result
        if len(self._outcomes) > self._size:
            self._outcomes.popitem(last=False)
        return result


class StreamSettle(Protocol):
    """How the payment of a streamed call ends with its stream, for the relay
    (satsgate.payments.streaming): the payer's side sets it once the call is paid for."""

    async def failed(self, code: ErrorCode, message: str) -> dict[str, Any]:
        """The stream broke after its first piece: give back what the call was paid, exactly
        once; the members the stream's error event carries (the refund)."""
        ...

    async def finished(self, last: StreamPiece) -> dict[str, Any]:
        """The stream went out whole (``last``: the piece that reports the use): the call is
        served; the payment members of the stream's payment-receipt event."""
        ...

    def abandoned(self) -> None:
        """The caller left mid-stream: the call counts as served."""
        ...


class StreamPieces(Protocol):
    """The pieces of an open stream; ``aclose`` ends it and whatever feeds it (the
    provider's connection), also when no piece was asked for yet."""

    def __aiter__(self) -> StreamPieces: ...

    async def __anext__(self) -> StreamPiece: ...

    async def aclose(self) -> None: ...


@dataclass
class OpenStream:
    """A streamed answer whose first piece has been generated: nothing failed before it,
    so a failure from here on is one in the middle of the stream."""

    pieces: StreamPieces
    # What the payment's side does as the stream ends; set when the call is paid for.
    settle: StreamSettle | None = None
    # Members the payment-receipt event carries besides the payment's (e.g. the refund of
    # an overpayment).
    receipt: dict[str, Any] = field(default_factory=dict)


# Opens the answer as a stream: returns once its first piece is generated (a failure
# before it is the call's failure, answered as any), with ``ServiceResult.stream`` set.
StreamHandler = Callable[[ServiceContext, P], Awaitable[ServiceResult]]
Validator = Callable[[P, PrecheckMemo], Coroutine[Any, Any, None]]


async def prechecked(params: Params, _memo: PrecheckMemo | None = None) -> None:
    """Every spec's check before any invoice unless it names its own: the params' own
    :meth:`Params.prechecks` (a callback URL, then the caller's files)."""
    await params.prechecks()


_PRECHECKED: Validator[Any] = prechecked  # any spec's params are Params


# What the price of one call is counted in. ``per_tier``: one price per model (and output
# size); ``per_destination``: one price per message by the destination country;
# ``dynamic``: no unit describes it (the shape's note says why).
PriceModel = Literal[
    "flat",
    "per_tier",
    "per_character",
    "per_second",
    "per_minute",
    "per_page",
    "per_pass",
    "per_recipient",
    "per_destination",
    "dynamic",
]
# What sets the rate of a per-unit price besides the quantity.
RateFactor = Literal["tier", "resolution", "destination", "target_language", "translation"]


@dataclass(frozen=True)
class PriceShape:
    """How a service's price follows its request, as discovery reports it.

    ``ServiceSpec.price_msat`` is the price; this describes it, and the registry
    tests hold the two together: a flat shape's price never looks at the request,
    no valid request prices below the minimum, and ``estimate`` names the
    ``/api/estimate-cost`` id whose unit is this unit.
    """

    model: PriceModel
    unit: str  # "per call", "per page", "per started minute", ...
    # The least any valid call is charged, in msat; a function of the BTC rate book for
    # a minimum that moves with it (the cheapest destination of a BTC-pegged rate).
    min_msat: int | Callable[[RateBook], int]
    base_sats: int = 0  # fixed part of every price, before the per-unit part
    rate_by: tuple[RateFactor, ...] = ()
    # The least a call on each model costs, for prices set by the model (``per_tier``).
    tier_min_sats: Mapping[int, int] = field(default_factory=dict)
    # Each model's rate in words where the models' rates differ ("10 characters per sat,
    # minimum 15 sats"), made from the same table the price reads: the model catalog
    # (services/catalog/models.py) lists it as the model's price note.
    model_rates: Mapping[int, str] = field(default_factory=dict)
    btc_pegged: bool = False  # the per-unit rate follows the hourly BTC rate book
    estimate: str | None = None  # id of the /api/estimate-cost estimator that quotes it
    note: str = ""  # what the unit does not say; for ``dynamic``, why there is no unit

    def __post_init__(self) -> None:
        if self.model == "dynamic" and not self.note:
            raise ValueError("a dynamic price shape needs a note saying why")
        if (self.model == "flat") != (self.unit == "per call"):
            raise ValueError("'per call' is the unit of flat prices only")

    def minimum_msat(self, book: RateBook) -> int:
        """The least any valid call is charged at the rate ``book``, in msat."""
        return self.min_msat(book) if callable(self.min_msat) else self.min_msat


@dataclass(frozen=True)
class FlatPrice:
    """The price of a service whose every call costs the same. It is the spec's
    ``price_msat``, and the spec takes its flat ``PriceShape`` from it: one amount,
    stated once."""

    msat: int
    estimate: str | None = None  # the /api/estimate-cost id that quotes it

    @classmethod
    def of_sats(cls, sats: int, estimate: str | None = None) -> FlatPrice:
        """``sats`` whole sats per call."""
        return cls(sats * 1000, estimate)

    def __call__(self, _params: object, _book: RateBook) -> int:
        return self.msat

    @property
    def shape(self) -> PriceShape:
        return PriceShape("flat", "per call", self.msat, estimate=self.estimate)


class Paged(Protocol):
    @property
    def pages(self) -> int: ...


@dataclass(frozen=True)
class PerPagePrice:
    """The price of a service charged by the page: the request's pages times one rate.
    Like FlatPrice, it is the spec's ``price_msat`` and gives the spec its shape, and
    the estimator of the same id prices with it: one rate, stated once."""

    msat_per_page: int
    estimate: str  # the /api/estimate-cost id that quotes it
    note: str = ""

    def __call__(self, params: Paged, _book: RateBook) -> int:
        return params.pages * self.msat_per_page

    @property
    def shape(self) -> PriceShape:
        return PriceShape(
            "per_page", "per page", self.msat_per_page, estimate=self.estimate, note=self.note
        )


@runtime_checkable
class ShapedPrice(Protocol):
    """A price that states its own shape (FlatPrice, PerPagePrice): a spec whose
    ``price_msat`` is one takes its ``price_shape`` from it."""

    @property
    def shape(self) -> PriceShape: ...


# The shape of a ServiceSpec that declares none: every registered service declares one
# (tests/services/test_services_registry.py), so this shows up only for ad-hoc specs.
UNDESCRIBED_PRICE = PriceShape(
    "dynamic", "per request", 1000, note="the service declares no price shape"
)


@dataclass(frozen=True)
class ServiceSpec(Generic[P]):
    """One paid service. The registry is an explicit tuple of these."""

    slug: str  # HTTP: /api/l402/<slug>
    tool_name: str  # MCP tools/call name
    category: str
    title: str
    description: str
    params: type[P]
    # Price of one call in msat at the app's BTC rate book (only BTC-pegged prices read
    # it). The gate rounds up to whole sats for the invoice.
    price_msat: Callable[[P, RateBook], int]
    handler: Handler[P]
    # How price_msat follows the request (model, unit, minimum), for discovery; a
    # FlatPrice's shape is always its own (so a replaced flat price moves it too).
    price_shape: PriceShape = UNDESCRIBED_PRICE
    mode: Literal["sync", "job"] = "sync"
    job_type: str | None = None
    untrusted_output: bool = False
    model_ids: tuple[int, ...] = ()
    failure_codes: tuple[ErrorCode, ...] = (ErrorCode.SERVICE_ERROR,)
    max_body_bytes: int = 1024 * 1024
    # Extra checks before any invoice that need more than the schema (e.g. a PDF
    # that must parse); raise ApiError("L402_INVALID_PARAMS", ...). They get the app's
    # PrecheckMemo for an outcome worth keeping between the 402 and the paid call.
    # A spec's own check calls ``params.prechecks()`` itself.
    prevalidate: Validator[P] = _PRECHECKED
    example: Mapping[str, Any] = field(default_factory=dict)
    # The engine name that runs it (``text``, ``ocr`` ...), resolved by the engine
    # registry; None: satsgate runs it itself. A service whose engine does not resolve
    # is listed everywhere but refuses before any invoice.
    engine: str | None = None
    # The request its engine would get, for a check before any invoice that the engine
    # makes itself (Engines.unsupported: e.g. a language pair a local translator lacks);
    # None: the engine serves every valid request. A refusal is 503 SERVICE_UNAVAILABLE
    # (this node does not offer it), or, with ``engine_request_field``, 400
    # L402_INVALID_PARAMS on that field (the service runs here; the caller can change it).
    engine_request: Callable[[P], object] | None = None
    engine_request_field: str | None = None
    # The people a communication will reach (E.164 numbers, e-mail addresses): the gate
    # refuses, before any invoice, a request to anyone on the do-not-contact list
    # (RECIPIENT_OPTED_OUT). None: the service contacts nobody.
    recipients: Callable[[P], Sequence[str]] | None = None
    # Engines it needs besides ``engine``, all of which must resolve for it to be
    # available (e-signature: its signed copy goes out through ``email``).
    also_engines: tuple[str, ...] = ()
    # The answer as it is generated, for an HTTP request that asks for a stream (its
    # params' ``stream``), paid one by one or from a payment session: text pieces, the
    # last one reporting the use (``metered_msat``, tokens, model). None: the service
    # answers in one piece.
    stream_handler: StreamHandler[P] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.price_msat, ShapedPrice):  # one rate, stated once
            object.__setattr__(self, "price_shape", self.price_msat.shape)

    def streams(self, params: BaseModel) -> bool:
        """Whether this request is answered as a stream (over HTTP; MCP gets it whole)."""
        return self.stream_handler is not None and bool(getattr(params, "stream", False))

    def streamed(self) -> ServiceSpec[P]:
        """This service with its stream handler as its handler: the spend rule, refunds and
        the free-retry window apply to a streamed call as to any other."""
        assert self.stream_handler is not None
        return replace(self, handler=self.stream_handler)

    def is_available(self, engines: Engines) -> bool:
        """Its engine resolves, and serves its default model or at least one of its
        models (a request that pins an unserved one is refused: unavailable_reason)."""
        if self.engine is None:
            return True
        if not engines.available(self.engine):
            return False
        if not all(engines.available(name) for name in self.also_engines):
            return False
        default = getattr(self.params, "DEFAULT", None)  # ModelChoice params declare one
        if not self.model_ids or default not in self.model_ids:
            return True  # the engine picks (or there is no model choice)
        return any(engines.serves_model(self.engine, m) for m in self.model_ids)

    def unavailable_reason(self, engines: Engines, params: P | None = None) -> str | None:
        """Why this service (or this request's model) cannot run here; None if it can."""
        if self.engine is None:  # satsgate's own: always (and the cheap path of paid calls)
            return None
        if not self.is_available(engines):
            missing = [n for n in self.also_engines if not engines.available(n)]
            if engines.available(self.engine) and missing:
                return (
                    f"{self.title} also needs the {', '.join(missing)} engine, which is not "
                    "configured on this node"
                )
            status = engines.status(self.engine).reason
            why = f" ({status})" if status else ""
            return f"{self.title} has no engine configured on this node{why}"
        chooser = _chosen_model_of(params)
        if self.model_ids and chooser is not None:
            engine = self.engine
            if _class_has(type(chooser), "fit_model"):
                cast(FitsModel, chooser).fit_model(lambda m: engines.serves_model(engine, m))
            model = chooser.chosen_model
            if model in self.model_ids and not engines.serves_model(self.engine, model):
                return f"model {model} of {self.title} is not offered on this node"
        if self.engine_request is not None and params is not None:
            model_id = chooser.chosen_model if chooser is not None else None
            reason = engines.unsupported(
                self.engine,
                self.engine_request(params),
                model_id=model_id if model_id in self.model_ids else None,
            )
            if reason is not None and self.engine_request_field is not None:
                # The service runs here, this request does not: the caller can change
                # the field (400, before any invoice).
                message = f"{reason}; nothing was charged"
                raise ApiError(
                    ErrorCode.L402_INVALID_PARAMS,
                    f"Invalid parameters: {self.engine_request_field}: {message}",
                    extra={"fields": [{"field": self.engine_request_field, "message": message}]},
                )
            return reason
        return None

    def parse(self, body: Any, book: RateBook) -> P:
        """``body`` as this service's params (pydantic's ValidationError when it is not),
        checked against the app's rate ``book``: its destination table reaches the params'
        validators through the validation context, so a number is served or refused by
        the app that prices it. Every validation of a service's params goes through here
        (satsgate.payments.challenger.validate_params for the faces)."""
        return self.params.model_validate(body, context=validation_context(book.destinations))

    def quote_sats(self, params: P, book: RateBook) -> int:
        """The invoice amount of this request at the rate ``book``."""
        return sats_for_msat(self.price_msat(params, book))


def sats_for_msat(amount_msat: int) -> int:
    """Whole sats, rounded up: invoices are for whole sats, never less than the price."""
    return max(1, -(-amount_msat // 1000))


def request_digest(slug: str, params: BaseModel) -> str:
    """Fingerprint of a priced request: the same call gives the same digest."""
    body = params.model_dump_json(exclude_defaults=False)
    return hashlib.sha256(f"{slug}\n{body}".encode()).hexdigest()
