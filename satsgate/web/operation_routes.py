"""The HTTP face of the free operations, and the explicit dispatch of /api/l402/{slug}.

Each operation with a path of its own gets its route. An operation that lives on a paid
service's path (``HttpRoute.on_service``: the AI call's confirmation and poll, the vote
listing) is a *form* of that path: ``POST /api/l402/{slug}`` and ``GET /api/l402/{slug}``
look the slug up in :class:`SlugRoutes`, built once from the registry and the
operations, which says per slug what answers: the forms whose ``when`` matches the
request first, else the paid call (POST) or the service description (GET). No route
depends on registration order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web
from pydantic import AliasChoices, BaseModel, ValidationError

from satsgate.appkeys import ENGINES, GATE, RATES, SETTINGS
from satsgate.discovery import DISCOVERY, service_description
from satsgate.discovery.price_probe import price_probe
from satsgate.edge.http import dumps, read_json
from satsgate.errors import ApiError, ErrorCode, invalid_params
from satsgate.operations.base import OPERATION_ENV, AnyOperation, HttpCall, dump
from satsgate.payments.http import handle_paid_call
from satsgate.services.base import ServiceSpec
from satsgate.services.catalog.routing import apply_path_model

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SLUG_PATH = "/api/l402/{slug}"


# -- one operation over HTTP ----------------------------------------------------------------


def query_names(model: type[BaseModel]) -> list[str]:
    """The query (or path) names a params model takes: field names and their aliases."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        names.append(name)
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names += [c for c in alias.choices if isinstance(c, str)]
        elif isinstance(alias, str):
            names.append(alias)
    return list(dict.fromkeys(names))


def read_query(request: web.Request, model: type[BaseModel]) -> dict[str, Any]:
    """The query and path parameters the model takes; others are ignored (cache busters
    are common), unless the model takes any (extra="allow"). Each given at most once."""
    if model.model_config.get("extra") == "allow":
        names: Iterable[str] = request.query.keys()
    else:
        names = query_names(model)
    query: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        values = request.query.getall(name, [])
        if len(values) > 1:
            raise ApiError(ErrorCode.L402_INVALID_PARAMS, f"Give {name} once.")
        if values:
            query[name] = values[0]
    fields = query_names(model)
    query.update((k, v) for k, v in request.match_info.items() if k in fields)
    return query


def validate(op: AnyOperation, raw: Any) -> BaseModel:
    example = op.http.example if op.http is not None else ""
    try:
        params: BaseModel = op.params.model_validate(raw)
    except ValidationError as exc:
        raise invalid_params(exc, op.name, example) from None
    return params


def respond(op: AnyOperation, body: Mapping[str, Any]) -> web.Response:
    resp = web.json_response(body, dumps=dumps)
    if op.http is not None:
        for name, value in op.http.headers.items():
            resp.headers[name] = value
    code = body.get("error_code")
    if isinstance(code, str) and code:  # a body carrying an envelope says so, as errors do
        resp.headers["X-Error-Code"] = code
    return resp


async def run(request: web.Request, op: AnyOperation, raw: Any) -> dict[str, Any]:
    """The operation's answer body, marked ``untrusted_output: true`` when it carries text
    from outside (``op.untrusted``), as the MCP face marks and fences the same answer."""
    params = validate(op, raw)
    call = HttpCall(request.headers.getall("Authorization", []))
    result = await op.handler(request.app[OPERATION_ENV], params, call)
    body = dump(result)
    if op.untrusted is not None and op.untrusted(result):
        body["untrusted_output"] = True
    return body


def body_limit(request: web.Request, op: AnyOperation) -> int:
    assert op.http is not None
    return min(op.http.max_body_bytes, request.app[SETTINGS].max_body_bytes)


def route_handler(op: AnyOperation) -> Handler:
    """The handler of an operation on its own path."""
    assert op.http is not None
    method = op.http.method

    async def handler(request: web.Request) -> web.StreamResponse:
        if method == "POST":
            raw = await read_json(request, body_limit(request, op))
        else:
            raw = read_query(request, op.params)
        return respond(op, await run(request, op, raw))

    handler.__name__ = op.name
    return handler


# -- /api/l402/{slug}: the paid call, the description, and the forms sharing the path -------


