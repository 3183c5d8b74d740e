"""Free discovery: every document that tells a client what satsgate sells and how to pay.

All of it is generated from the service registry and the settings, through
one function (:func:`describe`), so a new ServiceSpec appears in every
document with the same price and endpoint without any edit here.

Routes (all GET, free)::

    /api/l402/<slug>              one service, as a 402 naming its price and rails and
                                  no invoice (service_description; the route is
                                  web.operation_routes', which also serves the free forms)
    /.well-known/l402-services    satsgate's service manifest
    /.well-known/l402[.json]      Lightning Labs L402 discovery manifest
    /.well-known/mpp, /payment    MPP (Payment scheme) discovery
    /.well-known/mcp[.json]       MCP server card
    /.well-known/agent.json       A2A agent card (also agent-card.json)
    /llms.txt                     Markdown for language-model agents
    /api/mcp/discovery            MCP tool manifest and payment flow
    /api/discover?q=              ranked service search
    /api/openapi.json             OpenAPI 3.1.0, document version 0.3.0
    /api/languages                translation languages and prices

Documents are built on first request and kept as bytes: the registry, the
settings and the route table cannot change while the app runs, and the
BTC-pegged rate book (example prices) is checked on every request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.helpers import ETAG_ANY

from satsgate.config.settings import Settings
from satsgate.discovery import documents
from satsgate.discovery.describe import describe, price_text
from satsgate.discovery.documents import Catalog
from satsgate.discovery.languages import languages_document
from satsgate.discovery.llms import llms_txt
from satsgate.discovery.openapi import openapi_document
from satsgate.discovery.price_probe import price_headers
from satsgate.edge.http import dumps
from satsgate.engines import Engines
from satsgate.errors import ApiError, ErrorCode, envelope
from satsgate.lightning.backend import LightningBackend
from satsgate.mcp import MCP
from satsgate.payments import problems
from satsgate.services.catalog.models import CATEGORIES, list_models_document
from satsgate.services.catalog.rates import RateBook, Rates
from satsgate.services.registry import BY_SLUG, SERVICES

__all__ = ["DISCOVERY", "Discovery", "add_routes", "describe", "service_description"]

# Discovery documents carry no secrets: any origin may read them (the L402
# discovery draft asks for this so browser agents can use them).
_HEADERS = {"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=300"}


class Discovery:
    """The catalog of one app and its documents, each serialized once per rate book."""

    def __init__(
        self, settings: Settings, backend: LightningBackend, engines: Engines, rates: Rates
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.rates = rates  # the app's BTC rate book
        self._backend = backend
        self._pubkey: str | None = None
        self._catalog: Catalog | None = None
        self._rate_book: RateBook | None = None
        self._bodies: dict[str, Prepared] = {}

    @property
    def catalog(self) -> Catalog:
        """Rebuilt, and every kept document dropped, when the BTC-pegged rate book changes
        (at most hourly): example prices of pegged services move with it."""
        book = self.rates.book
        if self._catalog is None or book is not self._rate_book:
            self._catalog = Catalog(
                self.settings,
                SERVICES,
                tuple(describe(spec, self.settings, self.engines, book) for spec in SERVICES),
            )
            self._rate_book = book
            self._bodies.clear()
        return self._catalog

    async def node_pubkey(self) -> str:
        if self._pubkey is None:
            self._pubkey = (await self._backend.info()).pubkey
        return self._pubkey

    async def body(self, name: str, build: Callable[[Catalog], Awaitable[Any]]) -> Prepared:
        """Document ``name``, serialized once per rate book with its entity tag."""
        catalog = self.catalog  # first: a new rate book empties the kept bodies
        prepared = self._bodies.get(name)
        if prepared is None:
            doc = await build(catalog)
            prepared = Prepared.of((doc if isinstance(doc, str) else dumps(doc)).encode())
            self._bodies[name] = prepared
        return prepared


@dataclass(frozen=True)
class Prepared:
    """A document's bytes and their strong entity tag (a digest of exactly those bytes:
    equal tags, equal bodies)."""

    body: bytes
    etag: str

    @classmethod
    def of(cls, body: bytes) -> Prepared:
        return cls(body, hashlib.sha256(body).hexdigest()[:32])


DISCOVERY = web.AppKey("discovery", Discovery)

Builder = Callable[[Discovery, Catalog, web.Application], Awaitable[Any]]


def _respond(body: bytes, content_type: str = "application/json") -> web.Response:
    return web.Response(body=body, content_type=content_type, charset="utf-8", headers=_HEADERS)


def respond_prepared(
    request: web.Request, prepared: Prepared, content_type: str = "application/json"
) -> web.Response:
    """``prepared`` with its ETag, or 304 with no body when the request's If-None-Match
    names it (RFC 9110 13.1.2: weak comparison, ``*`` matches)."""
    asked = request.if_none_match
    if asked is not None and any(tag.value in (prepared.etag, ETAG_ANY) for tag in asked):
        return web.Response(status=304, headers={**_HEADERS, "ETag": f'"{prepared.etag}"'})
    resp = _respond(prepared.body, content_type)
    resp.etag = prepared.etag
    return resp


def _document(name: str, build: Builder, content_type: str = "application/json") -> Any:
    async def handler(request: web.Request) -> web.Response:
        discovery = request.app[DISCOVERY]
        prepared = await discovery.body(
            name, lambda catalog: build(discovery, catalog, request.app)
        )
        return respond_prepared(request, prepared, content_type)

    return handler


def _routes(app: web.Application) -> set[tuple[str, str]]:
    return {
        (route.method, route.resource.canonical) for route in app.router.routes() if route.resource
    }


async def _l402_services(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.l402_services(c)


async def _l402(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.l402_manifest(c, await d.node_pubkey())


async def _mpp(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.mpp_document(c)


def _mcp_tools(app: web.Application) -> list[dict[str, Any]]:
    """tools/list of this app's MCP endpoint: the documents describe the real thing."""
    endpoint = app.get(MCP)
    if endpoint is None:
        raise ApiError(ErrorCode.NOT_FOUND, "This node serves no MCP endpoint.")
    return endpoint.server.tools.definitions()


