"""A voice-bridge session's free follow-ups over real HTTP and MCP on loopback: say
(POST /api/l402/voice-bridge/say, MCP voice_bridge_say), poll (GET
/api/l402/voice-bridge/poll?sessionId=&cursor=, MCP poll_voice_bridge) and end (POST
/api/l402/voice-bridge/end, MCP end_voice_bridge). None ever issues an invoice.

Two nodes: the shared one has no voice-bridge engine (503 after validation); one with
``[engines.voice_bridge]`` configured looks the session up, and since only the telephony
engine opens sessions, none is found (404 VOICE_BRIDGE_SESSION_NOT_FOUND). In process, a
map-backed fake of the engine's seam shows what the shared functions answer when a
session exists.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from mcp import Client
from openapi_spec_validator import validate
from pydantic import BaseModel

from satsgate.config.settings import Settings
from satsgate.errors import ApiError
from satsgate.operations.comms import bridge_end, bridge_poll, bridge_say
from satsgate.services.comms import voice_bridge
from satsgate.services.comms.voice_bridge import (
    BridgeEvent,
    BridgePoll,
    BridgeSettlement,
    Utterance,
    VoiceBridgeEndParams,
    VoiceBridgePollParams,
    VoiceBridgeSayParams,
)
from tests.conftest import ThreadedServer, http_client, serve_with_engines
from tests.engines_down import down_engines, engines_for
from tests.mcp.test_mcp import mcp_url, structured
from tests.payments.test_gateway import assert_envelope, payment_count
from tests.services.test_ai_call_routes import assert_no_invoice

SAY = "/api/l402/voice-bridge/say"
POLL = "/api/l402/voice-bridge/poll"
END = "/api/l402/voice-bridge/end"
NOT_FOUND = "VOICE_BRIDGE_SESSION_NOT_FOUND"
PCM = base64.b64encode(b"\x00\x01" * 800).decode()  # 50 ms of pcm_l16_16000
FAKE_AUTH = {"Authorization": f"L402 AGIA:{'0' * 64}"}

VALID_SAYS: list[dict[str, Any]] = [
    {"sessionId": "vb_1", "text": "Hello, is this the front desk?"},
    {"session_id": "vb_1", "text": "Hola", "language": "es", "voice_description": "female"},
    {"sessionId": "vb_1", "text": "Hi", "language": "en-US", "voiceDescription": "male, low pitch"},
    {"sessionId": "vb_1", "audioBase64": PCM, "encoding": "pcm_l16_16000"},
    {"sessionId": "vb_1", "audio_base64": "data:audio/basic;base64," + PCM},  # session codec
    {"sessionId": "vb_1", "text": "x" * 5000},
]

# (body, the field the 400 names)
INVALID_SAYS: list[tuple[Any, str]] = [
    ({"text": "Hello"}, "sessionId"),
    ({"sessionId": "", "text": "Hello"}, "sessionId"),
    ({"sessionId": "s" * 129, "text": "Hello"}, "sessionId"),
    ({"sessionId": "two words", "text": "Hello"}, "sessionId"),
    ({"sessionId": "vb_1"}, "(body)"),  # neither text nor audio
    ({"sessionId": "vb_1", "text": "Hi", "audioBase64": PCM}, "(body)"),  # both
    ({"sessionId": "vb_1", "text": ""}, "text"),
    ({"sessionId": "vb_1", "text": "x" * 5001}, "text"),
    ({"sessionId": "vb_1", "text": "Hi", "language": "english please"}, "language"),
    ({"sessionId": "vb_1", "text": "Hi", "voiceDescription": "robotic"}, "voiceDescription"),
    ({"sessionId": "vb_1", "text": "Hi", "voiceDescription": "male, female"}, "voiceDescription"),
    ({"sessionId": "vb_1", "text": "Hi", "encoding": "mulaw_8000"}, "encoding"),
    ({"sessionId": "vb_1", "audioBase64": PCM, "encoding": "opus"}, "encoding"),
    ({"sessionId": "vb_1", "audioBase64": PCM, "language": "en"}, "language"),
    ({"sessionId": "vb_1", "audioBase64": PCM, "voiceDescription": "male"}, "voiceDescription"),
    ({"sessionId": "vb_1", "audioBase64": "not base64!"}, "audioBase64"),
    ({"sessionId": "vb_1", "audioBase64": "AAAA", "encoding": "pcm_l16_16000"}, "audioBase64"),
    ({"sessionId": "vb_1", "text": "Hi", "paymentId": "pay_1"}, "paymentId"),
    (["vb_1", "Hello"], "(body)"),
]
INVALID_ENDS: list[tuple[Any, str]] = [
    ({}, "sessionId"),
    ({"sessionId": ""}, "sessionId"),
    ({"sessionId": "vb\n1"}, "sessionId"),
    ({"sessionId": "vb_1", "session_id": "vb_2"}, "session_id"),
    ({"sessionId": "vb_1", "refund": True}, "refund"),
]
INVALID_POLLS: list[tuple[str, str]] = [
    ("", "sessionId"),
    ("sessionId=", "sessionId"),
    ("sessionId=" + "s" * 129, "sessionId"),
    ("sessionId=vb_1&cursor=-1", "cursor"),
    ("sessionId=vb_1&cursor=next", "cursor"),
    (f"sessionId=vb_1&cursor={2**63}", "cursor"),
    ("sessionId=a&sessionId=b", "sessionId"),
]


@pytest.fixture(scope="module")
def bridge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    """A node whose voice-bridge engine is configured (no session is ever opened here)."""
    yield from serve_with_engines(tmp_path_factory, "voice-bridge", ["voice_bridge"])


@pytest.fixture
async def bridge_client(bridge_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(bridge_server):
        yield c


def named_field(error: dict[str, Any], field: str) -> bool:
    return any(f["field"] == field for f in error["fields"])


# -- validation comes first, on both nodes ---------------------------------------------------


async def test_invalid_arguments_are_refused_before_anything(
    client: httpx.AsyncClient,
    server: ThreadedServer,
    bridge_client: httpx.AsyncClient,
    bridge_server: ThreadedServer,
) -> None:
    for http, node in ((client, server), (bridge_client, bridge_server)):
        before = payment_count(node)
        for body, name in INVALID_SAYS:
            resp = await http.post(SAY, json=body)
            error = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
            assert named_field(error, name), (body, error)
            assert_no_invoice(resp)
        for body, name in INVALID_ENDS:
            resp = await http.post(END, json=body)
            error = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
            assert named_field(error, name), (body, error)
            assert_no_invoice(resp)
        for query, name in INVALID_POLLS:
            resp = await http.get(f"{POLL}?{query}")
            error = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
            assert name in error["error"], (query, error)
        assert payment_count(node) == before


async def test_invalid_json_and_oversized_bodies(client: httpx.AsyncClient) -> None:
    headers = {"Content-Type": "application/json"}
    for path in (SAY, END):
        bad = await client.post(path, content=b'{"sessionId": ', headers=headers)
        assert_envelope(bad, "L402_INVALID_PARAMS", 400)
    big = await client.post(END, content=b"{" + b" " * 20_000 + b"}", headers=headers)
    assert_envelope(big, "PAYLOAD_TOO_LARGE", 413)
    audio = "A" * (voice_bridge.SAY_MAX_BODY_BYTES + 1)
    huge = await client.post(SAY, json={"sessionId": "vb_1", "audioBase64": audio})
    assert_envelope(huge, "PAYLOAD_TOO_LARGE", 413)
    # Within the body limit but over 1 MB decoded: the field is refused, not the body.
    over = base64.b64encode(b"\0" * (voice_bridge.SAY_AUDIO_MAX_BYTES + 2)).decode()
    resp = await client.post(SAY, json={"sessionId": "vb_1", "audioBase64": over})
    error = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert named_field(error, "audioBase64"), error


# -- without the engine: 503, free ------------------------------------------------------------


async def test_without_the_engine_every_call_is_unavailable_and_free(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    for headers in ({}, FAKE_AUTH):  # a credential changes nothing
        for body in VALID_SAYS:
            resp = await client.post(SAY, json=body, headers=headers)
            error = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
            assert "Open voice bridge" in error["error"], error
            assert_no_invoice(resp)
        for body in ({"sessionId": "vb_1"}, {"session_id": "vb_1"}):
            resp = await client.post(END, json=body, headers=headers)
            assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
            assert_no_invoice(resp)
        for query in ("sessionId=vb_1", "session_id=vb_1&cursor=7", "sessionId=vb_1&_=1"):
            resp = await client.get(f"{POLL}?{query}", headers=headers)
            assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
            assert_no_invoice(resp)
    assert payment_count(server) == before


# -- with the engine: no session exists -------------------------------------------------------


async def test_with_the_engine_an_unknown_session_is_not_found(
    bridge_client: httpx.AsyncClient, bridge_server: ThreadedServer
) -> None:
    before = payment_count(bridge_server)
    for headers in ({}, FAKE_AUTH):
        for body in VALID_SAYS:
            resp = await bridge_client.post(SAY, json=body, headers=headers)
            error = assert_envelope(resp, NOT_FOUND, 404)
            assert "'vb_1'" in error["error"], error
            assert_no_invoice(resp)
        end = await bridge_client.post(END, json={"session_id": "vb_2"}, headers=headers)
        assert "'vb_2'" in assert_envelope(end, NOT_FOUND, 404)["error"]
        assert_no_invoice(end)
        poll = await bridge_client.get(POLL, params={"sessionId": "vb_3", "cursor": "4"})
        assert "'vb_3'" in assert_envelope(poll, NOT_FOUND, 404)["error"]
        assert_no_invoice(poll)
    assert payment_count(bridge_server) == before


async def test_the_paths_leave_the_paid_open_and_its_description_alone(
    client: httpx.AsyncClient, bridge_client: httpx.AsyncClient, bridge_server: ThreadedServer
) -> None:
    opening = {"phoneNumber": "+14155550123", "durationMinutes": 2}
    unavailable = await client.post("/api/l402/voice-bridge/open", json=opening)
    assert_envelope(unavailable, "SERVICE_UNAVAILABLE", 503)
    before = payment_count(bridge_server)
    for path in ("/api/l402/voice-bridge/open", "/api/l402/voice-bridge-open"):
        quoted = await bridge_client.post(path, json=opening)
        assert quoted.status_code == 402, quoted.text
        assert quoted.json()["amountSats"] > 0 and "WWW-Authenticate" in quoted.headers
    assert payment_count(bridge_server) == before + 2
    described = await client.get("/api/l402/voice-bridge-open")
    assert described.status_code in (402, 503) and described.json()["tool"] == "open_voice_bridge"
    # Each follow-up answers its own method only.
    assert_envelope(await client.get(SAY), "METHOD_NOT_ALLOWED", 405)
    assert_envelope(await client.get(END), "METHOD_NOT_ALLOWED", 405)
    assert_envelope(await client.post(POLL, json={}), "METHOD_NOT_ALLOWED", 405)


async def test_error_catalog_lists_the_session_code(client: httpx.AsyncClient) -> None:
    codes = {c["error_code"]: c for c in (await client.get("/api/error-codes")).json()["codes"]}
    entry = codes[NOT_FOUND]
    assert entry["http_status"] == 404 and entry["in_spec"] is False
    assert entry["retryable"] is False


# -- MCP ------------------------------------------------------------------------------------

TOOLS: dict[str, tuple[type[BaseModel], dict[str, Any], bool]] = {
    "voice_bridge_say": (VoiceBridgeSayParams, {"sessionId": "vb_1", "text": "Hello"}, False),
    "poll_voice_bridge": (VoiceBridgePollParams, {"sessionId": "vb_1", "cursor": 3}, True),
    "end_voice_bridge": (VoiceBridgeEndParams, {"sessionId": "vb_1"}, False),
}
INVALID_TOOL_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("voice_bridge_say", {"sessionId": "vb_1"}),
    ("voice_bridge_say", {"sessionId": "vb_1", "text": "Hi", "encoding": "mulaw_8000"}),
    ("voice_bridge_say", {"sessionId": "vb_1", "audioBase64": "not base64!"}),  # decoded later
    ("voice_bridge_say", {"sessionId": "vb_1", "text": "Hi", "paymentId": "pay_1"}),
    ("poll_voice_bridge", {"sessionId": "vb_1", "cursor": -1}),
    ("poll_voice_bridge", {}),
    ("end_voice_bridge", {"sessionId": ""}),
]


async def test_mcp_tools_are_listed_and_share_the_errors(
    server: ThreadedServer, bridge_server: ThreadedServer
) -> None:
    async with Client(mcp_url(server)) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        for name, (model, arguments, read_only) in TOOLS.items():
            tool = tools[name]
            own = model.model_json_schema()
            assert tool.input_schema["type"] == "object"
            assert tool.input_schema["required"] == ["sessionId"]
            assert tool.input_schema["properties"] == own["properties"]
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is read_only
            assert tool.description is not None and "Free" in tool.description

            unavailable = await mcp.call_tool(name, arguments)
            assert unavailable.is_error, name
            assert structured(unavailable)["error_code"] == "SERVICE_UNAVAILABLE"
        say = tools["voice_bridge_say"].input_schema["properties"]
        assert say["encoding"]["anyOf"][0]["enum"] == ["mulaw_8000", "pcm_l16_16000"]

        for name, arguments in INVALID_TOOL_ARGUMENTS:
            bad = await mcp.call_tool(name, arguments)
            assert bad.is_error, (name, arguments)
            assert structured(bad)["error_code"] == "L402_INVALID_PARAMS"

    async with Client(mcp_url(bridge_server)) as mcp:
        for name, (_model, arguments, _read_only) in TOOLS.items():
            missing = await mcp.call_tool(name, arguments)
            assert missing.is_error, name
            assert structured(missing)["error_code"] == NOT_FOUND
        snake = await mcp.call_tool("end_voice_bridge", {"session_id": "vb_9"})
        assert "'vb_9'" in structured(snake)["error"]


# -- discovery ------------------------------------------------------------------------------


async def test_openapi_documents_the_three_operations(
    client: httpx.AsyncClient, bridge_client: httpx.AsyncClient
) -> None:
    for http, available in ((client, False), (bridge_client, True)):
        doc = (await http.get("/api/openapi.json")).json()
        validate(doc)
        schemas = doc["components"]["schemas"]
        operations = {
            "voice_bridge_say": doc["paths"][SAY]["post"],
            "poll_voice_bridge": doc["paths"][POLL]["get"],
            "end_voice_bridge": doc["paths"][END]["post"],
        }
        assert set(doc["paths"][SAY]) == {"post"} and set(doc["paths"][END]) == {"post"}
        assert set(doc["paths"][POLL]) == {"get"}
        for tool, op in operations.items():
            assert op["operationId"] == tool and op["x-mcp-tool"] == tool
            assert op["security"] == [] and "402" not in op["responses"]
            assert op["x-available"] is available, (tool, available)
            assert ("Not configured on this node" in op["description"]) is not available
            assert NOT_FOUND in op["x-error-codes"]
            assert NOT_FOUND in op["responses"]["4XX"]["description"]
            assert "SERVICE_UNAVAILABLE" in op["responses"]["5XX"]["description"]
            answer = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
            assert answer.removeprefix("#/components/schemas/") in schemas

        for tool, model in (
            ("voice_bridge_say", "VoiceBridgeSayParams"),
            ("end_voice_bridge", "VoiceBridgeEndParams"),
        ):
            body = operations[tool]["requestBody"]["content"]["application/json"]["schema"]
            assert body == {"$ref": f"#/components/schemas/{model}"}
            assert schemas[model]["required"] == ["sessionId"]
        say = schemas["VoiceBridgeSayParams"]["properties"]
        assert say["text"]["anyOf"][0]["maxLength"] == 5000
        assert say["audioBase64"]["anyOf"][0]["maxLength"] == voice_bridge.SAY_MAX_BODY_BYTES - (
            32 * 1024
        )
        session_id, cursor = operations["poll_voice_bridge"]["parameters"]
        assert session_id["name"] == "sessionId" and session_id["required"] is True
        assert session_id["schema"]["maxLength"] == 128
        assert cursor["name"] == "cursor" and cursor["required"] is False
        assert cursor["schema"]["minimum"] == 0
        events = schemas["VoiceBridgeEvents"]["properties"]["events"]["items"]
        if "$ref" in events:  # a component of its own
            events = schemas[events["$ref"].removeprefix("#/components/schemas/")]
        assert events["required"] == ["seq", "type", "text", "ts_ms"]
        settlement = schemas["VoiceBridgeSettlement"]["required"]
        assert {"elapsedSec", "usedSats", "depositSats", "refundableSats", "refund"} <= set(
            settlement
        )


async def test_llms_txt_names_the_session_tools(
    client: httpx.AsyncClient, bridge_client: httpx.AsyncClient
) -> None:
    for http, available in ((client, False), (bridge_client, True)):
        text = (await http.get("/llms.txt")).text
        line = next(line for line in text.splitlines() if line.startswith("- Voice bridge, free"))
        for name in ("voice_bridge_say", "poll_voice_bridge", "end_voice_bridge", SAY, END):
            assert name in line, name
        assert f"{POLL}?sessionId=<sessionId>&cursor=" in line
        assert line.endswith("Not configured on this node.") is not available


# -- the shared functions against a fake engine ------------------------------------------------


@dataclass
class FakeSessions:
    """A map-backed stand-in for the telephony engine's seam."""

    events: dict[str, list[BridgeEvent]] = field(default_factory=dict)
    said: list[tuple[str, Utterance]] = field(default_factory=list)
    settled: dict[str, BridgeSettlement] = field(default_factory=dict)

    async def say(self, session_id: str, utterance: Utterance) -> int | None:
        if session_id not in self.events or session_id in self.settled:
            return None
        self.said.append((session_id, utterance))
        return len(utterance.audio or b"") or 4000

    async def poll(self, session_id: str, cursor: int) -> BridgePoll | None:
        if session_id not in self.events:
            return None
        after = tuple(e for e in self.events[session_id] if e.seq > cursor)
        state = "ended" if session_id in self.settled else "open"
        last = after[-1].seq if after else cursor
        return BridgePoll(session_id, state, after, last, "call_" + session_id)

    async def end(self, session_id: str) -> BridgeSettlement | None:
        if session_id not in self.events:
            return None
        if session_id not in self.settled:
            self.settled[session_id] = BridgeSettlement(
                65, 40, 100, 60, {"lnurl_withdraw": "LNURL1...", "amount_sats": 60}, "Hello."
            )
        return self.settled[session_id]


