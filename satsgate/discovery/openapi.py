"""/api/openapi.json: OpenAPI 3.1.0, document version 0.3.0, generated from the registry.

Every service is a path ``/api/l402/<slug>`` with a paid POST (request body
from the params model, 200 or 202, 402 with its challenge headers, 4XX/5XX
error envelopes listing the operation's error codes) and a free GET that
describes it. Params models go to ``components/schemas`` through pydantic's
``models_json_schema``, which also names clashing nested models apart, so
every ``$ref`` resolves inside the document.

Payment metadata rides on each paid operation in the two draft vocabularies:
``x-payment-info`` (MPP, draft-payment-discovery) and ``x-l402-*``
(lightninglabs/L402 discovery-spec.md Section 8).

The free operations (satsgate.operations) are generated from their
OperationSpecs: an operation on a path of its own gets that path (its params model
as the body or the parameters, its result model as the 200 answer); a form sharing
a paid service's path (the AI call's confirmation and poll, the vote listing) is an
alternative request body of that POST, or the other answer of that GET. Members of a
family (the voice bridge, the AI call) are marked ``x-available`` like their paid
service. Every answer body is a pydantic model (satsgate.operations.answers): the
components are generated from them, never written by hand.

Free endpoints are documented only when the route is registered, so the
document never lists a path the server does not answer.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, JsonSchemaValue, models_json_schema

from satsgate.discovery.describe import AnySpec, price_text
from satsgate.discovery.documents import (
    L402_DISCOVERY_VERSION,
    MANIFEST_VERSION,
    NAME,
    SUMMARY,
    Catalog,
    l402_pricing,
    links,
    payment_protocols,
    payment_terms,
    security_schemes,
)
from satsgate.errors import CATALOG_VERSION, CODES, ErrorCode
from satsgate.operations import OPERATIONS, AnyOperation
from satsgate.operations.answers import COMPONENTS
from satsgate.operations.base import query_schema
from satsgate.services.catalog.models import CATEGORIES

OPENAPI_VERSION = "3.1.0"
DOCUMENT_VERSION = "0.3.0"  # the machine-readable description's own version (spec, Versioning)
_REF = "#/components/schemas/"
Refs = Mapping[tuple[Any, JsonSchemaMode], JsonSchemaValue]

# Codes any paid call can end in besides its service's own failure codes.
_GATE_CODES = (
    ErrorCode.L402_INVALID_PARAMS,
    ErrorCode.MALFORMED_CREDENTIAL,
    ErrorCode.PAYMENT_REQUIRED,
    ErrorCode.PAYMENT_INVALID,
    ErrorCode.PAYMENT_EXPIRED,
    ErrorCode.PAYMENT_PENDING,
    ErrorCode.PAYMENT_INSUFFICIENT,
    ErrorCode.PAYMENT_ALREADY_USED,
    ErrorCode.SESSION_BINDING_REQUIRED,
    ErrorCode.PAYLOAD_TOO_LARGE,
    ErrorCode.SERVICE_UNAVAILABLE,
    ErrorCode.L402_UPSTREAM_FAILED,
    ErrorCode.L402_REFUND_ISSUED,
    ErrorCode.INTERNAL_ERROR,
)
# Codes whose catalog status is not 402 but which a paid call answers as a 402 with a
# fresh challenge (payments/http.py): documented under the 402, not the 4XX.
_REFUSED_WITH_A_CHALLENGE = frozenset({ErrorCode.PAYMENT_ALREADY_USED})
_FREE_CODES = (ErrorCode.L402_INVALID_PARAMS, ErrorCode.NOT_FOUND, ErrorCode.INTERNAL_ERROR)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


_ERROR_CODE_HEADER = {
    "description": "Repeats the body's error_code.",
    "schema": {"type": "string"},
}


def _error_responses(codes: Collection[ErrorCode]) -> dict[str, Any]:
    """4XX and 5XX responses naming the codes of each class (402 is documented on its own)."""
    responses: dict[str, Any] = {}
    for key, low, high in (("4XX", 400, 500), ("5XX", 500, 600)):
        listed = [
            c
            for c in codes
            if c in CODES and low <= CODES[c].http_status < high and CODES[c].http_status != 402
        ]
        if not listed:
            continue
        responses[key] = {
            "description": "Error envelope. error_code is one of: "
            + ", ".join(f"{c} ({CODES[c].http_status})" for c in listed)
            + ". See /api/error-codes.",
            "headers": {"X-Error-Code": _ERROR_CODE_HEADER},
            "content": _json_content(_ref("ErrorEnvelope")),
        }
    return responses


def _paid_operation(catalog: Catalog, index: int, body_schema: dict[str, Any]) -> dict[str, Any]:
    spec, service = catalog.specs[index], catalog.services[index]
    price = service["pricing"]
    codes = list(dict.fromkeys([*spec.failure_codes, *_GATE_CODES]))
    ok = _success_response(spec)
    payment_info: dict[str, Any] = {
        "intent": "charge",
        "method": "lightning",
        "currency": "sat",
        **payment_terms(service),
        "protocols": payment_protocols(catalog.settings),
    }
    body: dict[str, Any] = {"schema": body_schema}
    if spec.example:
        body["example"] = dict(spec.example)
    unavailable = "" if service["available"] else "\n\nNot configured on this node (503)."
    cashu = bool(catalog.settings.cashu.get("mints"))
    if cashu:
        codes = list(dict.fromkeys([*codes, *_CASHU_CODES]))
    operation = {
        "operationId": spec.tool_name,
        "summary": f"{spec.title} ({price_text(price)})",
        "description": f"{spec.description}\n\nPrice: {price_text(price)}. Without "
        "Authorization the answer is 402 with the exact price; pay it and repeat the "
        f"request with the credential.\n\nError codes: {', '.join(codes)}.{unavailable}",
        "tags": [spec.category],
        "security": [{"L402": []}, {"Payment": []}],
        "requestBody": {"required": True, "content": {"application/json": body}},
        "responses": {
            **ok,
            "402": _payment_required_response(),
            **_error_responses([c for c in codes if c not in _REFUSED_WITH_A_CHALLENGE]),
        },
        "x-error-codes": codes,
        "x-payment-info": payment_info,
        "x-l402-service": spec.slug,
        "x-l402-pricing": l402_pricing(service),
        "x-mcp-tool": spec.tool_name,
        "x-available": service["available"],
    }
    return _with_cashu(operation) if cashu else operation


def _success_response(spec: AnySpec) -> dict[str, Any]:
    """A paid call's answer: a job's 202, or the result (with its event stream when the
    service streams)."""
    if spec.mode == "job":
        return {
            "202": {
                "description": "Job accepted; poll poll_url (headers X-Job-Id, X-Poll-Url, "
                "X-Poll-Interval-Ms).",
                "content": _json_content(_ref("JobAccepted")),
            }
        }
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    description = "The result: JSON, or text or a file for services that return one."
    if spec.stream_handler is not None:
        content["text/event-stream"] = {"schema": {"type": "string"}}
        description += (
            " With stream: true, server-sent events: data: {text} pieces, then event: "
            "payment-receipt (model, usage), then data: [DONE]; a failure mid-stream is "
            "event: error with the envelope and its refund."
        )
    return {"200": {"description": description, "content": {**content, "*/*": {}}}}


def _payment_required_response() -> dict[str, Any]:
    """Every paid call's 402: the challenges, and the refusals answered with one."""
    return {
        "description": "Payment required (PAYMENT_REQUIRED): the challenge for "
        "exactly this request. PAYMENT_PENDING, PAYMENT_INVALID and PAYMENT_EXPIRED "
        "come with a payable challenge too; PAYMENT_INSUFFICIENT carries the refund. "
        "The body has the RFC 9457 members (type, title, status, detail; types under "
        "https://paymentauth.org/problems/); it is application/problem+json when "
        "the request carried a Payment credential or accepts that type. A used, "
        "malformed or forged credential (L402, LSAT or Payment) is answered here "
        "too (PAYMENT_ALREADY_USED, MALFORMED_CREDENTIAL, PAYMENT_INVALID; "
        "invalid-challenge, malformed-credential), with a fresh challenge. "
        "Accept-Payment (e.g. 'lightning/charge') limits the Payment challenges.",
        "headers": {
            "WWW-Authenticate": {
                "description": 'One line per challenge: \'L402 macaroon="<base64>", '
                'invoice="<bolt11>"\', \'LSAT macaroon="<base64>", '
                'invoice="<bolt11>"\', \'Payment id="...", realm="...", '
                'method="lightning", intent="charge", request="<base64url '
                'JSON>", expires="<RFC 3339>"\', and the session intent\'s Payment '
                "challenge when Accept-Payment asks for it (lightning/session). With "
                "Accept-Payment, the Payment challenges it accepts come first, in its "
                "order of preference.",
                "schema": {"type": "string"},
            },
            "X-Error-Code": _ERROR_CODE_HEADER,
        },
        "content": {
            **_json_content(_ref("PaymentChallenge")),
            "application/problem+json": {"schema": _ref("PaymentChallenge")},
        },
    }


