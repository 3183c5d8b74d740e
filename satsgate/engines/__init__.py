"""Engines: what runs a paid service's work, behind one seam.

- one small Protocol per capability, in a module of its own (``engines/chat.py`` ...),
  with the request and result types the services and the adapters share;
- one adapter module per provider kind (``engines/providers/``) and per local engine
  (``engines/local/``);
- the registry (``engines/registry.py``) built at start-up from ``[providers.*]`` and
  ``[engines]`` (``engines/config.py``), which ``ServiceContext.engines`` hands to
  handlers.
"""

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.cpu_jobs import CpuRunner
from satsgate.engines.errors import EngineError
from satsgate.engines.registry import (
    Binding,
    EngineDeps,
    Engines,
    EngineStatus,
    LocalEngine,
    Provider,
    ProviderFactory,
    build_engines,
)

__all__ = [
    "Binding",
    "CpuRunner",
    "EngineConfigError",
    "EngineDeps",
    "EngineError",
    "EngineStatus",
    "Engines",
    "LocalEngine",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "build_engines",
]