async def test_shared_functions_answer_the_spec_shapes() -> None:
    sessions = FakeSessions(
        events={
            "vb_1": [
                BridgeEvent(1, "partial", "Hel", 100),
                BridgeEvent(2, "final", "Hello.", 400),
            ]
        }
    )
    available = engines_for(Settings(**down_engines(["voice_bridge"])))
    bare = engines_for(Settings())

    said = await bridge_say(available, sessions, VoiceBridgeSayParams.model_validate(VALID_SAYS[3]))
    assert said == {"success": True, "bytesSent": 1600}
    assert sessions.said[-1][1] == Utterance(audio=b"\x00\x01" * 800, encoding="pcm_l16_16000")
    await bridge_say(available, sessions, VoiceBridgeSayParams.model_validate(VALID_SAYS[1]))
    assert sessions.said[-1][1] == Utterance(text="Hola", language="es", voice_description="female")

    polled = await bridge_poll(
        available,
        sessions,
        VoiceBridgePollParams.model_validate({"sessionId": "vb_1", "cursor": 1}),
    )
    assert polled == {
        "success": True,
        "sessionId": "vb_1",
        "state": "open",
        "events": [{"seq": 2, "type": "final", "text": "Hello.", "ts_ms": 400}],
        "nextCursor": 2,
        "callId": "call_vb_1",
    }

    end = VoiceBridgeEndParams.model_validate({"sessionId": "vb_1"})
    first = await bridge_end(available, sessions, end)
    assert first == {
        "success": True,
        "elapsedSec": 65,
        "usedSats": 40,
        "depositSats": 100,
        "refundableSats": 60,
        "refund": {"lnurl_withdraw": "LNURL1...", "amount_sats": 60},
        "finalTranscript": "Hello.",
    }
    assert await bridge_end(available, sessions, end) == first
    with pytest.raises(ApiError) as ended:  # an ended session takes no more speech
        await bridge_say(available, sessions, VoiceBridgeSayParams.model_validate(VALID_SAYS[0]))
    assert ended.value.code == NOT_FOUND
    with pytest.raises(ApiError) as unavailable:  # the node's own engines: none for the bridge
        await bridge_end(bare, sessions, end)
    assert unavailable.value.code == "SERVICE_UNAVAILABLE"