# Cashu ecash (NUT-24, [cashu] mints set): satsgate/payments/cashu.py.
_CASHU_CODES = (
    ErrorCode.CASHU_TOKEN_INVALID,
    ErrorCode.CASHU_MINT_NOT_ACCEPTED,
    ErrorCode.CASHU_UNIT_NOT_ACCEPTED,
    ErrorCode.CASHU_AMOUNT_TOO_SMALL,
    ErrorCode.CASHU_TOKEN_SPENT,
    ErrorCode.CASHU_MINT_UNAVAILABLE,
    ErrorCode.CASHU_TOKEN_PENDING,
)


def _with_cashu(operation: dict[str, Any]) -> dict[str, Any]:
    """A paid operation that takes ecash too: the X-Cashu request header and the 402's and
    the answer's Cashu headers."""
    responses = operation["responses"]
    responses["402"]["headers"]["X-Cashu"] = {
        "description": "NUT-24: a NUT-18 payment request, creqA + base64url of CBOR "
        "{a: amount, u: 'sat', m: [mint URLs]}.",
        "schema": {"type": "string"},
    }
    for status in ("200", "202"):
        if status in responses:
            responses[status]["headers"] = {
                "X-Cashu-Change": {
                    "description": "The token's value above the price and the mint's input "
                    "fee, as a cashuB token of the same mint.",
                    "schema": {"type": "string"},
                }
            }
    operation["parameters"] = [
        {
            "name": "X-Cashu",
            "in": "header",
            "required": False,
            "description": "Pay with Cashu ecash instead of Authorization (NUT-24): a cashuB "
            "(V4) token of a mint named in the 402's X-Cashu, worth the price plus the mint's "
            "input fee. A failure after payment refunds a token (refund.cashu_token).",
            "schema": {"type": "string", "pattern": "^cashuB"},
        }
    ]
    return operation