async def _mcp_card(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.mcp_server_card(c, _mcp_tools(app))


async def _mcp_discovery(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.mcp_discovery(c, _mcp_tools(app))


async def _agent_card(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return documents.agent_card(c)


async def _llms(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return llms_txt(c)


async def _openapi(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return openapi_document(c, _routes(app), await d.node_pubkey())


async def _languages(d: Discovery, c: Catalog, app: web.Application) -> Any:
    return languages_document(c, d.engines)


def service_description(app: web.Application, slug: str) -> web.Response:
    """The answer of ``GET /api/l402/<slug>`` (no free form matched): the service as
    :func:`describe` gives it, as a payment-required probe a crawler classifies.

    402 (503 with SERVICE_UNAVAILABLE when no engine serves it here, as HEAD says), the
    price headers of ``HEAD`` (price_probe), the error envelope and RFC 9457 members of
    every 402, and ``payment``: the rails and the request that gets a challenge (POST the
    JSON body). No WWW-Authenticate: a challenge needs an invoice, an invoice needs the
    request (its price follows the body), and a crawler's hit must cost the node nothing;
    so no invoice is made, nothing is written, and no token of the address's challenge
    limit is taken (the POST that makes the invoice is limited as always)."""
    discovery = app[DISCOVERY]
    service = discovery.catalog.by_slug.get(slug)
    spec = BY_SLUG.get(slug)
    if service is None or spec is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"No service {slug!r}.")
    base_url = discovery.settings.public_base_url
    headers = {**_HEADERS, **price_headers(spec, discovery.rates.book)}
    if not service["available"]:
        code, status = ErrorCode.SERVICE_UNAVAILABLE, 503
        message = "No engine serves this service on this node; nothing can be bought here."
        payment: dict[str, Any] = {}
    else:
        code, status = ErrorCode.PAYMENT_REQUIRED, 402
        message = (
            f"This call needs payment ({price_text(service['pricing'])}). POST its JSON "
            "request to this URL for the invoice and its challenges."
        )
        payment = {
            "payment": {
                "protocols": documents.payment_protocols(discovery.settings),
                "challengeRequest": {
                    "method": "POST",
                    "url": service["endpoint"],
                    "contentType": "application/json",
                    "body": service["example"],
                },
            },
            "suggestion": "POST a request like `payment.challengeRequest.body` (the schema is "
            "`input_schema`) to `payment.challengeRequest.url` without Authorization: the 402 "
            "to it carries the invoice and the L402, LSAT and Payment challenges.",
        }
    body = problems.problem_fields(code, status, message, base_url)
    body |= envelope(code, message) | service | payment
    headers["X-Error-Code"] = code
    headers["X-Problem-Type"] = body["type"]
    return web.Response(
        body=dumps(body).encode(),
        status=status,
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


async def models(request: web.Request) -> web.Response:
    """GET /api/l402/models (``?category=``): the model catalog, prepared once per rate
    book and category like the other documents (which models run here is fixed for the
    process: its engines are)."""
    category = request.query.get("category")
    if category is not None and category not in CATEGORIES:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"Unknown category {category!r}.",
            extra={"categories": list(CATEGORIES)},
        )
    discovery = request.app[DISCOVERY]

    async def build(catalog: Catalog) -> Any:
        return list_models_document(SERVICES, discovery.rates.book, discovery.engines, category)

    prepared = await discovery.body(f"models?category={category or ''}", build)
    return respond_prepared(request, prepared)


async def discover(request: web.Request) -> web.Response:
    doc = documents.search_document(
        request.app[DISCOVERY].catalog,
        request.query.get("q", ""),
        request.query.get("category") or None,
    )
    return _respond(dumps(doc).encode())


def add_routes(
    app: web.Application,
    settings: Settings,
    backend: LightningBackend,
    engines: Engines,
    rates: Rates,
) -> None:
    """Register every discovery route (GET, free) on ``app``; ``GET /api/l402/{slug}`` is
    web.operation_routes' (it answers service_description unless a free form matches)."""
    app[DISCOVERY] = Discovery(settings, backend, engines, rates)
    r = app.router
    r.add_get("/api/discover", discover)
    r.add_get("/api/l402/models", models)
    json_documents: dict[str, Builder] = {
        "/.well-known/l402-services": _l402_services,
        "/.well-known/l402": _l402,
        "/.well-known/l402.json": _l402,
        "/.well-known/mpp": _mpp,
        "/.well-known/payment": _mpp,
        "/.well-known/mcp": _mcp_card,
        "/.well-known/mcp.json": _mcp_card,
        "/.well-known/agent.json": _agent_card,
        "/.well-known/agent-card.json": _agent_card,
        "/api/mcp/discovery": _mcp_discovery,
        "/api/openapi.json": _openapi,
        "/api/languages": _languages,
    }
    for path, build in json_documents.items():
        r.add_get(path, _document(build.__name__, build))
    r.add_get("/llms.txt", _document("llms", _llms, "text/markdown"))
