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

Free endpoints are documented only when the route is registered, so the
document never lists a path the server does not answer. The ai-call path also
carries its free forms (services.ai_calls): the confirmation body as an
alternative request body of its POST, and the poll (``call_id``) on its GET. A
voice-bridge session's follow-ups (services.voice_bridge) have paths of their own:
say, poll and end, free, marked ``x-available`` like the paid open.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from satsgate.discovery.describe import price_text
from satsgate.discovery.documents import (
    L402_DISCOVERY_VERSION,
    MANIFEST_VERSION,
    NAME,
    SUMMARY,
    Catalog,
    l402_pricing,
    links,
    payment_terms,
    security_schemes,
)
from satsgate.errors import CATALOG_VERSION, CODES
from satsgate.services import voice_bridge
from satsgate.services.catalog import CATEGORIES
from satsgate.services.comms import (
    AI_CALL,
    VOICE_BRIDGE_OPEN,
    AiCallConfirmParams,
    AiCallPollParams,
)
from satsgate.services.pricing import ESTIMATORS

OPENAPI_VERSION = "3.1.0"
DOCUMENT_VERSION = "0.3.0"  # the machine-readable description's own version (spec, Versioning)
_REF = "#/components/schemas/"

# Codes any paid call can end in besides its service's own failure codes.
_GATE_CODES = (
    "L402_INVALID_PARAMS",
    "MALFORMED_CREDENTIAL",
    "PAYMENT_REQUIRED",
    "PAYMENT_INVALID",
    "PAYMENT_EXPIRED",
    "PAYMENT_PENDING",
    "PAYMENT_INSUFFICIENT",
    "PAYMENT_ALREADY_USED",
    "PAYLOAD_TOO_LARGE",
    "SERVICE_UNAVAILABLE",
    "L402_UPSTREAM_FAILED",
    "L402_REFUND_ISSUED",
    "INTERNAL_ERROR",
)
_FREE_CODES = ("L402_INVALID_PARAMS", "NOT_FOUND", "INTERNAL_ERROR")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


_ERROR_CODE_HEADER = {
    "description": "Repeats the body's error_code.",
    "schema": {"type": "string"},
}


def _error_responses(codes: Collection[str]) -> dict[str, Any]:
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