# GET /api/l402/<slug> without a body: the description as a payment-required probe
# (discovery.service_description).
_DESCRIBED_AS_402 = {
    "402": {
        "description": "The service (price, input schema, failure codes, example) as a "
        "payment-required probe: the error envelope (PAYMENT_REQUIRED) and RFC 9457 members, "
        "payment.protocols (the rails) and payment.challengeRequest (POST the JSON request "
        "there for the invoice and its challenges), and HEAD's X-L402-Price-* headers. No "
        "invoice is made and no WWW-Authenticate is sent: the POST's 402 carries them.",
        "headers": {"X-Error-Code": _ERROR_CODE_HEADER},
        "content": _json_content(_ref("ServiceDescription")),
    },
    "503": {
        "description": "The description with SERVICE_UNAVAILABLE: no engine serves the "
        "service on this node.",
        "headers": {"X-Error-Code": _ERROR_CODE_HEADER},
        "content": _json_content(_ref("ServiceDescription")),
    },
}


def _describe_operation(catalog: Catalog, index: int) -> dict[str, Any]:
    spec = catalog.specs[index]
    return {
        "operationId": f"describe_{spec.tool_name}",
        "summary": f"Describe {spec.title} (free, no invoice)",
        "tags": [spec.category],
        "security": [],
        "responses": dict(_DESCRIBED_AS_402),
    }


