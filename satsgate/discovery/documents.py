"""The JSON discovery documents, each a pure function of the catalog (registry + settings).

Shapes and the drafts they follow (unknown members are ignored by every one of
them, so satsgate's extra fields are additive):

- ``/.well-known/l402-services``: satsgate's own full manifest, one entry per
  service exactly as ``GET /api/l402/<slug>`` describes it.
- ``/.well-known/l402`` (and ``/.well-known/l402.json``): the Lightning Labs
  L402 discovery manifest (lightninglabs/L402 ``discovery-spec.md``, version
  "1.0"): provider, currencies ["msat"], macaroon_versions [0],
  payment_methods ["bolt11"], services[].resources[].pricing with model
  ``fixed`` (price_msat) or ``dynamic`` (with satsgate's shape, unit,
  min_price_msat and example_price_msat), and the caveat vocabulary satsgate
  mints. No ``quote_endpoint``: the free 402 of the request itself is the quote
  (it carries the exact price, macaroon and invoice and charges nothing).
- ``/.well-known/mpp`` (and ``/.well-known/payment``): the Payment scheme's
  well-known document (``{version: 1, realm, methods: {lightning: {intents,
  assets}}}``) plus the priced endpoints, twice: satsgate's ``endpoints`` and the
  crawlers' ``resources`` (``{url, method, x-payment-info: {intent, method, amount,
  currency}}``, with ``protocol: "mpp"``, ``provider``, ``payment_methods`` and
  ``challenge_flow``, as the 402 directories read a paid API's document). No
  ``/.well-known/x402``: satsgate takes no x402 (on-chain) payments.
- ``/.well-known/mcp`` (and ``/.well-known/mcp.json``): an MCP server card
  (SEP-1649/2127 are drafts; the fields follow the ``initialize`` result and
  the registry's ``remotes``): endpoint ``/api/mcp``, streamable-http.
- ``/.well-known/agent.json`` and ``agent-card.json``: an A2A agent card with
  one skill per service. satsgate speaks plain HTTP (L402/MPP) and MCP, not
  A2A messaging, so the card names no A2A transport; each skill carries its
  ``endpoint``, ``method``, ``pricing`` and ``protocols`` (the rails).
- ``/api/mcp/discovery``: the tool manifest (version 1.0.0) and the payment flow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from satsgate import __version__
from satsgate.config.settings import Settings
from satsgate.discovery.describe import AnySpec, price_text, search
from satsgate.edge.http import dumps
from satsgate.errors import CATALOG_VERSION
from satsgate.mcp import MCP_PATH, SUPPORTED_VERSIONS
from satsgate.payments.l402 import LOCATION

MANIFEST_VERSION = "1.0.0"  # the tool manifest version of the spec (Versioning)
L402_DISCOVERY_VERSION = "1.0"  # lightninglabs/L402 discovery-spec.md
MPP_DISCOVERY_VERSION = 1
A2A_PROTOCOL_VERSION = "0.3.0"
NAME = "satsgate"
SUMMARY = (
    "Pay-per-call AI and communication services inside a Lightning node. No accounts and "
    "no API keys: each call is paid with a Lightning invoice priced for that one call "
    "(L402, MPP, or the MCP paymentId flow)."
)

HTTP_FLOW = (
    "POST the JSON request to the service endpoint without Authorization: the answer is "
    "402 with WWW-Authenticate challenges (L402 and Payment) and a body holding invoice, "
    "amountSats, macaroon and paymentId. Validation happens first: a bad request gets 400 "
    "L402_INVALID_PARAMS and no invoice.",
    "Pay the BOLT11 invoice and keep the preimage (64 hex characters).",
    "Repeat the same request with 'Authorization: L402 <macaroon>:<preimage>' or "
    "'Authorization: Payment <base64url JSON {challenge, payload: {preimage}}>'.",
    "The answer is 200 with the result, or 202 with job_id and poll_url for async services "
    "(poll GET /api/l402/job-status). One payment covers one call: a credential sent again "
    "(another request, or after 30 s) gets 402 PAYMENT_ALREADY_USED with a fresh challenge.",
)
MCP_FLOW = (
    "tools/call create_payment {toolName, ...the tool's arguments} -> paymentId, "
    "lightningInvoice, amountSats (prompt or characterCount instead of the arguments give an "
    "estimate).",
    "Pay lightningInvoice; call check_payment_status {paymentId} until paid is true.",
    "tools/call <tool> {paymentId, ...the same arguments}. Payment errors come back inside "
    "the JSON-RPC result (isError, error_code), never as HTTP 402.",
)


@dataclass(frozen=True)
class Catalog:
    """The registry as this node serves it: specs and their descriptions, in registry order."""

    settings: Settings
    specs: tuple[AnySpec, ...]
    services: tuple[dict[str, Any], ...]  # describe(spec) of each spec, same order

    @property
    def base_url(self) -> str:
        return self.settings.public_base_url

    @property
    def realm(self) -> str:
        """The MPP realm: the host of the public address (as the gate puts in challenges)."""
        return self.base_url.split("://", 1)[-1].split("/", 1)[0]

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    @cached_property
    def by_slug(self) -> dict[str, dict[str, Any]]:
        return {service["id"]: service for service in self.services}


def links(catalog: Catalog) -> dict[str, str]:
    """Every discovery document, by name; each document points to the others."""
    return {
        "openapi": catalog.url("/api/openapi.json"),
        "llms": catalog.url("/llms.txt"),
        "l402Services": catalog.url("/.well-known/l402-services"),
        "l402": catalog.url("/.well-known/l402"),
        "mpp": catalog.url("/.well-known/mpp"),
        "mcp": catalog.url("/.well-known/mcp"),
        "mcpDiscovery": catalog.url("/api/mcp/discovery"),
        "agentCard": catalog.url("/.well-known/agent-card.json"),
        "search": catalog.url("/api/discover"),
        "models": catalog.url("/api/l402/models"),
        "estimate": catalog.url("/api/estimate-cost"),
        "errorCodes": catalog.url("/api/error-codes"),
    }


def payment_protocols(settings: Settings) -> list[str]:
    """The rails a paid endpoint takes: L402 (also as LSAT), MPP (the Payment scheme's
    lightning charge and session intents), and Cashu ecash when ``[cashu] mints`` names
    a mint."""
    protocols = ["L402", "MPP"]
    if settings.cashu.get("mints"):
        protocols.append("Cashu")
    return protocols


CHALLENGE_FLOW = (
    "POST the JSON request to the resource without Authorization: the answer is 402 with "
    "WWW-Authenticate challenges (L402, LSAT, Payment) for exactly that request; the "
    "Payment session intent's (a deposit for many calls) only with Accept-Payment: "
    "lightning/session. A GET of the resource (no body) answers 402 with the price and how "
    "to pay, and no invoice."
)


def error_catalog_ref(catalog: Catalog) -> dict[str, Any]:
    return {"version": CATALOG_VERSION, "url": catalog.url("/api/error-codes")}


def l402_services(catalog: Catalog) -> dict[str, Any]:
    """/.well-known/l402-services."""
    return {
        "version": MANIFEST_VERSION,
        "name": NAME,
        "description": SUMMARY,
        "baseUrl": catalog.base_url,
        "network": catalog.settings.network,
        "protocols": ["L402", "MPP", "MCP"],
        "payment": {
            "currency": "sat",
            "schemes": ["L402", "Payment"],
            "flow": list(HTTP_FLOW),
            "quote": "The 402 answer to the unauthenticated request is the price; "
            "it charges nothing.",
        },
        "errorCatalog": error_catalog_ref(catalog),
        "links": links(catalog),
        "services": list(catalog.services),
    }


def pricing_mode(service: dict[str, Any]) -> str:
    """'fixed' when one amount is the price of every call, else 'dynamic' (MPP and L402 terms)."""
    return "fixed" if service["pricing"]["model"] == "flat" else "dynamic"


def l402_pricing(service: dict[str, Any]) -> dict[str, Any]:
    """The L402 discovery pricing object: fixed with price_msat, or dynamic with the shape."""
    price = service["pricing"]
    if pricing_mode(service) == "fixed":
        return {"model": "fixed", "price_msat": price["amountSats"] * 1000}
    doc: dict[str, Any] = {
        "model": "dynamic",
        "shape": price["model"],
        "unit": price["unit"],
        "min_price_msat": price["minSats"] * 1000,
    }
    if price.get("amountFor") == "example":
        doc["example_price_msat"] = price["amountSats"] * 1000
    return doc


def payment_terms(service: dict[str, Any]) -> dict[str, Any]:
    """The price in MPP terms (decimal strings in sats), for /.well-known/mpp and the
    OpenAPI x-payment-info: the amount of a fixed price, else an example and the minimum."""
    price = service["pricing"]
    return {
        "pricingMode": pricing_mode(service),
        "priceModel": price["model"],
        "unit": price["unit"],
        "amount": str(price["amountSats"]),
        "minAmount": str(price["minSats"]),
    }


def l402_manifest(catalog: Catalog, node_pubkey: str) -> dict[str, Any]:
    """/.well-known/l402: the Lightning Labs L402 discovery manifest."""
    caveats: dict[str, Any] = {
        "services": {
            "type": "service_list",
            "attenuation": "subset",
            "description": "services=<slug>:0; a credential buys one call of that service.",
        }
    }
    services = []
    for service in catalog.services:
        slug = service["id"]
        caveats[f"{slug}_valid_until"] = {"type": "timestamp", "attenuation": "earlier"}
        services.append(
            {
                "name": slug,
                "description": service["description"],
                "tiers": [{"tier": 0, "name": "base"}],
                "resources": [
                    {
                        "path": f"/api/l402/{slug}",
                        "method": "POST",
                        "pricing": l402_pricing(service),
                    }
                ],
                "available": service["available"],
            }
        )
    return {
        "version": L402_DISCOVERY_VERSION,
        "provider": {"name": NAME, "uri": catalog.base_url, "node_pubkey": node_pubkey},
        "currencies": ["msat"],
        "macaroon_versions": [0],
        "macaroon_location": LOCATION,
        "payment_methods": ["bolt11"],
        "openapi": "/api/openapi.json",
        "services": services,
        "caveats": caveats,
    }


def mpp_document(catalog: Catalog) -> dict[str, Any]:
    """/.well-known/mpp: the Payment scheme's well-known document, plus the priced endpoints
    (as ``endpoints``, and as the crawlers' ``resources``)."""
    endpoints = []
    resources = []
    protocols = payment_protocols(catalog.settings)
    for service in catalog.services:
        terms = payment_terms(service)
        resources.append(
            {
                "url": service["endpoint"],
                "method": "POST",
                "description": service["description"],
                "x-payment-info": {
                    "intent": "charge",
                    "method": "lightning",
                    "amount": terms["amount"],
                    "currency": "sat",
                    "description": f"{service['name']}: {price_text(service['pricing'])}",
                },
                "protocols": protocols,
                "available": service["available"],
            }
        )
        endpoints.append(
            {
                "id": service["id"],
                "path": f"/api/l402/{service['id']}",
                "url": service["endpoint"],
                "method": "POST",
                "intent": "charge",
                "paymentMethod": "lightning",
                "currency": "sat",
                **payment_terms(service),
                "description": service["description"],
            }
        )
    return {
        "protocol": "mpp",
        "version": MPP_DISCOVERY_VERSION,
        "spec": "https://paymentauth.org",
        "provider": {"name": NAME, "url": catalog.base_url},
        "payment_methods": ["lightning"],
        "realm": catalog.realm,
        "methods": {
            "lightning": {
                # session: its challenge comes with a 402 whose request asked for it
                # (Accept-Payment: lightning/session), see CHALLENGE_FLOW
                "intents": ["charge", "session"],
                "assets": ["BTC"],
                "currencies": ["sat"],
                "network": catalog.settings.network,
            }
        },
        "scheme": "Payment",
        "problemTypes": "https://paymentauth.org/problems/",
        "openapi": catalog.url("/api/openapi.json"),
        "challenge_flow": {
            "description": CHALLENGE_FLOW,
            "auth_header": "Authorization",
            "auth_scheme": "Payment",
            "receipt_header": "Payment-Receipt",
            "challenge_ttl_seconds": catalog.settings.invoice_expiry_s,
        },
        "endpoints": endpoints,
        "resources": resources,
    }


def mcp_tools(catalog: Catalog, definitions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """tools/list as the MCP endpoint answers it; a paid tool also names its service and price."""
    by_tool = {service["tool"]: service for service in catalog.services}
    tools: list[dict[str, Any]] = []
    for definition in definitions:
        service = by_tool.get(definition["name"])
        if service is None:
            tools.append({**definition, "paid": False})
            continue
        tools.append(
            {
                **definition,
                "paid": True,
                "service": service["id"],
                "endpoint": service["endpoint"],
                "pricing": service["pricing"],
                "mode": service["mode"],
                "available": service["available"],
                "failure_codes": service["failure_codes"],
            }
        )
    return tools


def mcp_discovery(catalog: Catalog, definitions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """/api/mcp/discovery: the tool manifest and how to pay through MCP."""
    tools = mcp_tools(catalog, definitions)
    return {
        "name": NAME,
        "version": MANIFEST_VERSION,
        "serverVersion": __version__,
        "endpoint": catalog.url(MCP_PATH),
        "transport": "streamable-http",
        "protocolVersions": list(SUPPORTED_VERSIONS),
        "toolCount": len(tools),
        "tools": tools,
        "paymentFlow": {"mcp": list(MCP_FLOW), "http": list(HTTP_FLOW)},
        "errorCatalog": error_catalog_ref(catalog),
        "links": links(catalog),
    }


def mcp_server_card(catalog: Catalog, definitions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """/.well-known/mcp: what an MCP client needs before it connects."""
    tools = mcp_tools(catalog, definitions)
    server_info = {"name": NAME, "title": "satsgate", "version": __version__}
    return {
        **server_info,
        "description": SUMMARY,
        "serverInfo": server_info,
        "protocolVersion": SUPPORTED_VERSIONS[-1],
        "protocolVersions": list(SUPPORTED_VERSIONS),
        "transport": {"type": "streamable-http", "endpoint": MCP_PATH},
        "remotes": [{"type": "streamable-http", "url": catalog.url(MCP_PATH)}],
        "capabilities": {"tools": {"listChanged": False}},
        "authentication": {
            "required": False,
            "note": "No keys: paid tools take a paymentId from create_payment.",
        },
        "toolManifestVersion": MANIFEST_VERSION,
        "toolCount": len(tools),
        "tools": [
            {"name": tool["name"], "description": tool["description"], "paid": tool["paid"]}
            for tool in tools
        ],
        "documentation": catalog.url("/api/mcp/discovery"),
    }


def agent_card(catalog: Catalog) -> dict[str, Any]:
    """/.well-known/agent.json and agent-card.json: an A2A agent card, one skill per service."""
    protocols = payment_protocols(catalog.settings)
    skills = []
    for service in catalog.services:
        examples = [dumps(service["example"])] if service["example"] else []
        skills.append(
            {
                "id": service["id"],
                "name": service["name"],
                "description": (
                    f"{service['description']} Price: {price_text(service['pricing'])}. "
                    f"POST {service['endpoint']}."
                ),
                "tags": [service["category"], service["tool"], service["mode"]],
                "examples": examples,
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
                "endpoint": service["endpoint"],
                "method": "POST",
                "pricing": service["pricing"],
                "protocols": protocols,
                "available": service["available"],
            }
        )
    return {
        "protocolVersion": A2A_PROTOCOL_VERSION,
        "name": NAME,
        "description": SUMMARY,
        "url": catalog.base_url,
        "version": __version__,
        "provider": {"organization": NAME, "url": catalog.base_url},
        "documentationUrl": catalog.url("/llms.txt"),
        "capabilities": {"streaming": False, "pushNotifications": False},
        "securitySchemes": security_schemes(),
        "security": [{"L402": []}, {"Payment": []}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    }


def security_schemes() -> dict[str, Any]:
    """The two ways to send a paid credential (OpenAPI security schemes; A2A uses the same)."""
    return {
        "L402": {
            "type": "http",
            "scheme": "L402",
            "description": (
                "Authorization: L402 <macaroon>:<preimage>. The macaroon (standard base64) "
                "and the BOLT11 invoice come from the 402 challenge "
                '(WWW-Authenticate: L402 macaroon="...", invoice="..."); the preimage is the '
                "64 lowercase hex characters the wallet returns on paying. LSAT is accepted "
                "as the scheme name too."
            ),
        },
        "Payment": {
            "type": "http",
            "scheme": "Payment",
            "description": (
                "Authorization: Payment <base64url JSON>. The JSON is {challenge: {id, realm, "
                "method, intent, request, expires} echoed from the 402 challenge "
                '(WWW-Authenticate: Payment id="...", realm="...", method="lightning", '
                'intent="charge", request="...", expires="..."), payload: {preimage}}. '
                "A 2xx answer carries Payment-Receipt."
            ),
        },
    }


def search_document(catalog: Catalog, query: str, category: str | None) -> dict[str, Any]:
    """/api/discover?q=: services ranked by matches in slug, tool, title, category, description."""
    specs: Sequence[AnySpec] = catalog.specs
    if category:
        specs = [spec for spec in specs if spec.category == category]
    results = [
        {**catalog.by_slug[spec.slug], "score": score} for score, spec in search(specs, query)
    ]
    return {
        "query": query,
        "category": category,
        "count": len(results),
        "results": results,
        "categories": sorted({spec.category for spec in catalog.specs}),
    }
