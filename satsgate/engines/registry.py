"""The engine registry: which engine serves each capability on this node, built once at
start-up from the operator's configuration and the local engines installed here.

An engine name (``text``, ``ocr``, ``tts`` ...) resolves, in this order, to:

1. the providers ``[engines] NAME = ...`` names, in fallback order, each built by the
   adapter of its ``kind``;
2. else the local engine for that name, when its tools are installed here;
3. else nothing: the services that need it are listed as unavailable, with the reason,
   and refuse before any invoice.

A service is available exactly when its engine resolves (and, for a service with model
ids, when some binding serves one of them). The registry is app-scoped: nothing here is
module-level state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast

from satsgate.config.settings import Settings
from satsgate.domain.do_not_contact import NO_OPT_OUTS, OptOuts
from satsgate.domain.telephony import BUILTIN, Destinations
from satsgate.engines.config import (
    EngineConfigError,
    ProviderConfig,
    parse_providers,
    parse_routes,
)
from satsgate.engines.cpu_jobs import CpuRunner
from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

E = TypeVar("E")
T = TypeVar("T")


@dataclass(frozen=True)
class EngineDeps:
    """What an adapter may use; handed to every provider and local engine at build time."""

    settings: Settings
    run_cpu: CpuRunner  # CPU-bound work in the process pool, under the time limit
    # The do-not-contact list, for inbound webhooks (a STOP reply):
    # ``await satsgate.domain.do_not_contact.opt_out(deps.opt_outs, number, source=...)``.
    opt_outs: OptOuts = NO_OPT_OUTS
    # The node's telephony destinations (the app's table): what country a number is in.
    # The built-in table only where no app exists (unit tests of an adapter).
    destinations: Destinations = BUILTIN


class Provider(Protocol):
    """What a provider kind's factory builds from one ``[providers.NAME]`` table."""

    def engine(self, name: str) -> object | None:
        """The object that serves engine ``name`` (it implements that capability's
        Protocol), or None when this kind cannot serve it."""

    async def aclose(self) -> None:
        """Release connections."""


ProviderFactory = Callable[[ProviderConfig, EngineDeps], Provider]

# The channel (several instances on PostgreSQL) on which a webhook heard where no wait
# follows its object (a prediction, a sent fax, an AI call) is announced.
UPSTREAM_MOVED = "satsgate_upstream_moved"


def upstream_moved(provider: str, upstream_id: str) -> str:
    """The payload of an UPSTREAM_MOVED notification: JSON ``[provider name, upstream id]``."""
    return json.dumps([provider, upstream_id])


def read_upstream_moved(payload: str) -> tuple[str, str] | None:
    """(provider name, upstream id) of an UPSTREAM_MOVED payload; None when malformed."""
    try:
        provider, upstream_id = json.loads(payload)
    except (ValueError, TypeError):
        return None
    return str(provider), str(upstream_id)


