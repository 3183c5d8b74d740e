"""Discovery documents over real HTTP: every registry service everywhere, one price and endpoint."""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any
from urllib.parse import urlencode

import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import Client
from openapi_spec_validator import validate
from pydantic import BaseModel, ValidationError

from satsgate.appkeys import RATES
from satsgate.discovery.describe import price_text, search
from satsgate.errors import CATALOG_VERSION, ApiError
from satsgate.payments.l402 import decode_macaroon
from satsgate.server.app import ENGINES
from satsgate.services.base import (
    Params,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
    sats_for_msat,
)
from satsgate.services.catalog import rates
from satsgate.services.catalog.pricing import MSAT, TRANSLATE_MSAT_PER_CHAR
from satsgate.services.catalog.rates import FALLBACK, RateBook, Snapshot
from satsgate.services.inputs.params import ServiceParams
from satsgate.services.registry import SERVICES
from tests.conftest import ThreadedServer
from tests.mcp.test_mcp import mcp_url, structured

JSON_DOCUMENTS = (
    "/.well-known/l402-services",
    "/.well-known/l402",
    "/.well-known/l402.json",
    "/.well-known/mpp",
    "/.well-known/payment",
    "/.well-known/mcp",
    "/.well-known/mcp.json",
    "/.well-known/agent.json",
    "/.well-known/agent-card.json",
    "/api/mcp/discovery",
    "/api/discover",
    "/api/openapi.json",
    "/api/languages",
)


async def get_json(client: httpx.AsyncClient, path: str) -> Any:
    resp = await client.get(path)
    assert resp.status_code == 200, (path, resp.text)
    return resp.json()


# What GET /api/l402/<slug> adds to the description as a payment-required probe.
PROBE_FIELDS = frozenset(
    {"type", "title", "status", "detail", "error", "error_code", "suggestion", "payment"}
)


async def description(client: httpx.AsyncClient, slug: str) -> dict[str, Any]:
    """GET /api/l402/<slug> without its probe members: 402 (503 when no engine serves the
    service here), or 200 where a free form answers the bare GET (the vote listing)."""
    resp = await client.get(f"/api/l402/{slug}")
    doc = resp.json()
    if resp.status_code != 200:
        assert resp.status_code == (402 if doc["available"] else 503), (slug, resp.text)
    return {key: value for key, value in doc.items() if key not in PROBE_FIELDS}