def _price_probe_operation(catalog: Catalog, index: int) -> dict[str, Any]:
    spec, service = catalog.specs[index], catalog.services[index]
    integer = {"type": "string", "pattern": "^[0-9]+$"}
    headers = {
        "X-L402-Price-Sats": {
            "description": "What a call costs, in sats; for a price that follows the "
            "input, the lowest (the 402 quote of the request is the price).",
            "schema": integer,
        },
        "X-L402-Price-Range-Sats": {
            "description": "'<min>-<max>', or '<min>-' when the price grows with the input.",
            "schema": {"type": "string", "pattern": "^[0-9]+-[0-9]*$"},
        },
        "X-L402-Price-Model": {
            "description": "The price shape: flat, per_character, per_page, ...",
            "schema": {"type": "string"},
        },
    }
    return {
        "operationId": f"price_{spec.tool_name}",
        "summary": f"Price of {spec.title} (free; no invoice, nothing stored)",
        "tags": [spec.category],
        "security": [],
        "responses": {
            "200": {"description": "The price, in headers.", "headers": headers},
            "503": {
                "description": "No engine serves this service here (SERVICE_UNAVAILABLE).",
                "headers": headers,
            },
        },
        "x-available": service["available"],
    }


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> Any:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def _free(
    operation_id: str,
    summary: str,
    *,
    parameters: list[dict[str, Any]] | None = None,
    content_type: str = "application/json",
    codes: Collection[ErrorCode] = (ErrorCode.INTERNAL_ERROR,),
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"} if content_type.startswith("text/") else {}
    op: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": ["free"],
        "security": [],
        "responses": {
            "200": {"description": summary, "content": {content_type: {"schema": schema}}},
            **_error_responses(codes),
        },
    }
    if parameters:
        op["parameters"] = parameters
    return op


def _free_endpoints() -> dict[str, dict[str, Any]]:
    """Every free GET endpoint satsgate may serve, by path."""
    doc = "Discovery document (free)."
    return {
        "/api/health": _free("health", "Node, backend and payment counters."),
        "/api/error-codes": _free("errorCodes", f"The error catalog (version {CATALOG_VERSION})."),
        "/api/l402/models": _free(
            "listModels",
            "The model catalog: ids, tiers, defaults, prices.",
            parameters=[
                _query("category", {"type": "string", "enum": list(CATEGORIES)}, "One category.")
            ],
            codes=_FREE_CODES,
        ),
        "/api/languages": _free(
            "languages", "Translation languages: price, engine, measured chrF."
        ),
        "/api/discover": _free(
            "discover",
            "Search the services by words (empty q lists all).",
            parameters=[
                _query("q", {"type": "string"}, "Search words."),
                _query("category", {"type": "string"}, "Only this category."),
            ],
        ),
        "/api/openapi.json": _free("openapi", "This document."),
        "/api/mcp/discovery": _free(
            "mcpDiscovery", f"MCP tool manifest (version {MANIFEST_VERSION}) and payment flow."
        ),
        "/.well-known/l402-services": _free("l402Services", doc),
        "/.well-known/l402": _free("l402Manifest", doc),
        "/.well-known/l402.json": _free("l402ManifestJson", doc),
        "/.well-known/mpp": _free("mppDiscovery", doc),
        "/.well-known/payment": _free("paymentDiscovery", doc),
        "/.well-known/mcp": _free("mcpServerCard", doc),
        "/.well-known/mcp.json": _free("mcpServerCardJson", doc),
        "/.well-known/agent.json": _free("agentJson", doc),
        "/.well-known/agent-card.json": _free("agentCard", doc),
        "/llms.txt": _free(
            "llmsTxt", "The service for language models.", content_type="text/markdown"
        ),
    }


# -- the free operations (satsgate.operations) ----------------------------------------------