class UpstreamWatches(Protocol):
    """A provider whose waits (a prediction's run, a sent fax's follow) are woken by its
    platform's webhooks in this process. With several instances a webhook can reach
    another one: it is announced there, and the instance whose wait follows the object
    asks the platform at once instead of at its next poll."""

    def on_unwatched(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(upstream_id)`` for each genuine webhook about an object no
        wait of this process follows (another instance's, or one not waited on yet)."""

    def ask_now(self, upstream_id: str) -> None:
        """The wait of this process that follows the object, if any, asks the platform
        now (its webhook reached another instance)."""


# How many early announcements one provider keeps: every instance hears each
# announcement, and those about objects it never follows are only dropped this way.
EARLY_ASKS_KEPT = 1000


class EarlyAsks:
    """The upstream ids announced (UpstreamWatches.ask_now) before this process followed
    them: the platform's webhook can reach another instance before the create call's
    answer reaches this one. The follow that starts later takes its id and asks at once.
    Only the last EARLY_ASKS_KEPT are kept."""

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}  # an insertion-ordered set

    def add(self, upstream_id: str) -> None:
        self._ids[upstream_id] = None
        while len(self._ids) > EARLY_ASKS_KEPT:
            del self._ids[next(iter(self._ids))]

    def take(self, upstream_id: str) -> bool:
        """Whether ``upstream_id`` was announced early (then forgotten)."""
        if upstream_id not in self._ids:
            return False
        del self._ids[upstream_id]
        return True


def upstream_watches(provider: object) -> UpstreamWatches | None:
    """``provider`` as UpstreamWatches when its class defines both methods (looked up on
    the class: a proxy that answers every attribute is not one)."""
    kind = type(provider)
    if callable(getattr(kind, "on_unwatched", None)) and callable(getattr(kind, "ask_now", None)):
        return cast(UpstreamWatches, provider)
    return None


@dataclass(frozen=True)
class LocalEngine:
    """An engine that runs on this machine with nothing to configure: the default for
    its engine name wherever ``probe`` finds what it needs installed."""

    engine: str  # the engine name it serves
    label: str  # what it is, for operators and discovery: "tesseract OCR"
    # "" when it can run here, else why not ("tesseract not installed"). Cheap: a
    # which() or find_spec(), never a model load.
    probe: Callable[[], str]
    build: Callable[[EngineDeps], object]
    # The spec model ids it serves; None: any (the engine has no model choice).
    models: frozenset[int] | None = None


@dataclass(frozen=True)
class Binding:
    """One way to serve an engine name: a configured provider or a local engine."""

    engine: object
    source: Literal["provider", "local"]
    label: str
    provider: ProviderConfig | None = None
    models: frozenset[int] | None = None  # local engines: the model ids served; None: any

    def serves_model(self, model_id: int | None) -> bool:
        if model_id is None:
            return True
        if self.provider is not None:
            return self.provider.maps_model(model_id)
        return self.models is None or model_id in self.models

    def unsupported(self, request: object) -> str | None:
        """Why this binding's engine cannot serve ``request``, or None if it can.

        An engine may define ``unsupported(request) -> str | None`` (cheap and
        synchronous: no I/O, no model load) for requests it cannot serve although its
        name resolves, e.g. a language pair a local translator lacks; an engine without
        it serves every request of its capability.
        """
        # Looked up on the class: a method it defines, not whatever a proxy answers.
        if request is None or not callable(getattr(type(self.engine), "unsupported", None)):
            return None
        reason = cast(Any, self.engine).unsupported(request)
        return reason if isinstance(reason, str) and reason else None

    def model_name(self, model_id: int | None) -> str | None:
        return self.provider.model_name(model_id) if self.provider is not None else None


@dataclass(frozen=True)
class EngineStatus:
    name: str
    available: bool
    source: Literal["provider", "local"] | None = None
    # Operator-facing: "openai via NAME, anthropic via OTHER" or the local engine's label.
    label: str = ""
    reason: str = ""  # why it is unavailable; "" when available
    providers: tuple[str, ...] = field(default=())  # operator-facing provider names

    def public(self) -> dict[str, Any]:
        """What anyone may see (GET /api/health): no provider names or addresses."""
        doc: dict[str, Any] = {"engine": self.name, "available": self.available}
        if self.available:
            doc["source"] = self.source
            if self.source == "local":
                doc["label"] = self.label
        else:
            doc["reason"] = self.reason
        return doc


NO_PROVIDER = "no provider configured"


_SERVED_MEMO = 4096


class Engines:
    """Engine name -> its bindings in fallback order, and the status of every name."""

    def __init__(
        self,
        bindings: Mapping[str, tuple[Binding, ...]],
        statuses: Mapping[str, EngineStatus],
        providers: Iterable[Provider] = (),
        named: Mapping[str, Provider] | None = None,
    ) -> None:
        self._bindings = dict(bindings)
        self._statuses = dict(statuses)
        self._providers = tuple(providers)
        # The built providers by their operator name (webhook routes find theirs here).
        self._named = dict(named or {})
        # serves_model's answers: the bindings never change after start-up, and every paid
        # call asks the same few (engine, model) pairs several times (availability, the
        # model fit). Bounded: past _SERVED_MEMO pairs an answer is computed, not kept.
        self._served: dict[tuple[str, int | None], bool] = {}

    def available(self, name: str) -> bool:
        return bool(self._bindings.get(name))

    def serves_model(self, name: str, model_id: int | None) -> bool:
        key = (name, model_id)
        served = self._served.get(key)
        if served is None:
            served = any(b.serves_model(model_id) for b in self._bindings.get(name, ()))
            if len(self._served) < _SERVED_MEMO:
                self._served[key] = served
        return served

    def provider(self, name: str) -> Provider | None:
        """The built provider of ``[providers.NAME]``; None when no engine routes to it."""
        return self._named.get(name)

    def providers_by_name(self) -> Mapping[str, Provider]:
        """Every built provider by its operator name (``[providers.NAME]``)."""
        return dict(self._named)

    def unsupported(self, name: str, request: object, *, model_id: int | None = None) -> str | None:
        """None when a binding of ``name`` (serving ``model_id``) can serve ``request``;
        else why not (the first binding's reason). See Binding.unsupported."""
        reasons = []
        for binding in self._bindings.get(name, ()):
            if binding.serves_model(model_id):
                reason = binding.unsupported(request)
                if reason is None:
                    return None
                reasons.append(reason)
        return reasons[0] if reasons else None

    def bindings(self, name: str) -> tuple[Binding, ...]:
        return self._bindings.get(name, ())

    def status(self, name: str) -> EngineStatus:
        return self._statuses.get(name) or EngineStatus(name, False, reason=NO_PROVIDER)

    def statuses(self) -> tuple[EngineStatus, ...]:
        return tuple(self._statuses[name] for name in sorted(self._statuses))

    async def run(
        self,
        name: str,
        protocol: type[E],
        call: Callable[[E, str | None], Awaitable[T]],
        *,
        model_id: int | None = None,
        request: object = None,
    ) -> T:
        """``call(engine, provider_model_name)`` on the first binding that serves
        ``model_id`` (and ``request``, when given: Binding.unsupported); on an
        EngineError that allows it (``may_fall_back``), the next.

        ``protocol`` is the capability the caller expects (for the type checker; the
        adapters implement it structurally).
        """
        serving = [b for b in self._bindings.get(name, ()) if b.serves_model(model_id)]
        if not serving:
            # The gate refuses such a request before any invoice; reaching here is a bug,
            # and the call is refunded.
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "No engine serves this request on this node."
            )
        candidates = [b for b in serving if b.unsupported(request) is None]
        if not candidates:
            # What only the paid call revealed (e.g. the language of a book read after the
            # invoice): the caller's input, refunded.
            reason = serving[0].unsupported(request)
            raise EngineError(ErrorCode.INVALID_INPUT, f"Cannot do this on this node: {reason}.")
        for index, binding in enumerate(candidates):
            try:
                return await call(cast(E, binding.engine), binding.model_name(model_id))
            except EngineError as exc:
                if not exc.may_fall_back or index == len(candidates) - 1:
                    raise
                log.warning(
                    "engine %s: %s failed (%s); trying the next provider",
                    name,
                    binding.label,
                    exc.code,
                )
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        for provider in self._providers:
            try:
                await provider.aclose()
            except Exception:  # closing must not stop the others from closing
                log.exception("closing a provider failed")


