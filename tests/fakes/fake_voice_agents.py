"""Loopback fakes of Retell AI's and Vapi's call APIs, from their API references
(/work/shared/docs/providers.md section 8), each in its own thread and event loop as a
remote platform would be.

Each placed call follows the next :class:`Leg` of the fake's script (or the default): it
rings, is connected (or not), and ends ``end_after_s`` seconds after its creation as the
leg says (completed by a hang-up, no answer, busy, a voicemail, a platform error), with
the connected duration, the turns of the conversation and the platform's analysis as the
leg gives them. The fake answers get-call with the call object as it stands, and when
the call ends it posts its webhook to the node, signed as the platform signs it
(Retell: ``x-retell-signature``; Vapi: the Server URL's bearer credential or HMAC).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from aiohttp import web

from satsgate.engines.providers.retell import sign as retell_sign
from satsgate.engines.providers.vapi import hmac_signature
from tests.conftest import free_port

RETELL_KEY = "key_test_retell"
VAPI_KEY = "vapi_private_key"
VAPI_SECRET = "vapi-server-secret"


# A webhook sent later: how long after the end's, and what makes it (when it is sent).
Later = tuple[float, Callable[[], tuple[bytes, dict[str, str]]]]


@dataclass
class Leg:
    """How one placed call goes."""

    ending: str = "completed"  # completed | no_answer | busy | voicemail | error
    connected_s: float = 95.0  # how long it was connected (0 unless answered)
    turns: tuple[tuple[str, str], ...] = (
        ("agent", "Hello, I'm calling on behalf of Ann about a table."),
        ("user", "Sure, a table for two at seven works. Under Ann, got it."),
        ("agent", "Thank you, goodbye."),
    )
    end_after_s: float = 0.3
    create_status: int = 0  # non-zero: the create call answers this HTTP status instead
    summary: str = "The table for two at 7 pm was booked under Ann."
    successful: bool = True
    # Retell: the analysis comes this long after the end (call_analyzed); None: never.
    analysis_delay_s: float | None = 0.0


@dataclass
class FakeCall:
    id: str
    body: dict[str, Any]
    leg: Leg
    created: float
    webhooked: bool = False
    gets: int = 0


@dataclass
class FakeVoiceAgent:
    """Shared: thread, loop, script, calls, webhook sending."""

    webhook_url: str = ""  # where the fake posts its webhooks ("" until the node is known)
    script: list[Leg] = field(default_factory=list)
    default: Leg = field(default_factory=Leg)
    calls: list[FakeCall] = field(default_factory=list)
    webhook_answers: list[int] = field(default_factory=list)
    forge_webhooks: bool = False  # sign with the wrong key

    def __post_init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        async def down() -> None:
            for task in list(self._tasks):
                task.cancel()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def next_leg(self) -> Leg:
        return self.script.pop(0) if self.script else self.default

    def ended(self, call: FakeCall) -> bool:
        return time.time() - call.created >= call.leg.end_after_s

    def by_id(self, call_id: str) -> FakeCall | None:
        return next((c for c in self.calls if c.id == call_id), None)

    async def _ender(self, call: FakeCall) -> None:
        """When the call ends, the platform's webhook (once)."""
        await asyncio.sleep(call.leg.end_after_s + 0.01)
        if not self.webhook_url or call.webhooked:
            return
        call.webhooked = True
        await self._post(*self.webhook(call))
        later = self.later_webhook(call)
        if later is not None:
            delay, make = later
            await asyncio.sleep(delay)
            await self._post(*make())

    async def _post(self, body: bytes, headers: dict[str, str]) -> None:
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                resp = await client.post(self.webhook_url, content=body, headers=headers)
            self.webhook_answers.append(resp.status_code)
        except httpx.HTTPError:
            self.webhook_answers.append(0)

    def later_webhook(self, call: FakeCall) -> Later | None:
        """A webhook that follows the end's (Retell's call_analyzed): (delay, maker)."""
        return None

    def spawn_ender(self, call: FakeCall) -> None:
        task = asyncio.ensure_future(self._ender(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def webhook(self, call: FakeCall) -> tuple[bytes, dict[str, str]]:
        raise NotImplementedError

    def authorized(self, request: web.Request, key: str) -> bool:
        return request.headers.get("Authorization") == f"Bearer {key}"


# -- Retell ----------------------------------------------------------------------------------


class FakeRetell(FakeVoiceAgent):
    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v2/create-phone-call", self._create)
        app.router.add_get("/v2/get-call/{call_id}", self._get)

    async def _create(self, request: web.Request) -> web.Response:
        if not self.authorized(request, RETELL_KEY):
            return web.json_response({"error_message": "Unauthorized"}, status=401)
        body = await request.json()
        for key in ("from_number", "to_number"):
            if not isinstance(body.get(key), str):
                return web.json_response({"error_message": f"{key} required"}, status=400)
        variables = body.get("retell_llm_dynamic_variables", {})
        if not all(isinstance(v, str) for v in variables.values()):
            return web.json_response({"error_message": "variables are strings"}, status=400)
        leg = self.next_leg()
        if leg.create_status:
            return web.json_response(
                {"error_message": "upstream trouble"}, status=leg.create_status
            )
        call = FakeCall(f"call_{secrets.token_hex(8)}", body, leg, time.time())
        self.calls.append(call)
        self.spawn_ender(call)
        return web.json_response(self.doc(call), status=201)

    async def _get(self, request: web.Request) -> web.Response:
        if not self.authorized(request, RETELL_KEY):
            return web.json_response({"error_message": "Unauthorized"}, status=401)
        call = self.by_id(request.match_info["call_id"])
        if call is None:
            return web.json_response({"error_message": "Not found"}, status=404)
        call.gets += 1
        return web.json_response(self.doc(call))

    def doc(self, call: FakeCall) -> dict[str, Any]:
        body, leg = call.body, call.leg
        doc: dict[str, Any] = {
            "call_id": call.id,
            "call_type": "phone_call",
            "agent_id": body.get("override_agent_id", "agent_default"),
            "agent_version": body.get("override_agent_version", 0),
            "direction": "outbound",
            "from_number": body["from_number"],
            "to_number": body["to_number"],
            "metadata": body.get("metadata", {}),
            "retell_llm_dynamic_variables": body.get("retell_llm_dynamic_variables", {}),
            "call_status": "registered",
        }
        if not self.ended(call):
            if leg.ending in ("completed", "voicemail") and time.time() - call.created > 0.05:
                doc["call_status"] = "ongoing"
                doc["start_timestamp"] = int(call.created * 1000)
            return doc
        start_ms = int(call.created * 1000)
        if leg.ending in ("no_answer", "busy"):
            doc["call_status"] = "not_connected"
            doc["disconnection_reason"] = {"no_answer": "dial_no_answer", "busy": "dial_busy"}[
                leg.ending
            ]
            return doc
        if leg.ending == "error":
            doc["call_status"] = "error"
            doc["disconnection_reason"] = "error_llm_websocket_open"
            return doc
        doc["call_status"] = "ended"
        doc["start_timestamp"] = start_ms
        doc["end_timestamp"] = start_ms + int(leg.connected_s * 1000)
        doc["duration_ms"] = int(leg.connected_s * 1000)
        if leg.ending == "voicemail":
            doc["disconnection_reason"] = "voicemail_reached"
            turns: tuple[tuple[str, str], ...] = ()
        else:
            doc["disconnection_reason"] = (
                "user_hangup" if any(r == "user" for r, _ in leg.turns) else "agent_hangup"
            )
            turns = leg.turns
        doc["transcript"] = "\n".join(
            f"{'Agent' if r == 'agent' else 'User'}: {t}" for r, t in turns
        )
        doc["transcript_object"] = [
            {"role": r, "content": t, "words": [{"word": w, "start": 0.0, "end": 0.1}
                                                for w in t.split()[:2]]}
            for r, t in turns
        ]  # fmt: skip
        doc["recording_url"] = f"{self.url}/recordings/{call.id}.wav"
        delay = leg.analysis_delay_s
        if delay is None or time.time() < call.created + leg.end_after_s + delay:
            return doc  # call_analysis not there yet
        doc["call_analysis"] = {
            "call_summary": leg.summary if leg.ending == "completed" else "Voicemail reached.",
            "in_voicemail": leg.ending == "voicemail",
            "user_sentiment": "Positive",
            "call_successful": leg.successful if leg.ending == "completed" else False,
            "custom_analysis_data": {"booked": leg.successful},
        }
        doc["call_cost"] = {"combined_cost": 12.5}
        return doc

    def webhook(self, call: FakeCall) -> tuple[bytes, dict[str, str]]:
        doc = self.doc(call)
        doc.pop("call_analysis", None)  # call_ended carries all fields but call_analysis
        return self._signed({"event": "call_ended", "call": doc})

    def later_webhook(self, call: FakeCall) -> Later | None:
        """call_analyzed, once the analysis is in the call object."""
        delay = call.leg.analysis_delay_s
        if not delay or call.leg.ending in ("no_answer", "busy", "error"):
            return None
        due = call.created + call.leg.end_after_s + delay
        return max(0.0, due - time.time()) + 0.01, lambda: self._signed(
            {"event": "call_analyzed", "call": self.doc(call)}
        )

    def _signed(self, event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(event).encode()
        key = "key_forged" if self.forge_webhooks else RETELL_KEY
        ms = int(time.time() * 1000)
        return body, {
            "content-type": "application/json",
            "x-retell-signature": retell_sign(key, body, ms),
        }


# -- Vapi ------------------------------------------------------------------------------------


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeVapi(FakeVoiceAgent):
    auth: str = "bearer"  # the Server URL credential: bearer | hmac

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/call", self._create)
        app.router.add_get("/call/{id}", self._get)

    async def _create(self, request: web.Request) -> web.Response:
        if not self.authorized(request, VAPI_KEY):
            return web.json_response({"message": "Invalid Key"}, status=401)
        body = await request.json()
        if not isinstance(body.get("customer"), Mapping) or "number" not in body["customer"]:
            return web.json_response({"message": ["customer.number required"]}, status=400)
        if not body.get("assistantId") or not body.get("phoneNumberId"):
            return web.json_response({"message": ["assistant required"]}, status=400)
        leg = self.next_leg()
        if leg.create_status:
            return web.json_response({"message": "upstream trouble"}, status=leg.create_status)
        call = FakeCall(secrets.token_hex(16), body, leg, time.time())
        self.calls.append(call)
        self.spawn_ender(call)
        return web.json_response(self.doc(call), status=201)

    async def _get(self, request: web.Request) -> web.Response:
        if not self.authorized(request, VAPI_KEY):
            return web.json_response({"message": "Invalid Key"}, status=401)
        call = self.by_id(request.match_info["id"])
        if call is None:
            return web.json_response({"message": "Not Found"}, status=404)
        call.gets += 1
        return web.json_response(self.doc(call))

    def doc(self, call: FakeCall) -> dict[str, Any]:
        body, leg = call.body, call.leg
        doc: dict[str, Any] = {
            "id": call.id,
            "orgId": "org_1",
            "type": "outboundPhoneCall",
            "status": "queued",
            "createdAt": _iso(call.created),
            "updatedAt": _iso(time.time()),
            "assistantId": body["assistantId"],
            "phoneNumberId": body["phoneNumberId"],
            "customer": body["customer"],
            "name": body.get("name"),
        }
        if not self.ended(call):
            doc["status"] = "ringing" if time.time() - call.created < 0.05 else "in-progress"
            return doc
        doc["status"] = "ended"
        reasons = {
            "no_answer": "customer-did-not-answer",
            "busy": "customer-busy",
            "voicemail": "voicemail",
            "error": "pipeline-error-openai-llm-failed",
        }
        turns: tuple[tuple[str, str], ...] = ()
        if leg.ending in reasons:
            doc["endedReason"] = reasons[leg.ending]
        else:
            turns = leg.turns
            person = any(r == "user" for r, _ in turns)
            doc["endedReason"] = "customer-ended-call" if person else "assistant-ended-call"
        if leg.ending in ("completed", "voicemail"):
            doc["startedAt"] = _iso(call.created)
            doc["endedAt"] = _iso(call.created + leg.connected_s)
        doc["cost"] = 0.12
        doc["artifact"] = {
            "transcript": "\n".join(f"{'AI' if r == 'agent' else 'User'}: {t}" for r, t in turns),
            "messages": [
                {"role": "bot" if r == "agent" else "user", "message": t, "time": 0}
                for r, t in turns
            ],
            "recordingUrl": f"{self.url}/recordings/{call.id}.wav",
        }
        doc["analysis"] = {
            "summary": leg.summary if leg.ending == "completed" else "",
            "successEvaluation": "true"
            if leg.successful and leg.ending == "completed"
            else "false",
            "structuredData": {"booked": leg.successful},
        }
        return doc

    def webhook(self, call: FakeCall) -> tuple[bytes, dict[str, str]]:
        doc = self.doc(call)
        message = {
            "type": "end-of-call-report",
            "endedReason": doc.get("endedReason"),
            "artifact": doc.get("artifact"),
            "analysis": doc.get("analysis"),
            "startedAt": doc.get("startedAt"),
            "endedAt": doc.get("endedAt"),
            "call": doc,
            "customer": doc["customer"],
            "timestamp": int(time.time() * 1000),
        }
        body = json.dumps({"message": message}).encode()
        secret = "forged" if self.forge_webhooks else VAPI_SECRET
        headers = {"content-type": "application/json"}
        if self.auth == "bearer":
            headers["Authorization"] = f"Bearer {secret}"
        else:
            stamp = str(int(time.time() * 1000))
            headers["x-timestamp"] = stamp
            headers["x-signature"] = hmac_signature(secret, stamp, body)
        return body, headers
