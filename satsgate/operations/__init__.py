"""Free operations: one :class:`OperationSpec` each, served on HTTP, MCP and in the documents.

- :mod:`~satsgate.operations.base` — OperationSpec, HttpRoute, Family, OperationEnv.
- :mod:`~satsgate.operations.answers` — the answer bodies (and the error envelope, the
  refund, the 402 challenge) as pydantic models; OpenAPI components come from them.
- :mod:`~satsgate.operations.payments`, :mod:`~satsgate.operations.jobs`,
  :mod:`~satsgate.operations.comms`, :mod:`~satsgate.operations.catalog` — the
  operations, by what they act on.
- :mod:`~satsgate.operations.registry` — OPERATIONS, in document order.
- Their HTTP routes are :mod:`~satsgate.web.operation_routes`' (with the explicit
  dispatch of ``/api/l402/{slug}`` between a paid call and the free forms sharing its
  path), above the discovery documents they answer with.
"""

from satsgate.operations.base import (
    AnyOperation,
    Call,
    Family,
    HttpCall,
    HttpRoute,
    OperationEnv,
    OperationSpec,
    PlannedSource,
    RoadmapPlannedServices,
    dump,
)
from satsgate.operations.registry import BY_NAME, BY_TOOL, OPERATIONS

__all__ = [
    "BY_NAME",
    "BY_TOOL",
    "OPERATIONS",
    "AnyOperation",
    "Call",
    "Family",
    "HttpCall",
    "HttpRoute",
    "OperationEnv",
    "OperationSpec",
    "PlannedSource",
    "RoadmapPlannedServices",
    "dump",
]