def build_engines(
    settings: Settings,
    engine_names: Iterable[str],
    deps: EngineDeps,
    *,
    provider_kinds: Mapping[str, ProviderFactory],
    local_engines: Iterable[LocalEngine],
    environ: Mapping[str, str] | None = None,
) -> Engines:
    """Resolve every engine name; EngineConfigError on a configuration that cannot work
    (an unknown engine, provider or kind; a provider whose kind cannot serve its engine)."""
    known = set(engine_names)
    locals_by_name: dict[str, LocalEngine] = {}
    for candidate in local_engines:
        known.add(candidate.engine)
        locals_by_name.setdefault(candidate.engine, candidate)
    configs = parse_providers(settings.providers, environ)
    routes = parse_routes(settings.engines)
    for engine in routes:
        if engine not in known:
            raise EngineConfigError(
                f"[engines] {engine}: no service uses an engine of that name "
                f"(known: {', '.join(sorted(known))})"
            )
    built: dict[str, Provider] = {}
    bindings: dict[str, tuple[Binding, ...]] = {}
    statuses: dict[str, EngineStatus] = {}
    for engine in sorted(known):
        if engine in routes:
            chain = _provider_chain(engine, routes[engine], configs, provider_kinds, built, deps)
            bindings[engine] = chain
            statuses[engine] = EngineStatus(
                engine,
                True,
                "provider",
                ", ".join(b.label for b in chain),
                providers=routes[engine],
            )
            continue
        local = locals_by_name.get(engine)
        if local is None:
            statuses[engine] = EngineStatus(engine, False, reason=NO_PROVIDER)
            continue
        missing = local.probe()
        if missing:
            statuses[engine] = EngineStatus(
                engine, False, "local", local.label, reason=f"{NO_PROVIDER}; {missing}"
            )
            continue
        bindings[engine] = (Binding(local.build(deps), "local", local.label, models=local.models),)
        statuses[engine] = EngineStatus(engine, True, "local", local.label)
    return Engines(bindings, statuses, built.values(), named=built)


def _provider_chain(
    engine: str,
    provider_names: Iterable[str],
    configs: Mapping[str, ProviderConfig],
    provider_kinds: Mapping[str, ProviderFactory],
    built: dict[str, Provider],
    deps: EngineDeps,
) -> tuple[Binding, ...]:
    """``engine``'s fallback chain, in the order [engines] names its providers; each
    provider is built once (``built``) whatever number of engines it serves."""
    chain: list[Binding] = []
    for provider_name in provider_names:
        config = configs.get(provider_name)
        if config is None:
            raise EngineConfigError(
                f"[engines] {engine} names provider {provider_name!r}, which has "
                f"no [providers.{provider_name}] table"
            )
        factory = provider_kinds.get(config.kind)
        if factory is None:
            raise EngineConfigError(
                f"[providers.{provider_name}] kind {config.kind!r} is not known "
                f"(known: {', '.join(sorted(provider_kinds)) or 'none'})"
            )
        if provider_name not in built:
            built[provider_name] = factory(config, deps)
        served = built[provider_name].engine(engine)
        if served is None:
            raise EngineConfigError(
                f"[engines] {engine}: a provider of kind {config.kind!r} "
                f"({provider_name}) cannot serve it"
            )
        chain.append(Binding(served, "provider", f"{config.kind} via {provider_name}", config))
    return tuple(chain)