def _parameters(op: AnyOperation, optional: bool = False) -> list[dict[str, Any]]:
    """A GET operation's parameters from its params model: path parameters (named in its
    path), then query parameters; ``optional`` for a form picked by its parameters."""
    assert op.http is not None
    schema = op.params.model_json_schema()
    required = set(schema.get("required", []))
    in_path = set(re.findall(r"{(\w+)}", op.http.path))
    params: list[dict[str, Any]] = []
    for name, field in schema.get("properties", {}).items():
        where = "path" if name in in_path else "query"
        params.append(
            {
                "name": name,
                "in": where,
                "required": where == "path" or (name in required and not optional),
                "description": field.get("description", name),
                "schema": query_schema(field),
            }
        )
    if op.http.extra_parameters is not None:
        params += op.http.extra_parameters()
    return sorted(params, key=lambda p: p["in"] != "path")


def _codes(op: AnyOperation) -> list[ErrorCode]:
    assert op.http is not None
    extra = [ErrorCode.PAYLOAD_TOO_LARGE] if op.http.method == "POST" else []
    return list(dict.fromkeys([*op.error_codes, *extra]))


def _available(op: AnyOperation, catalog: Catalog) -> bool:
    """Where the paid service of its family is available (always, without a family)."""
    if op.family is None:
        return True
    service = catalog.by_slug.get(op.family.service)
    return service is not None and bool(service["available"])


def _free_operation(op: AnyOperation, catalog: Catalog, refs: Refs) -> dict[str, Any]:
    """An operation on a path of its own: never a 402; no security, or (one that takes
    the paying credential as a proof) that credential, optionally."""
    assert op.http is not None
    codes = _codes(op)
    available = _available(op, catalog)
    unavailable = "" if available else "\n\nNot configured on this node (503)."
    mcp = f" MCP: {op.tool}." if op.tool else ""
    doc: dict[str, Any] = {
        "operationId": op.name,
        "summary": f"{op.title} (free)",
        "description": f"{op.http.summary or op.description}{mcp}\n\nError codes: "
        f"{', '.join(codes)}.{unavailable}",
        "tags": list(op.tags),
        "security": [{}, {"L402": []}, {"Payment": []}] if op.http.payer_credential else [],
        "responses": {
            "200": {
                "description": op.title,
                "content": _json_content(refs[(op.result, "validation")]),
            },
            **_error_responses(codes),
        },
        "x-error-codes": codes,
        "x-available": available,
    }
    if op.tool:
        doc["x-mcp-tool"] = op.tool
    if op.http.method == "POST":
        body = refs[(op.params, "validation")]
        doc["requestBody"] = {"required": True, "content": _json_content(body)}
    else:
        parameters = _parameters(op)
        if parameters:
            doc["parameters"] = parameters
    return doc


def _schema_name(slug: str) -> str:
    return "".join(part.capitalize() for part in slug.split("-")) + "Request"


def _add_post_forms(
    post: dict[str, Any],
    slug: str,
    forms: list[AnyOperation],
    schemas: dict[str, Any],
    refs: Refs,
) -> None:
    """The paid POST also takes the forms' bodies (free, picked by their keys)."""
    body = post["requestBody"]["content"]["application/json"]
    name = _schema_name(slug)
    schemas[name] = {
        "description": "The paid call, or the body of the free "
        + ", ".join(op.name for op in forms)
        + ".",
        "oneOf": [body["schema"], *(refs[(op.params, "validation")] for op in forms)],
    }
    body["schema"] = _ref(name)
    codes = list(post["x-error-codes"])
    for op in forms:
        assert op.http is not None
        mcp = f" MCP: {op.tool}." if op.tool else ""
        post["description"] += f"\n\n{op.title} (free): {op.http.summary}{mcp}"
        codes += op.error_codes
    post["x-error-codes"] = codes = list(dict.fromkeys(codes))
    post["responses"].update(
        _error_responses([c for c in codes if c not in _REFUSED_WITH_A_CHALLENGE])
    )


