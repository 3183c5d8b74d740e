"""The AI call's free forms over real HTTP and MCP on loopback: the confirmation of a
pending_confirm call (POST /api/l402/ai-call with action, MCP confirm_ai_call) and the
poll (GET /api/l402/ai-call?call_id=). Neither ever issues an invoice.

Two nodes: the shared one has no AI-call engine (503 before any lookup); one with
``[engines.ai_call]`` configured looks the call up, and since only the telephony
engine creates AI calls, none is found (404 AI_CALL_NOT_FOUND).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from openapi_spec_validator import validate

from tests.conftest import ThreadedServer, http_client, serve_with_engines
from tests.mcp.test_mcp import mcp_url, structured
from tests.payments.test_gateway import assert_envelope, payment_count

AI_CALL = "/api/l402/ai-call"
PAID_BODY = {"phoneNumber": "+14155550123", "task": "Ask for opening hours"}
CONFIRM = {"action": "confirm", "session_id": "sess_1", "answers": {"party size": 2}}

INVALID_CONFIRMATIONS: list[tuple[dict[str, Any], str]] = [
    ({"action": "confirm"}, "session_id"),
    ({"action": "confirm", "session_id": ""}, "session_id"),
    ({"action": "confirm", "session_id": "s" * 129}, "session_id"),
    ({"action": "confirm", "session_id": "two words"}, "session_id"),
    ({"action": "cancel", "session_id": "sess_1"}, "action"),
    ({"action": "confirm", "session_id": "sess_1", "answers": ["yes"]}, "answers"),
    ({"action": "confirm", "session_id": "sess_1", "answers": {"q": "x" * 1001}}, "answers"),
    ({"action": "confirm", "session_id": "sess_1", "answers": {"q": {"nested": 1}}}, "answers"),
    ({"action": "confirm", "session_id": "sess_1", "answers": {"": "yes"}}, "answers"),
    (
        {"action": "confirm", "session_id": "sess_1", "answers": {f"q{i}": "y" for i in range(51)}},
        "answers",
    ),
    ({"action": "confirm", "session_id": "sess_1", "paymentId": "pay_1"}, "paymentId"),
]


@pytest.fixture(scope="module")
def ai_call_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    """A node whose AI-call engine is configured (no call is ever placed here)."""
    yield from serve_with_engines(tmp_path_factory, "ai-call", ["ai_call"])


@pytest.fixture
async def ai_call_client(ai_call_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(ai_call_server):
        yield c


def assert_no_invoice(resp: httpx.Response) -> None:
    assert "WWW-Authenticate" not in resp.headers
    assert "invoice" not in resp.json()


# -- confirmation over HTTP -----------------------------------------------------------------


async def test_invalid_confirmations_are_refused_before_anything(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    """Validation comes first, even on a node without the engine: 400, never an invoice."""
    before = payment_count(server)
    for body, field in INVALID_CONFIRMATIONS:
        resp = await client.post(AI_CALL, json=body)
        error = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert any(f["field"].startswith(field) for f in error["fields"]), (body, error)
        assert "session_id" in error["example"]
        assert_no_invoice(resp)
    assert payment_count(server) == before


async def test_confirmation_without_the_engine_is_unavailable_and_free(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    camel = {"action": "confirm", "sessionId": "sess_1"}
    for body in (CONFIRM, camel):
        resp = await client.post(AI_CALL, json=body)
        assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
        assert_no_invoice(resp)
    # A credential changes nothing: the confirmation rides on the call's original payment.
    with_auth = await client.post(
        AI_CALL, json=CONFIRM, headers={"Authorization": f"L402 AGIA:{'0' * 64}"}
    )
    assert_envelope(with_auth, "SERVICE_UNAVAILABLE", 503)
    assert payment_count(server) == before


async def test_confirmation_of_an_unknown_session_is_not_found(
    ai_call_client: httpx.AsyncClient, ai_call_server: ThreadedServer
) -> None:
    before = payment_count(ai_call_server)
    camel = {"action": "confirm", "sessionId": "sess_2", "answers": {"time": "7pm", "ok": True}}
    for body in (CONFIRM, camel, {"action": "confirm", "session_id": "sess_3", "answers": None}):
        resp = await ai_call_client.post(AI_CALL, json=body)
        error = assert_envelope(resp, "AI_CALL_NOT_FOUND", 404)
        assert repr(body.get("session_id", body.get("sessionId"))) in error["error"]
        assert_no_invoice(resp)
    invalid = await ai_call_client.post(AI_CALL, json={"action": "confirm", "session_id": ""})
    assert_envelope(invalid, "L402_INVALID_PARAMS", 400)
    assert payment_count(ai_call_server) == before


async def test_a_body_without_action_is_still_the_paid_call(
    ai_call_client: httpx.AsyncClient, ai_call_server: ThreadedServer
) -> None:
    """The body is read once for the dispatch; the paid path quotes it, also when chunked."""
    before = payment_count(ai_call_server)
    quoted = await ai_call_client.post(AI_CALL, json=PAID_BODY)
    assert quoted.status_code == 402, quoted.text
    assert quoted.json()["amountSats"] > 0 and "WWW-Authenticate" in quoted.headers

    async def chunked() -> AsyncIterator[bytes]:
        yield b'{"phoneNumber": "+14155550123", '
        yield b'"task": "Ask for opening hours"}'

    streamed = await ai_call_client.post(
        AI_CALL, content=chunked(), headers={"Content-Type": "application/json"}
    )
    assert streamed.request.headers.get("Transfer-Encoding") == "chunked"
    assert streamed.status_code == 402, streamed.text
    assert streamed.json()["amountSats"] == quoted.json()["amountSats"]
    assert payment_count(ai_call_server) == before + 2

    bad = await ai_call_client.post(AI_CALL, json={**PAID_BODY, "durationMinutes": 11})
    assert_envelope(bad, "L402_INVALID_PARAMS", 400)
    assert payment_count(ai_call_server) == before + 2


async def test_the_paid_call_without_the_engine_is_still_unavailable(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.post(AI_CALL, json=PAID_BODY)
    assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
    assert_no_invoice(resp)


# -- poll over HTTP -------------------------------------------------------------------------


async def test_poll_validates_call_id(
    client: httpx.AsyncClient, ai_call_client: httpx.AsyncClient
) -> None:
    for http in (client, ai_call_client):
        for query in ("call_id=", "call_id=%20%20", "call_id=" + "c" * 129, "call_id=a&call_id=b"):
            resp = await http.get(f"{AI_CALL}?{query}")
            assert_envelope(resp, "L402_INVALID_PARAMS", 400)


async def test_poll_of_an_unknown_call(
    client: httpx.AsyncClient, ai_call_client: httpx.AsyncClient
) -> None:
    unavailable = await client.get(AI_CALL, params={"call_id": "call_1"})
    assert_envelope(unavailable, "SERVICE_UNAVAILABLE", 503)
    missing = await ai_call_client.get(AI_CALL, params={"call_id": "call_1"})
    error = assert_envelope(missing, "AI_CALL_NOT_FOUND", 404)
    assert "'call_1'" in error["error"]


async def test_get_without_call_id_still_describes_the_service(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.get(AI_CALL)
    # As every paid service's bare GET: its description as a probe (no engine here: 503).
    assert resp.status_code == 503, resp.text
    assert resp.headers["X-Error-Code"] == "SERVICE_UNAVAILABLE"
    description = resp.json()
    manifest = (await client.get("/.well-known/l402-services")).json()
    listed = next(s for s in manifest["services"] if s["id"] == "ai-call")
    assert {k: v for k, v in description.items() if k in listed} == listed
    assert description["tool"] == "ai_call" and description["available"] is False
    assert resp.headers["Cache-Control"].startswith("public")


async def test_error_catalog_lists_the_ai_call_code(client: httpx.AsyncClient) -> None:
    codes = {c["error_code"]: c for c in (await client.get("/api/error-codes")).json()["codes"]}
    entry = codes["AI_CALL_NOT_FOUND"]
    assert entry["http_status"] == 404 and entry["in_spec"] is False
    assert entry["retryable"] is False


# -- MCP ------------------------------------------------------------------------------------


async def test_confirm_ai_call_tool_is_listed_and_shares_the_errors(
    server: ThreadedServer, ai_call_server: ThreadedServer
) -> None:
    async with Client(mcp_url(server)) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        tool = tools["confirm_ai_call"]
        assert tool.input_schema["required"] == ["sessionId"]
        assert set(tool.input_schema["properties"]) == {"sessionId", "answers"}
        assert tool.annotations is not None and tool.annotations.read_only_hint is False
        assert "paymentId" not in tool.input_schema["properties"]

        unavailable = await mcp.call_tool("confirm_ai_call", {"sessionId": "sess_1"})
        assert unavailable.is_error
        assert structured(unavailable)["error_code"] == "SERVICE_UNAVAILABLE"

        for arguments in (
            {},
            {"sessionId": ""},
            {"sessionId": "sess_1", "answers": {"q": ["a"]}},
            {"sessionId": "sess_1", "paymentId": "pay_1"},
        ):
            bad = await mcp.call_tool("confirm_ai_call", arguments)
            assert bad.is_error, arguments
            assert structured(bad)["error_code"] == "L402_INVALID_PARAMS"

    async with Client(mcp_url(ai_call_server)) as mcp:
        missing = await mcp.call_tool(
            "confirm_ai_call", {"sessionId": "sess_1", "answers": {"party size": 2}}
        )
        assert missing.is_error
        assert structured(missing)["error_code"] == "AI_CALL_NOT_FOUND"


# -- discovery ------------------------------------------------------------------------------


async def test_openapi_documents_the_confirmation_and_the_poll(
    client: httpx.AsyncClient, ai_call_client: httpx.AsyncClient
) -> None:
    for http, available in ((client, False), (ai_call_client, True)):
        doc = (await http.get("/api/openapi.json")).json()
        validate(doc)
        schemas = doc["components"]["schemas"]
        item = doc["paths"][AI_CALL]

        post = item["post"]
        body = post["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/AiCallRequest"}
        forms = [ref["$ref"].rsplit("/", 1)[-1] for ref in schemas["AiCallRequest"]["oneOf"]]
        assert forms == ["AiCallParams", "AiCallConfirmParams"]
        confirm = schemas["AiCallConfirmParams"]
        assert set(confirm["required"]) == {"action", "session_id"}
        assert confirm["properties"]["answers"]["anyOf"][0]["maxProperties"] == 50
        assert "AI_CALL_NOT_FOUND" in post["x-error-codes"]
        assert "AI_CALL_NOT_FOUND" in post["responses"]["4XX"]["description"]

        get = item["get"]
        assert get["security"] == [] and get["x-available"] is available
        (call_id,) = get["parameters"]
        assert call_id["name"] == "call_id" and call_id["in"] == "query"
        assert call_id["required"] is False and call_id["schema"]["maxLength"] == 128
        answer = get["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": "#/components/schemas/AiCallRecord"}
        described = get["responses"]["402"]["content"]["application/json"]["schema"]
        assert described == {"$ref": "#/components/schemas/ServiceDescription"}
        assert "AI_CALL_NOT_FOUND" in get["responses"]["4XX"]["description"]
        assert "SERVICE_UNAVAILABLE" in get["responses"]["5XX"]["description"]

        # The other services keep their single request body and plain description.
        card = doc["paths"]["/api/l402/render-card"]
        assert "$ref" in card["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "parameters" not in card["get"]


async def test_llms_txt_names_the_free_forms(client: httpx.AsyncClient) -> None:
    text = (await client.get("/llms.txt")).text
    line = next(line for line in text.splitlines() if line.startswith("- AI call, free"))
    assert "confirm_ai_call" in line and "?call_id=<call_id>" in line
    assert line.endswith("Not configured on this node.")
