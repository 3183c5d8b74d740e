"""A provider that is configured and down, for tests of everything before an engine runs
(quotes, 402s, refusals, free confirm/poll routes) on services whose real adapters are
tested elsewhere or not written yet: it serves every engine name, and every call to it
fails as an unreachable upstream does (SERVICE_ERROR, which the gate refunds)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from satsgate.config.settings import Settings
from satsgate.engines import (
    CpuRunner,
    EngineDeps,
    EngineError,
    Engines,
    ProviderConfig,
    ProviderFactory,
)
from satsgate.engines.providers import PROVIDER_KINDS as BUILT_IN_KINDS
from satsgate.errors import ErrorCode
from satsgate.server.app import node_engines
from satsgate.services.registry import SERVICES

KIND = "down"


class DownProvider:
    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config

    def engine(self, name: str) -> object:
        return self

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise EngineError(ErrorCode.SERVICE_ERROR, "The upstream service could not be reached.")

        return unreachable

    async def aclose(self) -> None:
        return None

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """A streamed chat (satsgate.engines.chat.ChatStreamEngine): fails at once."""
        raise EngineError(ErrorCode.SERVICE_ERROR, "The upstream service could not be reached.")
        yield  # an async generator, as a chat stream is

    # The fax engine's synchronous methods (satsgate.engines.fax): no inbound numbers.
    def inbound_numbers(self) -> tuple[str, ...]:
        return ()

    def on_inbound(self, handler: object) -> None:
        return None


PROVIDER_KINDS: Mapping[str, ProviderFactory] = {KIND: DownProvider}


def down_engines(names: Iterable[str]) -> dict[str, Any]:
    """Settings overrides that route these engine names to the down provider, with every
    model id of every service mapped (so every model is offered)."""
    models = {str(m): f"model-{m}" for spec in SERVICES for m in spec.model_ids}
    return {
        "providers": {"down": {"kind": KIND, "base_url": "http://127.0.0.1:9", "models": models}},
        "engines": {name: "down" for name in names},
    }


def engines_for(settings: Settings) -> Engines:
    """The engine registry these settings give, with the down provider kind known."""
    with ThreadPoolExecutor(max_workers=1) as pool:  # statuses only: nothing runs
        return node_engines(settings, CpuRunner(pool, 1.0), {**BUILT_IN_KINDS, **PROVIDER_KINDS})