def _get_form(
    describe: dict[str, Any], op: AnyOperation, catalog: Catalog, refs: Refs
) -> dict[str, Any]:
    """The service's GET: the description, or the form's answer (free)."""
    assert op.http is not None
    result = refs[(op.result, "validation")]
    available = _available(op, catalog)
    doc: dict[str, Any] = {**describe, "summary": op.http.summary or f"{op.title} (free)"}
    described: dict[str, Any] = {}
    if op.http.with_description:
        answer: dict[str, Any] = {"allOf": [_ref("ServiceDescription"), result]}
        answered = "The service description and the answer."
        doc["description"] = op.description
    else:  # without the form's parameters: the description, as a 402 (no invoice)
        answer, answered = result, f"The answer of {op.name}."
        described = dict(_DESCRIBED_AS_402)
        unavailable = "" if available else " Not configured on this node: answers 503."
        doc["description"] = op.description + unavailable
        doc["parameters"] = _parameters(op, optional=True)
    doc["responses"] = {
        "200": {"description": answered, "content": _json_content(answer)},
        **described,
        **_error_responses(_codes(op)),
    }
    doc["x-available"] = available
    if op.tool:
        doc["x-mcp-tool"] = op.tool
    return doc


def _add_operations(
    paths: dict[str, Any],
    schemas: dict[str, Any],
    catalog: Catalog,
    routes: Collection[tuple[str, str]],
    refs: Refs,
) -> None:
    """Each operation where its route exists: its own path, or a form of a service's."""
    post_forms: dict[str, list[AnyOperation]] = {}
    for op in OPERATIONS:
        route = op.http
        if route is None:
            continue
        if op.family is not None and op.family.service not in catalog.by_slug:
            continue
        if route.on_service is None:
            if (route.method, route.path) in routes:
                item = paths.setdefault(route.path, {})
                item[route.method.lower()] = _free_operation(op, catalog, refs)
            continue
        item = paths.get(f"/api/l402/{route.on_service}")
        if item is None or (route.method, "/api/l402/{slug}") not in routes:
            continue
        if route.method == "POST":
            post_forms.setdefault(route.on_service, []).append(op)
        elif "get" in item:
            item["get"] = _get_form(item["get"], op, catalog, refs)
    for slug, forms in post_forms.items():
        _add_post_forms(paths[f"/api/l402/{slug}"]["post"], slug, forms, schemas, refs)


def openapi_document(
    catalog: Catalog, routes: Collection[tuple[str, str]], node_pubkey: str
) -> dict[str, Any]:
    """The document; ``routes`` is the (METHOD, path) set the server answers."""
    models: list[type[BaseModel]] = [
        *(spec.params for spec in catalog.specs),
        *COMPONENTS,
        *(op.params for op in OPERATIONS if op.http is not None),
        *(op.result for op in OPERATIONS if op.http is not None),
    ]
    unique_models = list(dict.fromkeys(models))
    refs, defs = models_json_schema(
        [(model, "validation") for model in unique_models], ref_template=_REF + "{model}"
    )
    schemas = dict(defs.get("$defs", {}))

    paths: dict[str, Any] = {}
    for index, spec in enumerate(catalog.specs):
        path = f"/api/l402/{spec.slug}"
        item: dict[str, Any] = {
            "post": _paid_operation(catalog, index, refs[(spec.params, "validation")])
        }
        if ("GET", "/api/l402/{slug}") in routes:
            item["get"] = _describe_operation(catalog, index)
        if ("HEAD", "/api/l402/{slug}") in routes:
            item["head"] = _price_probe_operation(catalog, index)
        paths[path] = item
    for path, operation in _free_endpoints().items():
        if ("GET", path) in routes:
            paths[path] = {"get": operation}
    _add_operations(paths, schemas, catalog, routes, refs)

    categories = sorted({spec.category for spec in catalog.specs})
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": NAME,
            "version": DOCUMENT_VERSION,
            "description": f"{SUMMARY} Tool manifest version {MANIFEST_VERSION}; error "
            f"catalog version {CATALOG_VERSION}. The 402 quote is the authoritative price.",
            "x-l402-version": L402_DISCOVERY_VERSION,
            "x-l402-provider": {
                "name": NAME,
                "uri": catalog.base_url,
                "node_pubkey": node_pubkey,
                "currencies": ["msat"],
            },
            "x-service-info": {"categories": categories, "docs": links(catalog)},
            "x-tool-manifest-version": MANIFEST_VERSION,
            "x-error-catalog-version": CATALOG_VERSION,
        },
        "servers": [{"url": catalog.base_url}],
        "tags": [{"name": c} for c in categories] + [{"name": "free"}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": security_schemes()},
    }