class SlugRoutes:
    """Per slug and method, who answers on ``/api/l402/{slug}``."""

    def __init__(
        self, services: Sequence[ServiceSpec[Any]], operations: Sequence[AnyOperation]
    ) -> None:
        by_slug = {spec.slug: spec for spec in services}
        self.services = by_slug
        forms: dict[tuple[str, str], list[AnyOperation]] = {}
        for op in operations:
            if op.http is not None and op.http.on_service is not None:
                if op.http.on_service not in by_slug:
                    continue  # its service is not served here
                forms.setdefault((op.http.method, op.http.on_service), []).append(op)
        self.post: dict[str, Handler] = {}
        self.get: dict[str, Handler] = {}
        for slug, spec in by_slug.items():
            post_forms = forms.get(("POST", slug), [])
            get_forms = forms.get(("GET", slug), [])
            self.post[slug] = _post_with_forms(spec, post_forms) if post_forms else _paid(spec)
            self.get[slug] = _get_with_forms(slug, get_forms) if get_forms else _describe(slug)

    async def post_call(self, request: web.Request) -> web.StreamResponse:
        handler = self.post.get(request.match_info["slug"])
        if handler is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"No service {request.match_info['slug']!r}.")
        return await handler(request)

    async def head_call(self, request: web.Request) -> web.StreamResponse:
        """The price probe: headers only, no invoice, nothing written."""
        spec = self.services.get(request.match_info["slug"])
        if spec is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"No service {request.match_info['slug']!r}.")
        return price_probe(spec, request.app[ENGINES], request.app[RATES].book)

    async def get_call(self, request: web.Request) -> web.StreamResponse:
        handler = self.get.get(request.match_info["slug"])
        if handler is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"No service {request.match_info['slug']!r}.")
        return await handler(request)


def _paid(spec: ServiceSpec[Any]) -> Handler:
    async def paid_call(request: web.Request) -> web.StreamResponse:
        return await handle_paid_call(request, request.app[GATE], spec)

    return paid_call


def _describe(slug: str) -> Handler:
    async def describe(request: web.Request) -> web.StreamResponse:
        return service_description(request.app, slug)

    return describe


def _post_with_forms(spec: ServiceSpec[Any], forms: Sequence[AnyOperation]) -> Handler:
    """The body is read once (with the paid call's limit): a form whose ``when`` matches
    it is served free, never an invoice; any other body is the paid call."""

    async def post(request: web.Request) -> web.StreamResponse:
        settings = request.app[SETTINGS]
        body = await read_json(request, min(spec.max_body_bytes, settings.max_body_bytes))
        if isinstance(body, dict):
            for op in forms:
                if op.http is not None and (op.http.when is None or op.http.when(body)):
                    return respond(op, await run(request, op, body))
        # The body stream can be read only once: the paid path gets the body parsed here.
        return await handle_paid_call(request, request.app[GATE], spec, lambda _reread: body)

    return post


def _get_with_forms(slug: str, forms: Sequence[AnyOperation]) -> Handler:
    """A form whose ``when`` matches the query answers (free); else the description."""

    async def get(request: web.Request) -> web.StreamResponse:
        for op in forms:
            route = op.http
            if route is None or (route.when is not None and not route.when(request.query)):
                continue
            body = await run(request, op, read_query(request, op.params))
            if route.with_description:
                description = request.app[DISCOVERY].catalog.by_slug.get(slug, {})
                body = {**description, **body}
            return respond(op, body)
        return service_description(request.app, slug)

    return get


def paid_call_with_path_model(by_slug: Mapping[str, ServiceSpec[Any]]) -> Handler:
    """/api/m/{service}/{model}: the path names the model; a body field wins."""

    async def handler(request: web.Request) -> web.StreamResponse:
        spec = by_slug.get(request.match_info["service"])
        if spec is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"No service {request.match_info['service']!r}.")
        model = request.match_info["model"]

        def with_model(body: Any) -> Any:
            return apply_path_model(body, model) if isinstance(body, dict) else body

        return await handle_paid_call(request, request.app[GATE], spec, with_model)

    return handler


def slugs_of(services: Sequence[ServiceSpec[Any]]) -> set[str]:
    return {spec.slug for spec in services}


def add_routes(
    app: web.Application,
    services: Sequence[ServiceSpec[Any]],
    operations: Sequence[AnyOperation],
) -> SlugRoutes:
    """The operations' own routes, the slug dispatch, and the paid path forms."""
    r = app.router
    for op in operations:
        route = op.http
        if route is None or route.on_service is not None:
            continue
        if route.method == "POST":
            r.add_post(route.path, route_handler(op))
        else:
            r.add_get(route.path, route_handler(op))
        if route.path.startswith("/api/l402/") and route.path[10:] in slugs_of(services):
            raise ValueError(f"{op.name}: {route.path} is a paid service's path; use on_service")
    slugs = SlugRoutes(services, operations)
    r.add_post(SLUG_PATH, slugs.post_call)
    r.add_get(SLUG_PATH, slugs.get_call, allow_head=False)
    r.add_head(SLUG_PATH, slugs.head_call)
    by_slug = {spec.slug: spec for spec in services}
    if "voice-bridge-open" in slugs.post:  # the spec's slash form of this slug
        r.add_post("/api/l402/voice-bridge/open", slugs.post["voice-bridge-open"])
    r.add_post("/api/m/{service}/{model}", paid_call_with_path_model(by_slug))
    return slugs