def _components_schemas() -> dict[str, Any]:
    code_names = list(CODES)
    return {
        "ErrorEnvelope": {
            "type": "object",
            "description": "Every error response; X-Error-Code repeats error_code.",
            "required": ["error", "error_code", "suggestion"],
            "properties": {
                "error": {"type": "string"},
                "error_code": {"type": "string", "enum": code_names},
                "suggestion": {"type": "string"},
                "example": {"type": "string"},
                "retry_after_seconds": {"type": "number"},
                "refund": _ref("Refund"),
            },
            "additionalProperties": True,
        },
        "Refund": {
            "type": "object",
            "description": "A one-time LNURL-withdraw refund after a post-payment failure.",
            "properties": {
                "lnurl_withdraw": {"type": "string"},
                "amount_sats": {"type": "number"},
                "refund_amount": {
                    "type": "number",
                    "deprecated": True,
                    "description": "Alias of amount_sats.",
                },
                "refund_secret": {"type": "string"},
                "status": {"type": "string"},
                "charge_id": {"type": "string"},
            },
            "additionalProperties": True,
        },
        "PaymentChallenge": {
            "allOf": [
                _ref("ErrorEnvelope"),
                {
                    "type": "object",
                    "properties": {
                        "paymentId": {"type": "string"},
                        "invoice": {"type": "string", "description": "BOLT11"},
                        "lightningInvoice": {"type": "string"},
                        "paymentHash": {"type": "string"},
                        "macaroon": {"type": "string", "description": "standard base64"},
                        "amountSats": {"type": "integer"},
                        "expiresAt": {"type": "string", "format": "date-time"},
                        "service": {"type": "string"},
                        "hostedCheckoutUrl": {"type": "string"},
                    },
                },
            ]
        },
        "JobAccepted": {
            "type": "object",
            "description": "An accepted async job: poll poll_url until COMPLETED or FAILED.",
            "properties": {
                "job_id": {"type": "string"},
                "requestId": {"type": "string"},
                "jobType": {"type": "string"},
                "status": {"type": "string"},
                "poll_url": {"type": "string"},
                "poll_interval_ms": {"type": "integer"},
            },
            "additionalProperties": True,
        },
        "AiCallRecord": {
            "type": "object",
            "description": "An AI call: { success, call_id, status, poll_url } and, by "
            "polling, transcript, results and refund status. status includes "
            "pending_confirm (then questions holds the clarification questions).",
            "required": ["success", "call_id", "status", "poll_url"],
            "properties": {
                "success": {"type": "boolean"},
                "call_id": {"type": "string"},
                "status": {"type": "string"},
                "poll_url": {"type": "string"},
                "questions": {"type": "array", "items": {"type": "string"}},
                "transcript": {"type": "string"},
                "results": {"type": "object"},
                "refund_status": {"type": "string"},
            },
            "additionalProperties": True,
        },
        "VoiceBridgeSaid": {
            "type": "object",
            "description": "voice_bridge_say: the audio bytes sent into the call.",
            "required": ["success", "bytesSent"],
            "properties": {"success": {"type": "boolean"}, "bytesSent": {"type": "integer"}},
            "additionalProperties": True,
        },
        "VoiceBridgeEvents": {
            "type": "object",
            "description": "poll_voice_bridge: the session's state and its events after "
            "the cursor; poll again with nextCursor.",
            "required": ["success", "sessionId", "state", "events", "nextCursor", "callId"],
            "properties": {
                "success": {"type": "boolean"},
                "sessionId": {"type": "string"},
                "state": {"type": "string"},
                "events": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "description": "A partial or final transcript, or a system event.",
                        "required": ["seq", "type", "text", "ts_ms"],
                        "properties": {
                            "seq": {"type": "integer"},
                            "type": {"type": "string"},
                            "text": {"type": "string"},
                            "ts_ms": {"type": "integer"},
                        },
                    },
                },
                "nextCursor": {"type": "integer"},
                "callId": {"type": "string"},
            },
            "additionalProperties": True,
        },
        "VoiceBridgeSettlement": {
            "type": "object",
            "description": "end_voice_bridge: elapsed time billed at perMinuteSats, the rest "
            "of the deposit refunded (to refundAddress, else an LNURL-withdraw).",
            "required": [
                "success",
                "elapsedSec",
                "usedSats",
                "depositSats",
                "refundableSats",
                "refund",
                "finalTranscript",
            ],
            "properties": {
                "success": {"type": "boolean"},
                "elapsedSec": {"type": "integer"},
                "usedSats": {"type": "integer"},
                "depositSats": {"type": "integer"},
                "refundableSats": {"type": "integer"},
                "refund": {"anyOf": [_ref("Refund"), {"type": "null"}]},
                "finalTranscript": {"type": "string"},
            },
            "additionalProperties": True,
        },
        "ServiceDescription": {
            "type": "object",
            "required": ["id", "name", "endpoint", "method", "pricing", "input_schema"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "tool": {"type": "string"},
                "category": {"type": "string"},
                "description": {"type": "string"},
                "endpoint": {"type": "string"},
                "method": {"type": "string"},
                "mode": {"type": "string", "enum": ["sync", "job"]},
                "pricing": {"type": "object"},
                "input_schema": {"type": "object"},
                "failure_codes": {"type": "array", "items": {"type": "string"}},
                "available": {"type": "boolean"},
            },
            "additionalProperties": True,
        },
    }