async def described(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """GET /api/l402/<slug> of every registry service: the reference the documents must match.

    GET /api/l402/vote also lists the planned services (the spec's vote listing); that
    list is not part of the service's description.
    """
    docs = {spec.slug: await description(client, spec.slug) for spec in SERVICES}
    planned = docs["vote"].pop("services")
    assert isinstance(planned, list) and planned
    return docs


async def first_challenge(client: httpx.AsyncClient) -> httpx.Response:
    """The 402 for the example of the first service whose example can be priced here."""
    for doc in (await described(client)).values():
        if doc["available"]:
            resp = await client.post(doc["endpoint"], json=doc["example"])
            if resp.status_code == 402:
                return resp
    raise AssertionError("no service example gets a 402 challenge")


async def test_describe_is_built_from_the_registry(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    for spec in SERVICES:
        doc = await description(client, spec.slug)
        assert doc["id"] == spec.slug
        assert doc["name"] == spec.title
        assert doc["tool"] == spec.tool_name
        assert doc["category"] == spec.category
        assert doc["endpoint"] == f"{server.url}/api/l402/{spec.slug}"
        assert doc["method"] == "POST"
        assert doc["mode"] == spec.mode
        assert doc["input_schema"] == spec.params.model_json_schema()
        assert doc["failure_codes"] == list(spec.failure_codes)
        assert doc["example"] == dict(spec.example)
        assert doc["available"] is spec.is_available(server.app[ENGINES])
        price, shape = doc["pricing"], spec.price_shape
        assert (price["model"], price["unit"]) == (shape.model, shape.unit)
        assert price["minSats"] == sats_for_msat(shape.minimum_msat(FALLBACK)) >= 1
        assert price.get("rateBy", []) == list(shape.rate_by)
        assert price.get("btcPegged", False) is shape.btc_pegged
        if shape.estimate is None:
            assert "estimate" not in price
        else:
            assert price["estimate"] == f"{server.url}/api/estimate-cost?service={shape.estimate}"
        try:
            params = spec.parse(dict(spec.example), FALLBACK)
            if isinstance(params, ServiceParams):
                params.checked()
            example_sats: int | None = spec.quote_sats(params, FALLBACK)
        except (ValidationError, ApiError):
            example_sats = None  # placeholders in the example ("<base64 PDF>")
        assert price["amountSats"] >= price["minSats"]
        if price["model"] == "flat":
            assert price["unit"] == "per call" and "amountFor" not in price
            assert price["amountSats"] == price["minSats"]
            assert example_sats in (None, price["amountSats"])
        elif example_sats is not None:
            assert (price["amountFor"], price["amountSats"]) == ("example", example_sats)
        else:
            assert (price["amountFor"], price["amountSats"]) == ("minimum", price["minSats"])

    resp = await client.get("/api/l402/no-such-service")
    assert resp.status_code == 404
    assert resp.headers["X-Error-Code"] == "NOT_FOUND"


async def test_described_price_is_the_price_the_402_charges(client: httpx.AsyncClient) -> None:
    checked = 0
    for slug, doc in (await described(client)).items():
        if not doc["available"] or doc["pricing"].get("amountFor") == "minimum":
            continue
        resp = await client.post(f"/api/l402/{slug}", json=doc["example"])
        if resp.status_code == 400:  # an example with placeholders ("<base64 PDF>")
            assert resp.headers["X-Error-Code"] == "L402_INVALID_PARAMS"
            continue
        if resp.status_code == 503:  # the example's model (or language) is not offered here
            assert resp.headers["X-Error-Code"] == "SERVICE_UNAVAILABLE"
            error = resp.json()["error"]
            # A model no engine serves, or a target the local engine does not translate
            # into (translate-rare-language's example, Tok Pisin, with Apertium).
            assert "is not offered on this node" in error or "not into" in error, error
            continue
        assert resp.status_code == 402, resp.text
        assert resp.json()["amountSats"] == doc["pricing"]["amountSats"], slug
        checked += 1
    assert checked >= 1


async def test_every_service_is_in_every_document_with_one_price_and_endpoint(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ref = await described(client)
    price = {slug: doc["pricing"] for slug, doc in ref.items()}
    amount = {slug: p["amountSats"] for slug, p in price.items()}
    endpoint = {slug: doc["endpoint"] for slug, doc in ref.items()}
    tool = {slug: doc["tool"] for slug, doc in ref.items()}
    slugs = list(ref)

    manifest = await get_json(client, "/.well-known/l402-services")
    assert [s["id"] for s in manifest["services"]] == slugs
    for entry in manifest["services"]:
        assert entry == ref[entry["id"]]

    l402 = await get_json(client, "/.well-known/l402")
    assert [s["name"] for s in l402["services"]] == slugs
    for entry in l402["services"]:
        (resource,) = entry["resources"]
        assert server.url + resource["path"] == endpoint[entry["name"]]
        assert resource["method"] == "POST"
        assert resource["pricing"] == l402_terms(price[entry["name"]])

    mpp = await get_json(client, "/.well-known/mpp")
    assert [e["id"] for e in mpp["endpoints"]] == slugs
    for entry in mpp["endpoints"]:
        assert entry["url"] == endpoint[entry["id"]]
        assert {k: entry[k] for k in MPP_TERMS} == mpp_terms(price[entry["id"]])

    mcp = await get_json(client, "/api/mcp/discovery")
    paid = {t["service"]: t for t in mcp["tools"] if t["paid"]}
    assert list(paid) == slugs
    for slug, entry in paid.items():
        assert entry["name"] == tool[slug]
        assert entry["endpoint"] == endpoint[slug]
        assert entry["pricing"] == ref[slug]["pricing"]
        assert "paymentId" in entry["inputSchema"]["required"]

    card = await get_json(client, "/.well-known/mcp")
    assert {t["name"] for t in card["tools"] if t["paid"]} == set(tool.values())

    agent = await get_json(client, "/.well-known/agent.json")
    assert agent == await get_json(client, "/.well-known/agent-card.json")
    assert [s["id"] for s in agent["skills"]] == slugs
    for skill in agent["skills"]:
        assert skill["endpoint"] == endpoint[skill["id"]]
        assert skill["pricing"] == ref[skill["id"]]["pricing"]
        assert skill["method"] == "POST" and skill["protocols"] == ["L402", "MPP"]
        assert endpoint[skill["id"]] in skill["description"]

    found = await get_json(client, "/api/discover")
    assert [r["id"] for r in found["results"]] == slugs
    assert all(r["endpoint"] == endpoint[r["id"]] for r in found["results"])
    assert all(r["pricing"] == price[r["id"]] for r in found["results"])

    openapi = await get_json(client, "/api/openapi.json")
    base = openapi["servers"][0]["url"]
    for slug in slugs:
        path = f"/api/l402/{slug}"
        operation = openapi["paths"][path]["post"]
        assert base + path == endpoint[slug]
        assert operation["operationId"] == tool[slug]
        info = operation["x-payment-info"]
        assert {k: info[k] for k in MPP_TERMS} == mpp_terms(price[slug])
        assert operation["x-l402-pricing"] == l402_terms(price[slug])
        assert f"({price_text(price[slug])})" in operation["summary"]

    llms = (await client.get("/llms.txt")).text
    for slug in slugs:
        (line,) = [
            ln
            for ln in llms.splitlines()
            if ln.startswith("- [") and f"`POST {endpoint[slug]}`" in ln
        ]
        assert f": {price_text(price[slug])}. " in line, line
        assert re.search(rf"\b{amount[slug]} sats?\b", line), line
        if price[slug]["model"] != "flat":
            assert price[slug]["unit"] in line
            assert re.search(rf"from {price[slug]['minSats']} sats?\b", line), line


# The price terms every document carries, from the one description of each service.
MPP_TERMS = ("pricingMode", "priceModel", "unit", "amount", "minAmount")


def mpp_terms(price: dict[str, Any]) -> dict[str, str]:
    return {
        "pricingMode": "fixed" if price["model"] == "flat" else "dynamic",
        "priceModel": price["model"],
        "unit": price["unit"],
        "amount": str(price["amountSats"]),
        "minAmount": str(price["minSats"]),
    }


def l402_terms(price: dict[str, Any]) -> dict[str, Any]:
    if price["model"] == "flat":
        return {"model": "fixed", "price_msat": price["amountSats"] * MSAT}
    terms = {
        "model": "dynamic",
        "shape": price["model"],
        "unit": price["unit"],
        "min_price_msat": price["minSats"] * MSAT,
    }
    if price["amountFor"] == "example":
        terms["example_price_msat"] = price["amountSats"] * MSAT
    return terms


# Estimate queries for each service's example request, and for its cheapest request: the
# estimate must quote what discovery reports (amountSats and minSats).
EXAMPLE_ESTIMATES: dict[str, dict[str, str]] = {
    "generate-image": {},
    "translate-text": {"chars": "12", "targetLanguage": "es"},
    "text-to-speech": {"chars": "20", "model": "33"},
    "generate-music": {"seconds": "30"},
    "generate-video": {"seconds": "5"},
    "send-email": {"recipients": "1"},
    "send-sms": {"to": "+14155550123"},
    "call": {"to": "+14155550123", "minutes": "1"},
    "ai-call": {"to": "+14155550123", "minutes": "3"},
}
MINIMUM_ESTIMATES: dict[str, dict[str, str]] = {
    "generate-image": {"model": "standard"},
    "extract-document": {"pages": "1"},
    "extract-receipt": {"pages": "1"},
    "translate-text": {"chars": "1"},
    "translate-epub": {"chars": "1", "targetLanguage": "es"},
    "text-to-speech": {"chars": "1", "model": "global"},
    "transcribe-audio": {"minutes": "0.5"},
    "transcribe-translate": {"minutes": "0.5"},
    "epub-audiobook": {"chars": "1"},
    "generate-music": {"seconds": "15"},
    "generate-video": {"seconds": "3"},
    "animate-image": {"seconds": "3"},
    "send-email": {},
    "send-sms": {"to": "+14155550123"},
    "call": {"to": "+14155550123", "minutes": "1"},
    "ai-call": {"to": "+14155550123", "minutes": "1"},
}


async def test_estimates_quote_what_discovery_reports(client: httpx.AsyncClient) -> None:
    ref = await described(client)
    estimated = {slug for slug, doc in ref.items() if "estimate" in doc["pricing"]}
    flat = {slug for slug, doc in ref.items() if doc["pricing"]["model"] == "flat"}
    assert estimated - flat == set(MINIMUM_ESTIMATES)
    assert {s for s, doc in ref.items() if doc["pricing"].get("amountFor") == "example"} & (
        estimated
    ) == set(EXAMPLE_ESTIMATES)
    for slug in estimated:
        price = ref[slug]["pricing"]
        cases = [(MINIMUM_ESTIMATES.get(slug, {}), price["minSats"])]
        if slug in EXAMPLE_ESTIMATES:
            cases.append((EXAMPLE_ESTIMATES[slug], price["amountSats"]))
        for query, sats in cases:
            resp = await client.get(f"{price['estimate']}&{urlencode(query)}")
            assert resp.status_code == 200, (slug, resp.text)
            quote = resp.json()
            assert (quote["amountSats"], quote["unit"]) == (sats, price["unit"]), (slug, query)
            assert resp.headers["X-Error-Code"] == "L402_ESTIMATE_ONLY"


async def test_model_catalog_lists_the_prices_services_charge(client: httpx.AsyncClient) -> None:
    """/api/l402/models against discovery: a model's listed price is what a call on it costs
    on the first service that names it (flat price, tier price, or the price of one unit)."""
    ref = await described(client)
    models = {m["id"]: m for m in (await get_json(client, "/api/l402/models"))["models"]}
    home: dict[int, str] = {}
    for spec in SERVICES:
        for model_id in spec.model_ids:
            home.setdefault(model_id, spec.slug)
    for model_id, listed in models.items():
        if model_id not in home:  # a catalog model no service here uses: no price
            assert listed["priceSats"] is None and listed["priceNote"], model_id
            continue
        price = ref[home[model_id]]["pricing"]
        tiers = {t["modelId"]: t["minSats"] for t in price.get("tiers", [])}
        if price["model"] == "flat":
            expected: int | None = price["amountSats"]
        elif price["model"] == "per_tier":
            expected = tiers[model_id]
        elif price["model"] in ("per_page", "per_pass", "per_recipient"):
            expected = price["minSats"]  # the listed price is the price of one unit
        else:
            expected = None
            assert listed["priceNote"], model_id  # how it is computed, in words
        assert listed["priceSats"] == listed["sats"] == expected, (model_id, home[model_id])
        assert listed["pricing"] == ("dynamic" if expected is None else "fixed"), model_id


async def test_models_and_services_say_whether_they_run_here(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """A model runs here when a service naming it can run and its engine serves it: the
    catalog says so, says why not, and never marks a model that cannot run as default.
    The MCP tools answer the same."""
    ref = await described(client)
    engines = server.app[ENGINES]
    models = {m["id"]: m for m in (await get_json(client, "/api/l402/models"))["models"]}
    runs = {
        model_id
        for spec in SERVICES
        if spec.unavailable_reason(engines) is None
        for model_id in spec.model_ids
        if spec.engine is None or engines.serves_model(spec.engine, model_id)
    }
    assert runs and set(models) - runs, "the test node must run some models and not others"
    for model_id, listed in models.items():
        assert listed["available"] is (model_id in runs), model_id
        if model_id in runs:
            assert "unavailableReason" not in listed, model_id
        else:
            assert listed["unavailableReason"], model_id
            assert listed["isDefault"] is False, model_id
    # Image generation has no provider on the test node: its default model is no default.
    image = models[16]
    assert image["available"] is False and image["isDefault"] is False
    assert (
        "no engine configured on this node (no provider configured)" in (image["unavailableReason"])
    )
    assert models[53]["available"] is True and models[53]["isDefault"] is False
    for slug, doc in ref.items():
        assert (doc["unavailable_reason"] is None) is doc["available"], slug
    assert "no provider configured" in ref["generate-image"]["unavailable_reason"]
    async with Client(mcp_url(server)) as mcp:
        listed = structured(await mcp.call_tool("list_models", {"category": "image"}))
        assert {m["id"]: m for m in listed["models"]}[16] == image
        priced = structured(await mcp.call_tool("get_model_pricing", {"modelId": 16}))
        assert priced["available"] is False and priced["isDefault"] is False


def test_a_changed_price_changes_every_published_document() -> None:
    """A service's price lives on its ServiceSpec: give render-card another flat price and
    discovery, the L402 manifest, OpenAPI, llms.txt, the Nostr announcement, the model
    catalog, the estimator and the MCP tool description all show it, and none the old one."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from satsgate.config.settings import Settings
    from satsgate.discovery.describe import describe
    from satsgate.discovery.documents import Catalog, l402_manifest, l402_services
    from satsgate.discovery.llms import llms_txt
    from satsgate.discovery.openapi import openapi_document
    from satsgate.engines import CpuRunner
    from satsgate.mcp import tools
    from satsgate.nostr.announcement import listing
    from satsgate.server.app import node_engines
    from satsgate.services.base import FlatPrice
    from satsgate.services.catalog.models import list_models_document
    from satsgate.services.catalog.pricing import estimate, estimators

    old = next(s for s in SERVICES if s.slug == "render-card")
    assert isinstance(old.price_msat, FlatPrice) and old.model_ids == (53,)
    old_sats, new_sats = old.price_msat.msat // MSAT, 1234
    new = replace(old, price_msat=FlatPrice.of_sats(new_sats, old.price_msat.estimate))
    services = tuple(new if s is old else s for s in SERVICES)
    settings = Settings(base_url="https://pay.example.com")
    with ThreadPoolExecutor(max_workers=1) as pool:
        engines = node_engines(settings, CpuRunner(pool, 1.0))
    catalog = Catalog(
        settings, services, tuple(describe(s, settings, engines, FALLBACK) for s in services)
    )

    listed = catalog.by_slug["render-card"]
    assert (listed["pricing"]["amountSats"], listed["pricing"]["minSats"]) == (new_sats,) * 2
    assert not re.search(rf"\b{old_sats} sats?\b", listed["description"])
    manifest = next(s for s in l402_services(catalog)["services"] if s["id"] == "render-card")
    assert manifest["pricing"]["amountSats"] == new_sats
    l402 = l402_manifest(catalog, "02" + "ab" * 32)
    (resource,) = [
        r for s in l402["services"] for r in s["resources"] if r["path"].endswith("/render-card")
    ]
    assert resource["pricing"]["price_msat"] == new_sats * MSAT
    operation = openapi_document(catalog, set(), "02" + "ab" * 32)["paths"][
        "/api/l402/render-card"
    ]["post"]
    assert f"{new_sats} sats per call" in operation["summary"]
    assert not re.search(rf"\b{old_sats} sats?\b", operation["description"])
    llms = next(line for line in llms_txt(catalog).splitlines() if "/render-card`" in line)
    assert f"{new_sats} sats per call" in llms
    assert not re.search(rf"\b{old_sats} sats?\b", llms)
    assert listed["available"]  # the Nostr announcement prices the services served here
    assert ("render-card", new_sats) in listing(catalog).prices
    (model,) = [
        m for m in list_models_document(services, FALLBACK, engines)["models"] if m["id"] == 53
    ]
    assert model["priceSats"] == new_sats
    quote = estimate(estimators(services), "render-card", {}, FALLBACK)
    assert quote["amountSats"] == new_sats
    assert f"Price: {new_sats} sats;" in tools.describe(new, True, FALLBACK)


async def test_discovery_content_types_and_cors(client: httpx.AsyncClient) -> None:
    for path in JSON_DOCUMENTS:
        resp = await client.get(path)
        assert resp.status_code == 200, path
        assert resp.headers["Content-Type"].startswith("application/json"), path
        assert resp.headers["Access-Control-Allow-Origin"] == "*", path
        json.loads(resp.content)
    llms = await client.get("/llms.txt")
    assert llms.status_code == 200
    assert llms.headers["Content-Type"].split(";")[0] in ("text/plain", "text/markdown")
    assert llms.text.startswith("# satsgate\n")
    for section in (
        "## How to pay over HTTP",
        "## How to pay over MCP",
        "## Services",
        "## Errors",
    ):
        assert section in llms.text
    assert "/api/error-codes" in llms.text and "`PAYMENT_ALREADY_USED`" in llms.text
    assert (await get_json(client, "/.well-known/l402")) == await get_json(
        client, "/.well-known/l402.json"
    )


async def test_openapi_document_validates_and_covers_paid_and_free_endpoints(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    doc = await get_json(client, "/api/openapi.json")
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["version"] == "0.3.0"
    assert doc["info"]["x-tool-manifest-version"] == "1.0.0"
    assert doc["info"]["x-error-catalog-version"] == CATALOG_VERSION
    assert "#/$defs/" not in json.dumps(doc)  # every model ref points into components

    schemes = doc["components"]["securitySchemes"]
    assert schemes["L402"]["type"] == "http" and schemes["L402"]["scheme"] == "L402"
    assert "<macaroon>:<preimage>" in schemes["L402"]["description"]
    assert schemes["Payment"]["type"] == "http" and schemes["Payment"]["scheme"] == "Payment"
    assert "base64url" in schemes["Payment"]["description"]

    schemas = doc["components"]["schemas"]
    for spec in SERVICES:
        post = doc["paths"][f"/api/l402/{spec.slug}"]["post"]
        assert post["x-available"] is spec.is_available(server.app[ENGINES])
        assert post["security"] == [{"L402": []}, {"Payment": []}]
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.removeprefix("#/components/schemas/") in schemas
        assert ("202" if spec.mode == "job" else "200") in post["responses"]
        assert "WWW-Authenticate" in post["responses"]["402"]["headers"]
        error = post["responses"]["4XX"]
        assert error["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorEnvelope"
        }
        for code in spec.failure_codes:
            assert code in post["x-error-codes"]
        assert "L402_INVALID_PARAMS" in error["description"]
        # A used credential is a 402 with a fresh challenge on a paid call, not a 403.
        assert "PAYMENT_ALREADY_USED" not in error["description"]
        assert "PAYMENT_ALREADY_USED" in post["responses"]["402"]["description"]

    for path in (
        "/api/health",
        "/api/error-codes",
        "/api/l402/models",
        "/api/estimate-cost",
        "/api/openapi.json",
        "/api/discover",
        "/api/mcp/discovery",
        "/.well-known/l402-services",
        "/.well-known/agent.json",
        "/llms.txt",
    ):
        assert doc["paths"][path]["get"]["security"] == [], path
    assert doc["paths"]["/llms.txt"]["get"]["responses"]["200"]["content"] == {
        "text/markdown": {"schema": {"type": "string"}}
    }
    # Documented only because it exists: every free GET without required parameters answers
    # (a paid service's bare GET: its description as a 402, or 503 where nothing serves it).
    described = 0
    for path, item in doc["paths"].items():
        get = item.get("get")
        if get is None or any(p["required"] for p in get.get("parameters", [])):
            continue
        resp = await client.get(path)
        if "402" in get["responses"]:
            assert resp.status_code in (402, 503), (path, resp.status_code)
            assert resp.json()["available"] is (resp.status_code == 402)
            described += 1
        else:
            assert resp.status_code == 200, (path, resp.status_code)
    assert described == len(SERVICES) - 1  # all but the vote, whose GET lists the votes


async def test_l402_manifest_names_this_node_and_the_caveats_it_mints(
    client: httpx.AsyncClient,
) -> None:
    manifest = await get_json(client, "/.well-known/l402")
    health = await get_json(client, "/api/health")
    assert manifest["version"] == "1.0"
    assert manifest["provider"]["node_pubkey"] == health["node_pubkey"]
    assert "msat" in manifest["currencies"]
    assert manifest["payment_methods"] == ["bolt11"]
    assert manifest["macaroon_versions"] == [0]

    challenge = await first_challenge(client)
    minted = decode_macaroon(base64.b64decode(challenge.json()["macaroon"]))
    conditions = {caveat.partition("=")[0] for caveat in minted.caveats}
    assert conditions and conditions <= set(manifest["caveats"])


async def test_mpp_document_realm_is_the_challenge_realm(client: httpx.AsyncClient) -> None:
    mpp = await get_json(client, "/.well-known/mpp")
    assert mpp["version"] == 1
    assert mpp["methods"]["lightning"]["intents"] == ["charge", "session"]
    assert mpp == await get_json(client, "/.well-known/payment")
    resp = await first_challenge(client)
    payment = next(v for v in resp.headers.get_list("WWW-Authenticate") if v.startswith("Payment "))
    realm = re.search(r'realm="([^"]*)"', payment)
    assert realm is not None and realm.group(1) == mpp["realm"]
    assert re.search(r'method="lightning"', payment) and re.search(r'intent="charge"', payment)


async def mcp_tools_list(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    resp = await client.post(
        "/api/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["result"]["tools"])


async def test_mcp_documents_describe_the_live_tools_list(client: httpx.AsyncClient) -> None:
    manifest = await get_json(client, "/api/mcp/discovery")
    card = await get_json(client, "/.well-known/mcp")
    catalog = await get_json(client, "/api/error-codes")
    live = await mcp_tools_list(client)
    assert manifest["version"] == "1.0.0"
    assert manifest["errorCatalog"]["version"] == catalog["version"] == CATALOG_VERSION
    assert manifest["endpoint"].endswith("/api/mcp")
    assert [t["name"] for t in manifest["tools"]] == [t["name"] for t in live]
    for listed, tool in zip(manifest["tools"], live, strict=True):
        assert listed["inputSchema"] == tool["inputSchema"]
        assert listed["paid"] is (tool["name"] in {s.tool_name for s in SERVICES})
    assert manifest["toolCount"] == len(live) == card["toolCount"]
    assert [t["name"] for t in card["tools"]] == [t["name"] for t in live]
    assert card["transport"] == {"type": "streamable-http", "endpoint": "/api/mcp"}
    assert card["protocolVersions"] == ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
    assert {"create_payment", "check_payment_status"} <= {t["name"] for t in live}
    assert len(manifest["paymentFlow"]["mcp"]) == 3


async def test_discover_ranks_and_filters(client: httpx.AsyncClient) -> None:
    for spec in SERVICES:
        for query in (spec.slug, spec.tool_name):
            found = await get_json(client, f"/api/discover?q={query}")
            assert found["results"][0]["id"] == spec.slug, (query, found["results"][0]["id"])
            scores = [r["score"] for r in found["results"]]
            assert scores == sorted(scores, reverse=True)
    none = await get_json(client, "/api/discover?q=zzqxj")
    assert none["count"] == 0 and none["results"] == []
    category = SERVICES[0].category
    only = await get_json(client, f"/api/discover?category={category}")
    assert only["count"] == sum(1 for s in SERVICES if s.category == category)
    assert {r["category"] for r in only["results"]} == {category}


class _Nothing(Params):
    pass


async def _never(_ctx: ServiceContext, _params: BaseModel) -> ServiceResult:
    raise AssertionError("not called")


def _spec(slug: str, title: str, category: str, description: str) -> ServiceSpec[Any]:
    return ServiceSpec(
        slug=slug,
        tool_name=slug.replace("-", "_"),
        category=category,
        title=title,
        description=description,
        params=_Nothing,
        price_msat=lambda _p, _book: MSAT,
        handler=_never,
    )


def test_search_weights_name_over_category_over_description() -> None:
    in_slug = _spec("voice-call", "Phone call", "telco", "Place a call.")
    in_category = _spec("send-sms", "Text message", "voice", "An SMS.")
    in_text = _spec("fax", "Fax", "telco", "Fax a document; no voice involved.")
    unrelated = _spec("render-card", "Card", "utility", "A picture.")
    ranked = search([in_text, unrelated, in_category, in_slug], "voice")
    assert [spec.slug for _, spec in ranked] == ["voice-call", "send-sms", "fax"]
    exact = search(
        [_spec("speech-to-text", "S", "x", ""), _spec("text-to-speech", "T", "x", "")],
        "text-to-speech",
    )
    assert exact[0][1].slug == "text-to-speech"
    assert [s.slug for _, s in search([in_text, unrelated], "")] == ["fax", "render-card"]


async def test_languages_lists_every_language_with_its_engine_and_price(
    client: httpx.AsyncClient,
) -> None:
    doc = await get_json(client, "/api/languages")
    translation = {entry["code"]: entry for entry in doc["translation"]}
    assert len(translation) == 119
    assert {entry["engine"] for entry in translation.values()} == {"standard", "routed"}
    standard = translation["de"]
    assert standard["engine"] == "standard" and standard["name"] == "German"
    assert standard["msatPerChar"] == TRANSLATE_MSAT_PER_CHAR
    assert standard["transcription"] is True and translation["sw"]["transcription"] is False
    routed = next(e for e in translation.values() if e["engine"] == "routed")
    assert routed["msatPerChar"] > standard["msatPerChar"]
    engines = {engine["engine"]: engine for engine in doc["engines"]}
    assert engines["standard"]["languages"] + engines["routed"]["languages"] == 119
    assert engines["rare"]["languages"] == len(doc["rare"]) > 0
    assert all(entry["chrF"] is None or entry["chrF"] > 0 for entry in doc["translation"])
    assert len(doc["transcription"]) == 13
    # The estimate endpoint prices a standard-engine text at the listed rate.
    chars = 250_000
    estimate = await client.get(doc["estimate"].replace("chars=1000", f"chars={chars}"))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["amountMsat"] == chars * standard["msatPerChar"]


async def _telco_listings(client: httpx.AsyncClient) -> list[str]:
    """The telco model's price note (/api/l402/models) and send_sms's MCP description."""
    models = (await get_json(client, "/api/l402/models?category=telco"))["models"]
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    tools = (await client.post("/api/mcp", json=rpc)).json()["result"]["tools"]
    sms_tool = next(t for t in tools if t["name"] == "send_sms")
    return [next(m for m in models if m["id"] == 20)["priceNote"], sms_tool["description"]]


async def test_example_prices_follow_the_btc_rate_book(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = await described(client)
    manifest_before = await get_json(client, "/.well-known/l402-services")
    app_rates = server.app[RATES]  # this app's rate book
    original = app_rates.book
    # BTC at half the reference price: every fiat-pegged price doubles (factor 2).
    doubled = RateBook((Snapshot(rates.REFERENCE_BTC_USD / 2, time.time(), "test"),))
    estimate = "/api/estimate-cost?service=sms&to=%2B14155550123"
    sms_before = (await get_json(client, estimate))["amountSats"]
    telco_before = await _telco_listings(client)
    models_tag = (await client.get("/api/l402/models")).headers["ETag"]
    app_rates.install(doubled)
    try:
        # A new rate book is a new catalog body: the old tag no longer matches it.
        refreshed = await client.get("/api/l402/models", headers={"If-None-Match": models_tag})
        assert refreshed.status_code == 200 and refreshed.headers["ETag"] != models_tag
        after = await described(client)
        manifest_after = await get_json(client, "/.well-known/l402-services")
        # The estimate, the model catalog and the MCP tool list read the same book.
        assert (await get_json(client, estimate))["amountSats"] == 2 * sms_before
        telco_after = await _telco_listings(client)
    finally:
        app_rates.install(original)
    sms = after["send-sms"]["pricing"]["minSats"]
    assert all(f"from {sms} sats" in text for text in telco_after), telco_after
    assert all(f"from {sms} sats" not in text for text in telco_before), telco_before
    moved = [s for s in before if before[s]["pricing"] != after[s]["pricing"]]
    if not moved:
        pytest.skip("no BTC-pegged service in the registry")
    for slug in moved:
        old, new = before[slug]["pricing"]["amountSats"], after[slug]["pricing"]["amountSats"]
        assert old < new <= 2 * old + 1, (slug, old, new)
    assert all(before[s]["pricing"].get("btcPegged") for s in moved)
    assert manifest_after["services"] == list(after.values()) != manifest_before["services"]
    assert await described(client) == before  # the old rates, the old documents


@pytest.mark.parametrize("path", ["/.well-known/l402-services", "/api/openapi.json", "/llms.txt"])
async def test_documents_are_stable_between_requests(client: httpx.AsyncClient, path: str) -> None:
    first, second = await client.get(path), await client.get(path)
    assert first.content == second.content


PREPARED = (
    *(p for p in JSON_DOCUMENTS if p != "/api/discover"),
    "/llms.txt",
    "/api/l402/models",
    "/api/l402/models?category=image",
)


@pytest.mark.parametrize("path", PREPARED)
async def test_prepared_documents_carry_an_etag_and_answer_304(
    client: httpx.AsyncClient, path: str
) -> None:
    """A document served from its prepared body names it by a strong ETag; a client that
    sends it back (exactly, weakly, or ``*``) gets 304 and no body; another tag, the body."""
    first = await client.get(path)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert etag.startswith('"') and len(etag) == 34
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = await client.get(path, headers={"If-None-Match": sent})
        assert again.status_code == 304, sent
        assert again.content == b"" and again.headers["ETag"] == etag
    other = await client.get(path, headers={"If-None-Match": '"0123456789abcdef"'})
    assert other.status_code == 200 and other.content == first.content


# -- what 402 directories crawl (issue 34) ---------------------------------------------------

# The discovery document's shape as the 402 directories' crawler reads it
# (taskhawk-systems/402-crawler-spec: the crawler fetches /.well-known/mpp, merges each
# resource's url, then GETs it and reads the 402). Written here from that repository's
# description and the crawler author's own published /.well-known/mpp: its schema file
# (schemas/mpp-discovery.schema.json) could not be read from this machine, so this is our
# writing of the constraints a crawler needs, not a copy of it.
CRAWLER_MPP_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["protocol", "version", "scheme", "methods", "resources"],
    "properties": {
        "protocol": {"const": "mpp"},
        "scheme": {"const": "Payment"},
        "spec": {"type": "string", "format": "uri"},
        "provider": {
            "type": "object",
            "required": ["name", "url"],
            "properties": {"name": {"type": "string"}, "url": {"type": "string"}},
        },
        "payment_methods": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "methods": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["intents"],
                "properties": {"intents": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "challenge_flow": {
            "type": "object",
            "required": ["auth_header", "auth_scheme"],
            "properties": {
                "auth_header": {"const": "Authorization"},
                "auth_scheme": {"const": "Payment"},
                "receipt_header": {"const": "Payment-Receipt"},
                "challenge_ttl_seconds": {"type": "integer", "minimum": 1},
            },
        },
        "resources": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["url", "method", "x-payment-info"],
                "properties": {
                    "url": {"type": "string", "pattern": "^https?://[^/]+/"},
                    "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                    "description": {"type": "string"},
                    "x-payment-info": {
                        "type": "object",
                        "required": ["intent", "method", "amount", "currency"],
                        "properties": {
                            "intent": {"type": "string"},
                            "method": {"type": "string"},
                            "amount": {"type": "string", "pattern": "^[0-9]+$"},
                            "currency": {"type": "string", "minLength": 1},
                            "description": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}


async def test_mpp_document_has_the_crawlers_shape_and_every_paid_endpoint(
    client: httpx.AsyncClient,
) -> None:
    mpp = await get_json(client, "/.well-known/mpp")
    jsonschema.Draft202012Validator.check_schema(CRAWLER_MPP_SCHEMA)
    jsonschema.Draft202012Validator(CRAWLER_MPP_SCHEMA).validate(mpp)
    # Every paid endpoint, at the price every other document gives it, with its rails.
    reference = await described(client)
    assert [r["url"] for r in mpp["resources"]] == [d["endpoint"] for d in reference.values()]
    for resource, doc in zip(mpp["resources"], reference.values(), strict=True):
        info = resource["x-payment-info"]
        assert (info["intent"], info["method"], info["currency"]) == ("charge", "lightning", "sat")
        assert info["amount"] == str(doc["pricing"]["amountSats"])
        assert resource["protocols"] == ["L402", "MPP"]
        assert resource["method"] == doc["method"] == "POST"
    # The crawler's shape is added: the Payment draft's members are all still there.
    assert {"version", "realm", "methods", "endpoints"} <= set(mpp)
    # satsgate takes no x402 payments: no x402 document for a crawler to misread.
    assert (await client.get("/.well-known/x402")).status_code == 404


async def test_a_bodiless_get_of_a_paid_endpoint_is_a_402_without_an_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    from tests.payments.test_gateway import payment_count

    before = payment_count(server)
    for _ in range(10):  # a crawler's repeated hits
        resp = await client.get("/api/l402/render-card")
        assert resp.status_code == 402, resp.text
        assert "WWW-Authenticate" not in resp.headers  # nothing here can be paid
        assert resp.headers["X-Error-Code"] == "PAYMENT_REQUIRED"
        assert resp.headers["X-L402-Price-Sats"] == "5"
        assert resp.headers["X-L402-Price-Model"] == "flat"
    assert payment_count(server) == before  # no invoice, no payment row

    probe = resp.json()
    assert probe["error_code"] == "PAYMENT_REQUIRED" and probe["status"] == 402
    assert probe["type"] == "https://paymentauth.org/problems/payment-required"
    assert "invoice" not in probe and "macaroon" not in probe and "paymentId" not in probe
    assert probe["pricing"]["amountSats"] == 5 and "5 sats per call" in probe["error"]
    assert probe["payment"]["protocols"] == ["L402", "MPP"]
    ask = probe["payment"]["challengeRequest"]
    assert (ask["method"], ask["url"]) == ("POST", f"{server.url}/api/l402/render-card")
    # Doing what it says gets the challenge, with the invoice.
    challenge = await client.post(ask["url"], json=ask["body"])
    assert challenge.status_code == 402 and challenge.json()["amountSats"] == 5
    assert challenge.headers.get_list("WWW-Authenticate")[0].startswith("L402 macaroon=")
    assert payment_count(server) == before + 1

    # A service no engine serves here: 503, as HEAD says, and no way to pay offered.
    unavailable = next(s for s in SERVICES if not s.is_available(server.app[ENGINES]))
    refused = await client.get(f"/api/l402/{unavailable.slug}")
    assert refused.status_code == 503 and refused.headers["X-Error-Code"] == "SERVICE_UNAVAILABLE"
    assert "payment" not in refused.json() and refused.json()["id"] == unavailable.slug


def test_a_default_that_cannot_run_hands_the_default_to_the_model_requests_move_to() -> None:
    """Whatever default cannot run, the catalog marks instead the model a request naming
    none is moved to (the service's own fit_model, on a request without a model), of the
    same category, never one that cannot run either."""
    from satsgate.services.catalog.models import MODELS, MODELS_BY_ID, defaults_here

    moved = {}
    for default in (m for m in MODELS if m.is_default):
        unavailable = {default.id: "not here"}
        defaults = defaults_here(SERVICES, unavailable)
        assert default.id not in defaults
        same = [d for d in defaults if MODELS_BY_ID[d].category == default.category]
        assert len(same) <= 1, (default.id, same)
        if same:
            moved[default.id] = same[0]
    # The tiers step down the service's own order: best -> better, premium -> mini.
    assert moved[16] == 8 and moved[33] == 34 and moved[6] == 1, moved
