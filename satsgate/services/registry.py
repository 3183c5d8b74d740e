"""The service registry: one explicit tuple that feeds HTTP, MCP, OpenAPI and discovery."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from satsgate.services.ai import (
    audiobook,
    image_process,
    images,
    speech,
    text,
    translation,
    video,
)
from satsgate.services.base import ServiceSpec
from satsgate.services.catalog import planned
from satsgate.services.catalog.pricing import Estimator, estimators
from satsgate.services.comms import handlers as comms
from satsgate.services.documents import convert, e_signature, ocr, rendering, wallet_passes

SERVICES: tuple[ServiceSpec[Any], ...] = (
    *rendering.SERVICES,
    *ocr.SERVICES,
    *convert.SERVICES,
    *e_signature.SERVICES,
    *wallet_passes.SERVICES,
    *images.SERVICES,
    *image_process.IMAGE_PROCESS,
    *text.SERVICES,
    *translation.SERVICES,
    *speech.SERVICES,
    *audiobook.SERVICES,
    *video.SERVICES,
    *comms.SERVICES,
    *planned.SERVICES,
)

BY_SLUG: dict[str, ServiceSpec[Any]] = {s.slug: s for s in SERVICES}
BY_TOOL: dict[str, ServiceSpec[Any]] = {s.tool_name: s for s in SERVICES}

assert len(BY_SLUG) == len(SERVICES) and len(BY_TOOL) == len(SERVICES), "duplicate service"

# Every engine name a service runs on: the engine names an operator may route in [engines].
ENGINE_NAMES: frozenset[str] = frozenset(s.engine for s in SERVICES if s.engine)

# Every /api/estimate-cost estimator, the flat ones quoting their spec's own price.
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(estimators(SERVICES))