def _paid_operation(catalog: Catalog, index: int, body_schema: dict[str, Any]) -> dict[str, Any]:
    spec, service = catalog.specs[index], catalog.services[index]
    price = service["pricing"]
    codes = list(dict.fromkeys([*spec.failure_codes, *_GATE_CODES]))
    if spec.mode == "job":
        ok = {
            "202": {
                "description": "Job accepted; poll poll_url (headers X-Job-Id, X-Poll-Url, "
                "X-Poll-Interval-Ms).",
                "content": _json_content(_ref("JobAccepted")),
            }
        }
    else:
        ok = {
            "200": {
                "description": "The result: JSON, or text or a file for services that return one.",
                "content": {"application/json": {"schema": {"type": "object"}}, "*/*": {}},
            }
        }
    payment_info: dict[str, Any] = {
        "intent": "charge",
        "method": "lightning",
        "currency": "sat",
        **payment_terms(service),
        "protocols": ["L402", "MPP"],
    }
    body: dict[str, Any] = {"schema": body_schema}
    if spec.example:
        body["example"] = dict(spec.example)
    unavailable = "" if service["available"] else "\n\nNot configured on this node (503)."
    return {
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
            "402": {
                "description": "Payment required (PAYMENT_REQUIRED): the challenge for "
                "exactly this request. PAYMENT_PENDING, PAYMENT_INVALID and PAYMENT_EXPIRED "
                "come with a payable challenge too; PAYMENT_INSUFFICIENT carries the refund.",
                "headers": {
                    "WWW-Authenticate": {
                        "description": 'Sent three times: \'LSAT macaroon="<base64>", '
                        'invoice="<bolt11>"\', \'L402 macaroon="<base64>", '
                        'invoice="<bolt11>"\' and \'Payment id="...", realm="...", '
                        'method="lightning", intent="charge", request="<base64url '
                        'JSON>", expires="<RFC 3339>"\'.',
                        "schema": {"type": "string"},
                    },
                    "X-Error-Code": _ERROR_CODE_HEADER,
                },
                "content": _json_content(_ref("PaymentChallenge")),
            },
            **_error_responses(codes),
        },
        "x-error-codes": codes,
        "x-payment-info": payment_info,
        "x-l402-service": spec.slug,
        "x-l402-pricing": l402_pricing(service),
        "x-mcp-tool": spec.tool_name,
        "x-available": service["available"],
    }


