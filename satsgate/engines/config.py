"""The operator's engine configuration: ``[providers.NAME]`` tables and ``[engines]`` routes.

The TOML form, which operators and scripts write::

    [providers.NAME]            # any name
    kind = "openai"             # the adapter (see satsgate.engines.providers)
    base_url = "https://api.openai.com/v1"
    api_key = "..."             # or api_key_env = "ENV_VAR"; never logged, never shown
    timeout_s = 60              # optional

    [providers.NAME.models]     # the spec's stable model ids -> the provider's model names
    "6" = "..."

    [engines]                   # engine name -> provider NAME, or a list: tried in order
    text = "NAME"

Every other key of a provider table is kind-specific (``host``, ``port``,
``from_address`` ... for SMTP) and reaches the adapter in ``options``.
``[engines] price_source`` is not an engine: it configures the BTC rate book.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys of ``[engines]`` that are settings, not engine routes.
NON_ENGINE_KEYS = frozenset({"price_source"})

_COMMON_KEYS = frozenset({"kind", "base_url", "api_key", "api_key_env", "timeout_s", "models"})
DEFAULT_TIMEOUT_S = 60.0  # a table without timeout_s (sized for AI work)


class EngineConfigError(ValueError):
    """The engine configuration is wrong; satsgate refuses to start and says why."""


@dataclass(frozen=True)
class ProviderConfig:
    name: str  # the operator's name for it: shown to the operator, never to callers
    kind: str
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    # The spec's model ids (as strings, the TOML keys) -> the provider's model names.
    models: Mapping[str, str] = field(default_factory=dict)
    # The kind-specific keys of the table, as written.
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def model_name(self, model_id: int | None) -> str | None:
        """The provider's name for a spec model id; None when it maps none (then the
        model is not offered through this provider: never sent under a guessed name)."""
        if model_id is None:
            return None
        return self.models.get(str(model_id))

    def maps_model(self, model_id: int) -> bool:
        return str(model_id) in self.models


def parse_providers(
    raw: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, ProviderConfig]:
    """``[providers.*]`` tables -> ProviderConfig by name; EngineConfigError on a bad one."""
    env = os.environ if environ is None else environ
    providers: dict[str, ProviderConfig] = {}
    for name, table in raw.items():
        where = f"[providers.{name}]"
        if not isinstance(table, Mapping):
            raise EngineConfigError(f"{where} must be a table")
        kind = table.get("kind")
        if not isinstance(kind, str) or not kind:
            raise EngineConfigError(f'{where} needs kind = "..."')
        api_key = table.get("api_key", "")
        key_env = table.get("api_key_env")
        if key_env is not None:
            if api_key:
                raise EngineConfigError(f"{where}: give api_key or api_key_env, not both")
            if not isinstance(key_env, str) or key_env not in env:
                raise EngineConfigError(f"{where}: api_key_env names {key_env!r}, which is not set")
            api_key = env[key_env]
        if not isinstance(api_key, str):
            raise EngineConfigError(f"{where}: api_key must be a string")
        base_url = table.get("base_url", "")
        if not isinstance(base_url, str):
            raise EngineConfigError(f"{where}: base_url must be a string")
        timeout = table.get("timeout_s", DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise EngineConfigError(f"{where}: timeout_s must be a positive number")
        models = table.get("models", {})
        if not isinstance(models, Mapping) or not all(
            isinstance(v, str) and v for v in models.values()
        ):
            raise EngineConfigError(f"{where}.models maps model ids to model names (strings)")
        for key in models:
            if not str(key).isdigit():
                raise EngineConfigError(f"{where}.models: {key!r} is not a model id")
        providers[name] = ProviderConfig(
            name=name,
            kind=kind,
            base_url=base_url.rstrip("/"),
            api_key=api_key,
            timeout_s=float(timeout),
            models={str(k): str(v) for k, v in models.items()},
            options={k: v for k, v in table.items() if k not in _COMMON_KEYS},
        )
    return providers


def parse_routes(raw: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """``[engines]`` -> engine name -> provider names in fallback order."""
    routes: dict[str, tuple[str, ...]] = {}
    for engine, value in raw.items():
        if engine in NON_ENGINE_KEYS:
            continue
        if isinstance(value, str) and value:
            routes[engine] = (value,)
        elif (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(v, str) and v for v in value)
        ):
            routes[engine] = tuple(value)
        elif isinstance(value, Mapping):
            raise EngineConfigError(
                f"[engines.{engine}] is a table; engines name providers now: write "
                f'[providers.NAME] with kind = ..., and [engines] {engine} = "NAME"'
            )
        else:
            raise EngineConfigError(f"[engines] {engine} must be a provider name or a list of them")
    return routes
