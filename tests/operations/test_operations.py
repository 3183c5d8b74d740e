"""The free operations' registry: every OperationSpec is on every face it names, the
dispatch of /api/l402/{slug} is explicit, and the answer models describe real bodies."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel

from satsgate.operations import OPERATIONS
from satsgate.operations.answers import ErrorEnvelope, PaymentChallenge, Refund, RefundIssued
from satsgate.services.registry import BY_SLUG
from tests.conftest import ThreadedServer, dev_pay

CARD = {"template": "headline", "title": "operations"}


def _declared(model: type[BaseModel], body: dict[str, Any]) -> set[str]:
    """The body's keys the model does not declare (it would pass them through)."""
    return set(body) - set(model.model_fields)


async def _tools(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    resp = await client.post(
        "/api/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    return {tool["name"]: tool for tool in resp.json()["result"]["tools"]}


async def test_every_operation_is_on_every_face_it_names(client: httpx.AsyncClient) -> None:
    tools = await _tools(client)
    doc = (await client.get("/api/openapi.json")).json()
    llms = (await client.get("/llms.txt")).text
    for op in OPERATIONS:
        if op.tool is not None:
            listed = tools[op.tool]
            schema = op.arguments.model_json_schema()
            assert listed["inputSchema"]["properties"] == schema.get("properties", {}), op.name
            assert listed["annotations"]["readOnlyHint"] is op.read_only
        route = op.http
        if route is None:
            continue
        path = route.path if route.on_service is None else f"/api/l402/{route.on_service}"
        assert path.split("{")[0] in llms, op.name
        operation = doc["paths"][path][route.method.lower()]
        if route.on_service is None:
            assert operation["operationId"] == op.name
            answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
            assert answer == {"$ref": f"#/components/schemas/{op.result.__name__}"}
            # An operation that takes the paying credential as a proof lists it, optionally.
            security: list[dict[str, list[str]]] = (
                [{}, {"L402": []}, {"Payment": []}] if route.payer_credential else []
            )
            assert operation["security"] == security and "402" not in operation["responses"]
        elif route.method == "POST":
            body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            forms = doc["components"]["schemas"][body.rsplit("/", 1)[-1]]["oneOf"]
            assert {"$ref": f"#/components/schemas/{op.params.__name__}"} in forms
        else:
            # A GET on a paid service's path: its 200 is the free form's answer (a bodiless
            # GET of the service itself is the 402 probe), alone or among others.
            answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
            result = {"$ref": f"#/components/schemas/{op.result.__name__}"}
            assert answer == result or result in (
                answer.get("oneOf", []) + answer.get("allOf", [])
            ), answer


def test_no_route_shadows_a_paid_service_path(server: ThreadedServer) -> None:
    """/api/l402/{slug} is one route per method; the free forms on a service's path are
    dispatched by it, never by a plain route registered before it."""
    shadowing = [
        (route.method, route.resource.canonical)
        for route in server.app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith("/api/l402/")
        and route.resource.canonical.removeprefix("/api/l402/") in BY_SLUG
    ]
    assert shadowing == []


async def test_answer_models_describe_the_real_bodies(client: httpx.AsyncClient) -> None:
    challenge = await client.post("/api/l402/render-card", json=CARD)
    assert challenge.status_code == 402
    body = challenge.json()
    PaymentChallenge.model_validate(body)
    assert _declared(PaymentChallenge, body) == set()

    bad = await client.post("/api/l402/render-card", json={"template": "nope"})
    envelope = bad.json()
    ErrorEnvelope.model_validate(envelope)
    assert _declared(ErrorEnvelope, envelope) == {"fields"}  # the invalid fields, listed

    preimage = await dev_pay(client, body["invoice"])  # the proof of an HTTP payment
    refunded = await client.post(
        "/api/l402/refund",
        json={"paymentId": body["paymentId"], "invoice": body["invoice"]},
        headers={"Authorization": f"L402 {body['macaroon']}:{preimage}"},
    )
    issued = refunded.json()
    RefundIssued.model_validate(issued)
    assert _declared(RefundIssued, issued) == set()
    assert _declared(Refund, issued["refund"]) == set()

    status = (await client.get(f"/api/payments/{body['paymentId']}")).json()
    assert status["status"] == "refunded" and "lightningInvoice" not in status