def _describe_operation(catalog: Catalog, index: int) -> dict[str, Any]:
    spec = catalog.specs[index]
    return {
        "operationId": f"describe_{spec.tool_name}",
        "summary": f"Describe {spec.title} (free)",
        "tags": [spec.category],
        "security": [],
        "responses": {
            "200": {
                "description": "The service: price, input schema, failure codes, example.",
                "content": _json_content(_ref("ServiceDescription")),
            }
        },
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
    codes: Collection[str] = ("INTERNAL_ERROR",),
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


def _query_schema(schema: dict[str, Any]) -> dict[str, Any]:
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


def _estimate_parameters() -> list[dict[str, Any]]:
    """The query parameters of every estimator (pricing.ESTIMATORS), merged by name."""
    schemas: dict[str, list[dict[str, Any]]] = {}
    users: dict[str, list[str]] = {}
    for service, estimator in ESTIMATORS.items():
        fields = estimator.params.model_json_schema().get("properties", {})
        for name, schema in fields.items():
            options = schemas.setdefault(name, [])
            cleaned = _query_schema(schema)
            if cleaned not in options:
                options.append(cleaned)
            users.setdefault(name, []).append(service)
    return [
        _query(
            name,
            options[0] if len(options) == 1 else {"anyOf": options},
            "Used by: " + ", ".join(users[name]) + ".",
        )
        for name, options in schemas.items()
    ]


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
        "/api/estimate-cost": _free(
            "estimateCost",
            "A price quote without an invoice (X-Error-Code: L402_ESTIMATE_ONLY).",
            parameters=[
                _query(
                    "service",
                    {"type": "string", "enum": sorted(ESTIMATORS)},
                    "Estimate id.",
                    required=True,
                ),
                *_estimate_parameters(),
            ],
            codes=_FREE_CODES,
        ),
        "/api/l402/job-status": _free(
            "jobStatus",
            "Status and result of an async job (check_job_status, get_job_result).",
            parameters=[
                _query("requestId", {"type": "string"}, "Job id.", required=True),
                _query("jobType", {"type": "string"}, "Job type."),
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


_AI_CALL_PATH = f"/api/l402/{AI_CALL.slug}"
_AI_CALL_FREE_CODES = ("L402_INVALID_PARAMS", "AI_CALL_NOT_FOUND", "SERVICE_UNAVAILABLE")


def _add_ai_call_confirmation(
    post: dict[str, Any], schemas: dict[str, Any], confirm_schema: dict[str, Any]
) -> None:
    """The POST of ai-call also takes ``{action: 'confirm', session_id, answers?}``."""
    body = post["requestBody"]["content"]["application/json"]
    schemas["AiCallRequest"] = {
        "description": "The paid call, or the free confirmation of a pending_confirm call.",
        "oneOf": [body["schema"], confirm_schema],
    }
    body["schema"] = _ref("AiCallRequest")
    post["description"] += (
        "\n\nConfirmation (free): the body {action: 'confirm', session_id, answers?} lets a "
        "call that answered status pending_confirm proceed on its original payment. It needs "
        "no Authorization and never answers 402: 200 with { success, call_id, status, "
        "poll_url }, or AI_CALL_NOT_FOUND (404) when no call awaits confirmation under "
        "session_id. MCP: confirm_ai_call."
    )
    codes = list(dict.fromkeys([*post["x-error-codes"], *_AI_CALL_FREE_CODES]))
    post["x-error-codes"] = codes
    post["responses"].update(_error_responses(codes))


def _describe_or_poll_ai_call(describe: dict[str, Any], available: bool) -> dict[str, Any]:
    """The GET of ai-call: the description, or with ``call_id`` the free poll of a call."""
    call_id = _query_schema(AiCallPollParams.model_json_schema()["properties"]["call_id"])
    unavailable = "" if available else " Not configured on this node: polling answers 503."
    return {
        **describe,
        "summary": f"Describe {AI_CALL.title}, or poll one call with call_id (free)",
        "description": "Without call_id: the service description. With call_id: the call's "
        "record (transcript, results and refund status when the call has them), free of "
        "charge; x-available is whether polling works on this node." + unavailable,
        "parameters": [
            _query("call_id", call_id, "The call_id returned when the call was placed.")
        ],
        "responses": {
            "200": {
                "description": "The service description, or with call_id the call record.",
                "content": _json_content(
                    {"oneOf": [_ref("ServiceDescription"), _ref("AiCallRecord")]}
                ),
            },
            **_error_responses([*_AI_CALL_FREE_CODES, "INTERNAL_ERROR"]),
        },
        "x-available": available,
    }


def _add_ai_call_forms(
    paths: dict[str, Any],
    schemas: dict[str, Any],
    routes: Collection[tuple[str, str]],
    confirm_schema: dict[str, Any],
    available: bool,
) -> None:
    """Document the free forms on the ai-call path, each only where its route exists."""
    item = paths.get(_AI_CALL_PATH)
    if item is None:
        return
    if ("POST", _AI_CALL_PATH) in routes:
        _add_ai_call_confirmation(item["post"], schemas, confirm_schema)
    if ("GET", _AI_CALL_PATH) in routes and "get" in item:
        item["get"] = _describe_or_poll_ai_call(item["get"], available)


_VOICE_BRIDGE_CODES = (
    "L402_INVALID_PARAMS",
    "VOICE_BRIDGE_SESSION_NOT_FOUND",
    "SERVICE_UNAVAILABLE",
    "INTERNAL_ERROR",
)
_VOICE_BRIDGE_BODIES = (voice_bridge.VoiceBridgeSayParams, voice_bridge.VoiceBridgeEndParams)


def _voice_bridge_operation(
    tool: str,
    summary: str,
    description: str,
    answer: str,
    available: bool,
    *,
    body: dict[str, Any] | None = None,
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A free follow-up of a voice-bridge session: no security, never a 402."""
    codes = [*_VOICE_BRIDGE_CODES, *(["PAYLOAD_TOO_LARGE"] if body is not None else [])]
    unavailable = "" if available else "\n\nNot configured on this node (503)."
    op: dict[str, Any] = {
        "operationId": tool,
        "summary": f"{summary} (free)",
        "description": f"{description} Free: the session's deposit pays; no Authorization, "
        f"never 402. MCP: {tool}.\n\nError codes: {', '.join(codes)}.{unavailable}",
        "tags": [VOICE_BRIDGE_OPEN.category, "free"],
        "security": [],
        "responses": {
            "200": {"description": summary, "content": _json_content(_ref(answer))},
            **_error_responses(codes),
        },
        "x-error-codes": codes,
        "x-mcp-tool": tool,
        "x-available": available,
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": _json_content(body)}
    if parameters is not None:
        op["parameters"] = parameters
    return op


def _voice_bridge_paths(
    routes: Collection[tuple[str, str]],
    say_schema: dict[str, Any],
    end_schema: dict[str, Any],
    available: bool,
) -> dict[str, Any]:
    """say, poll and end of a voice-bridge session, each only where its route exists."""
    paths: dict[str, Any] = {}
    if ("POST", voice_bridge.SAY_PATH) in routes:
        paths[voice_bridge.SAY_PATH] = {
            "post": _voice_bridge_operation(
                "voice_bridge_say",
                "Speak into a voice bridge",
                "Play speech into an open session: exactly one of text (synthesized; "
                "optional language, voiceDescription) or audioBase64 (raw audio, at most "
                "1 MB decoded; optional encoding, default the session's activeCodec). Speech "
                "recognition is muted while it plays.",
                "VoiceBridgeSaid",
                available,
                body=say_schema,
            )
        }
    if ("GET", voice_bridge.POLL_PATH) in routes:
        fields = voice_bridge.VoiceBridgePollParams.model_json_schema()["properties"]
        paths[voice_bridge.POLL_PATH] = {
            "get": _voice_bridge_operation(
                "poll_voice_bridge",
                "Poll a voice bridge",
                "Transcript and system events since cursor; poll about every 0.5 to 1 s. "
                "session_id is accepted for sessionId.",
                "VoiceBridgeEvents",
                available,
                parameters=[
                    _query(
                        "sessionId",
                        _query_schema(fields["sessionId"]),
                        "The sessionId from the open_voice_bridge answer.",
                        required=True,
                    ),
                    _query(
                        "cursor",
                        _query_schema(fields["cursor"]),
                        "nextCursor of the previous poll; 0 from the start.",
                    ),
                ],
            )
        }
    if ("POST", voice_bridge.END_PATH) in routes:
        paths[voice_bridge.END_PATH] = {
            "post": _voice_bridge_operation(
                "end_voice_bridge",
                "End a voice bridge",
                "Hang up and settle the deposit, once: the elapsed time is billed at "
                "perMinuteSats, the rest refunded to refundAddress or as an LNURL-withdraw. "
                "Ending again returns the same settlement.",
                "VoiceBridgeSettlement",
                available,
                body=end_schema,
            )
        }
    return paths


def openapi_document(
    catalog: Catalog, routes: Collection[tuple[str, str]], node_pubkey: str
) -> dict[str, Any]:
    """The document; ``routes`` is the (METHOD, path) set the server answers."""
    models: list[type[BaseModel]] = [
        *(spec.params for spec in catalog.specs),
        AiCallConfirmParams,
        *_VOICE_BRIDGE_BODIES,
    ]
    unique_models = list(dict.fromkeys(models))
    refs, defs = models_json_schema(
        [(model, "validation") for model in unique_models], ref_template=_REF + "{model}"
    )
    schemas = {**defs.get("$defs", {}), **_components_schemas()}

    paths: dict[str, Any] = {}
    for index, spec in enumerate(catalog.specs):
        path = f"/api/l402/{spec.slug}"
        item: dict[str, Any] = {
            "post": _paid_operation(catalog, index, refs[(spec.params, "validation")])
        }
        if ("GET", "/api/l402/{slug}") in routes:
            item["get"] = _describe_operation(catalog, index)
        paths[path] = item
    for path, operation in _free_endpoints().items():
        if ("GET", path) in routes:
            paths[path] = {"get": operation}
    ai_call = catalog.by_slug.get(AI_CALL.slug)
    if ai_call is not None:
        confirm_schema = refs[(AiCallConfirmParams, "validation")]
        _add_ai_call_forms(paths, schemas, routes, confirm_schema, bool(ai_call["available"]))
    bridge = catalog.by_slug.get(VOICE_BRIDGE_OPEN.slug)
    if bridge is not None:
        say_schema = refs[(voice_bridge.VoiceBridgeSayParams, "validation")]
        end_schema = refs[(voice_bridge.VoiceBridgeEndParams, "validation")]
        available = bool(bridge["available"])
        paths.update(_voice_bridge_paths(routes, say_schema, end_schema, available))

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
