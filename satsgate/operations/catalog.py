"""Free operations on the catalog: the planned services' votes and the price estimate."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from satsgate.errors import ErrorCode
from satsgate.operations.answers import Estimate, PlannedServices
from satsgate.operations.base import Call, HttpRoute, OperationEnv, OperationSpec, query_schema
from satsgate.services.catalog.planned import VOTE
from satsgate.services.catalog.pricing import estimate
from satsgate.services.registry import ESTIMATORS


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="no arguments")


async def list_planned_services(env: OperationEnv, args: NoArgs, call: Call) -> PlannedServices:
    services = [dict(s) for s in await env.planned.planned_services()]
    services.sort(key=lambda s: -int(s.get("votes") or 0))
    return PlannedServices.model_validate({"services": services})


LIST_PLANNED: OperationSpec[NoArgs, PlannedServices] = OperationSpec(
    name="list_planned_services",
    title="Planned services",
    description="Services planned but not offered yet, most voted first: { services: [{ "
    "slug, name, description, votes }] }. Free.",
    params=NoArgs,
    result=PlannedServices,
    handler=list_planned_services,
    # GET /api/l402/vote: the vote service's description plus the planned services (the
    # spec's listing); POST there is the paid vote.
    http=HttpRoute(
        "GET",
        f"/api/l402/{VOTE.slug}",
        on_service=VOTE.slug,
        with_description=True,
        summary="Describe the vote service, with the planned services and their votes (free)",
        llms="`GET {url}` lists them with their votes",
    ),
    tool="list_planned_services",
    error_codes=(ErrorCode.INTERNAL_ERROR,),
)


class EstimateQuery(BaseModel):
    """GET /api/estimate-cost: the estimate id, then that estimator's own parameters."""

    model_config = ConfigDict(extra="allow", title="estimate query")

    service: str = Field(
        min_length=1, description="Estimate id.", json_schema_extra={"enum": [*sorted(ESTIMATORS)]}
    )


def estimator_parameters() -> list[dict[str, Any]]:
    """The query parameters of every estimator (pricing.ESTIMATORS), merged by name."""
    schemas: dict[str, list[dict[str, Any]]] = {}
    users: dict[str, list[str]] = {}
    for service, estimator in ESTIMATORS.items():
        fields = estimator.params.model_json_schema().get("properties", {})
        for name, schema in fields.items():
            options = schemas.setdefault(name, [])
            cleaned = query_schema(schema)
            if cleaned not in options:
                options.append(cleaned)
            users.setdefault(name, []).append(service)
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": "Used by: " + ", ".join(users[name]) + ".",
            "schema": options[0] if len(options) == 1 else {"anyOf": options},
        }
        for name, options in schemas.items()
    ]


async def estimate_cost(env: OperationEnv, query: EstimateQuery, call: Call) -> Estimate:
    extra = dict(query.model_extra or {})
    return Estimate.model_validate(estimate(ESTIMATORS, query.service, extra, env.rates.book))


ESTIMATE_COST: OperationSpec[EstimateQuery, Estimate] = OperationSpec(
    name="estimateCost",
    title="Price estimate",
    description="A price quote without an invoice (X-Error-Code: L402_ESTIMATE_ONLY).",
    params=EstimateQuery,
    result=Estimate,
    handler=estimate_cost,
    http=HttpRoute(
        "GET",
        "/api/estimate-cost",
        example="GET /api/estimate-cost?service=<id>&...",
        headers={"X-Error-Code": ErrorCode.L402_ESTIMATE_ONLY},
        extra_parameters=estimator_parameters,
        llms="`GET {url}?service=<id>&...`, no invoice",
    ),
    error_codes=(ErrorCode.L402_INVALID_PARAMS, ErrorCode.RATE_LIMITED, ErrorCode.INTERNAL_ERROR),
    rate_rule="estimate",
)
