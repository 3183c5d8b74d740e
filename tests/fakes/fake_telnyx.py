"""A loopback fake of Telnyx's v2 API (/work/shared/docs/providers.md section 7), in its
own thread and event loop as a remote provider would be.

- ``Authorization: Bearer <key>`` on every API call, else 401 with Telnyx's error body;
- ``POST /v2/faxes`` (JSON) fetches ``media_url`` as Telnyx does, answers ``{"data":
  {...}}`` and then sends the scripted webhooks (``fax.queued``,
  ``fax.sending.started``, ``fax.delivered`` or ``fax.failed``) to ``webhook_url``,
  each signed with the fake account's Ed25519 key over ``f"{timestamp}|{body}"``;
- ``GET /v2/faxes/{id}`` answers the fax's current record;
- :meth:`FakeTelnyx.inbound_fax` sends a ``fax.received`` webhook whose ``media_url``
  is a document the fake serves (or any URL a test gives);
- ``POST /v2/messages`` answers the message object and then reports ``message.sent``
  and ``message.finalized`` (delivered) to its ``webhook_url``;
  :meth:`FakeTelnyx.inbound_sms` sends a ``message.received``;
- ``POST /v2/calls`` dials: ``call.initiated``, then ``call.answered`` (or a
  ``call.hangup`` with ``user_busy``); the commands ``speak``, ``playback_start`` and
  ``hangup`` (``/v2/calls/{id}/actions/...``) are recorded and answered with
  ``call.speak.ended`` / ``call.playback.ended`` / ``call.hangup``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.conftest import at_origin, free_port

API_KEY = "KEY_test_telnyx"


def public_key_b64(key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def signed_headers(key: Ed25519PrivateKey, body: bytes, stamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if stamp is None else stamp)
    signature = key.sign(ts.encode() + b"|" + body)
    return {
        "content-type": "application/json",
        "telnyx-timestamp": ts,
        "telnyx-signature-ed25519": base64.b64encode(signature).decode(),
    }


def event(event_type: str, payload: dict[str, Any]) -> bytes:
    doc = {
        "data": {
            "event_type": event_type,
            "id": str(uuid.uuid4()),
            "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
            "record_type": "event",
            "payload": payload,
        },
        "meta": {"attempt": 1, "delivered_to": "https://example.invalid/webhooks"},
    }
    return json.dumps(doc).encode()


# A number whose messages Telnyx refuses with 40300: it sent STOP at the carrier.
OPTED_OUT_NUMBER = "+15005550010"


@dataclass
class FaxScript:
    outcome: str = "delivered"  # delivered | failed | never
    failure_reason: str = "receiver_call_dropped"
    create_errors: list[int] = field(default_factory=list)  # statuses of the first creates
    step_s: float = 0.05
    # When set, the create's answer (its status as at creation) is sent this many seconds
    # after the last status webhook, as when the answer is slow on the way back.
    answer_after_webhooks_s: float | None = None


@dataclass
class CallScript:
    outcome: str = "answered"  # answered | busy
    talk_s: float = 0.05  # how long each speak lasts


@dataclass
class CallRecord:
    id: str
    body: dict[str, Any]
    commands: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    alive: bool = True


@dataclass
class FaxRecord:
    id: str
    body: dict[str, Any]
    media: bytes
    status: str = "queued"
    page_count: int | None = None


class FakeTelnyx:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = Ed25519PrivateKey.generate()
        self.public_key = public_key_b64(self.key)
        self.script = FaxScript()
        self.call_script = CallScript()
        self.faxes: dict[str, FaxRecord] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, CallRecord] = {}
        self.creates: list[int] = []  # the status answered to each POST /v2/faxes
        self.media: dict[str, bytes] = {}
        self.media_gets: list[str] = []
        self.webhook_answers: list[int] = []
        # Where a load balancer sends the webhooks (scheme and host put in place of the
        # requested URL's); None: the URL as requested.
        self.webhook_origin: str | None = None
        self.unauthorized = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._sender: httpx.AsyncClient | None = None
        self.run(self._start())

    def run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v2/faxes", self._create_fax)
        app.router.add_get("/v2/faxes/{id}", self._get_fax)
        app.router.add_get("/media/{name}", self._media)
        app.router.add_post("/v2/messages", self._create_message)
        app.router.add_get("/v2/messages/{id}", self._get_message)
        app.router.add_post("/v2/calls", self._dial)
        app.router.add_get("/v2/calls/{id}", self._get_call)
        app.router.add_post("/v2/calls/{id}/actions/{action}", self._command)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._sender = httpx.AsyncClient(timeout=10)

    def stop(self) -> None:
        async def down() -> None:
            for task in list(self._tasks):
                task.cancel()
            if self._sender is not None:
                await self._sender.aclose()
            if self._runner is not None:
                await self._runner.cleanup()

        self.run(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    # -- API --------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        ok = request.headers.get("Authorization") == f"Bearer {API_KEY}"
        if not ok:
            self.unauthorized += 1
        return ok

    @staticmethod
    def _error(status: int, code: str, title: str) -> web.Response:
        body = {"errors": [{"code": code, "title": title, "detail": title}]}
        return web.json_response(body, status=status)

    async def _create_fax(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        if self.script.create_errors:
            status = self.script.create_errors.pop(0)
            self.creates.append(status)
            code = "10011" if status == 429 else "10007"
            return self._error(status, code, "Too many requests" if status == 429 else "Error")
        body = await request.json()
        for key in ("connection_id", "media_url", "to", "from"):
            if not isinstance(body.get(key), str) or not body[key]:
                self.creates.append(422)
                return self._error(422, "10002", f"{key} is required")
        async with httpx.AsyncClient(timeout=10) as client:  # Telnyx fetches the PDF
            resp = await client.get(body["media_url"])
        if resp.status_code != 200 or not resp.content.startswith(b"%PDF-"):
            self.creates.append(422)
            return self._error(422, "10015", "media_url could not be fetched")
        fax = FaxRecord(id=str(uuid.uuid4()), body=body, media=resp.content)
        self.faxes[fax.id] = fax
        self.creates.append(202)
        answer = {"data": self.doc(fax)}
        if body.get("webhook_url"):
            if self.script.answer_after_webhooks_s is not None:
                await self._progress(fax)
                await asyncio.sleep(self.script.answer_after_webhooks_s)
            else:
                self._spawn(self._progress(fax))
        return web.json_response(answer, status=202)

    async def _get_fax(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        fax = self.faxes.get(request.match_info["id"])
        if fax is None:
            return self._error(404, "10005", "Resource not found")
        return web.json_response({"data": self.doc(fax)})

    async def _media(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.media_gets.append(name)
        data = self.media.get(name)
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/pdf")

    def doc(self, fax: FaxRecord) -> dict[str, Any]:
        body = fax.body
        doc: dict[str, Any] = {
            "id": fax.id,
            "record_type": "fax",
            "status": fax.status,
            "connection_id": body["connection_id"],
            "direction": "outbound",
            "from": body["from"],
            "to": body["to"],
            "media_url": body["media_url"],
            "quality": "high",
            "created_at": "2026-11-25T12:00:00Z",
        }
        if fax.status == "failed":
            doc["failure_reason"] = self.script.failure_reason
        return doc

    # -- webhooks -------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _payload(self, fax: FaxRecord, status: str) -> dict[str, Any]:
        body = fax.body
        payload: dict[str, Any] = {
            "fax_id": fax.id,
            "connection_id": body["connection_id"],
            "direction": "outbound",
            "from": body["from"],
            "to": body["to"],
            "status": status,
            "original_media_url": body["media_url"],
            "client_state": body.get("client_state"),
            "user_id": "19a75cea-02c6-4b9a-84fa-c9bc8341feb8",
        }
        if status == "delivered":
            payload["page_count"] = fax.page_count
            payload["call_duration_secs"] = 40
        if status == "failed":
            payload["failure_reason"] = self.script.failure_reason
        return payload

    async def _progress(self, fax: FaxRecord) -> None:
        url = fax.body["webhook_url"]
        steps = [("fax.queued", "queued"), ("fax.media.processed", "media.processed"),
                 ("fax.sending.started", "sending")]  # fmt: skip
        if self.script.outcome == "delivered":
            steps.append(("fax.delivered", "delivered"))
        elif self.script.outcome == "failed":
            steps.append(("fax.failed", "failed"))
        for event_type, status in steps:
            await asyncio.sleep(self.script.step_s)
            fax.status = status
            await self.post(url, event(event_type, self._payload(fax, status)))

    async def post(self, url: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        assert self._sender is not None
        try:
            resp = await self._sender.post(
                at_origin(url, self.webhook_origin),
                content=body,
                headers=headers or signed_headers(self.key, body),
            )
            status = resp.status_code
        except httpx.HTTPError:
            status = 0
        self.webhook_answers.append(status)
        return status

    def serve(self, data: bytes) -> str:
        name = secrets.token_hex(8)
        self.media[name] = data
        return f"{self.url}/media/{name}"

    def inbound_fax(
        self,
        webhook_url: str,
        to: str,
        sender: str,
        media_url: str,
        pages: int = 1,
        key: Ed25519PrivateKey | None = None,
        stamp: int | None = None,
    ) -> int:
        """Send a ``fax.received`` webhook, signed with ``key`` (default: the account's)
        at ``stamp`` (default: now); the status satsgate answered."""
        payload = {
            "fax_id": str(uuid.uuid4()),
            "connection_id": "fax-app-1",
            "direction": "inbound",
            "from": sender,
            "to": to,
            "status": "received",
            "media_url": media_url,
            "page_count": pages,
            "user_id": "19a75cea-02c6-4b9a-84fa-c9bc8341feb8",
        }
        body = event("fax.received", payload)
        headers = signed_headers(key or self.key, body, stamp)
        return int(self.run(self.post(webhook_url, body, headers)))

    # -- messaging ----------------------------------------------------------------------------

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        body = await request.json()
        if (
            not body.get("to")
            or not body.get("text")
            or not (body.get("from") or body.get("messaging_profile_id"))
        ):
            return self._error(422, "10002", "to, text and from are required")
        if body["to"] == OPTED_OUT_NUMBER:  # the recipient sent STOP to the carrier
            return self._error(400, "40300", "Blocked due to STOP message")
        if body["to"] == "+15005550009":
            resp = self._error(422, "40310", "Invalid 'to' address")
            doc = json.loads(resp.text or "{}")
            doc["errors"][0]["source"] = {"pointer": "/to"}
            return web.json_response(doc, status=422)
        message = {
            "id": str(uuid.uuid4()),
            "record_type": "message",
            "direction": "outbound",
            "type": "SMS",
            "text": body["text"],
            "parts": 1,
            "from": {"phone_number": body.get("from"), "carrier": "Telnyx", "line_type": "VoIP"},
            "to": [{"phone_number": body["to"], "carrier": "T-Mobile", "line_type": "Wireless",
                    "status": "queued"}],
            "media": [],
            "cost": None,
            "errors": [],
            "webhook_url": body.get("webhook_url"),
            "messaging_profile_id": body.get("messaging_profile_id"),
        }  # fmt: skip
        self.messages[message["id"]] = message
        if body.get("webhook_url"):
            self._spawn(self._message_progress(message))
        return web.json_response({"data": message})

    async def _get_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        message = self.messages.get(request.match_info["id"])
        if message is None:
            return self._error(404, "10005", "Resource not found")
        return web.json_response({"data": message})

    async def _message_progress(self, message: dict[str, Any]) -> None:
        for event_type, status in (("message.sent", "sent"), ("message.finalized", "delivered")):
            await asyncio.sleep(self.script.step_s)
            message["to"][0]["status"] = status
            await self.post(message["webhook_url"], event(event_type, dict(message)))

    def inbound_sms(self, webhook_url: str, sender: str, to: str, text: str) -> int:
        payload = {
            "id": str(uuid.uuid4()),
            "record_type": "message",
            "direction": "inbound",
            "type": "SMS",
            "text": text,
            "from": {"phone_number": sender, "carrier": "T-Mobile", "line_type": "Wireless"},
            "to": [{"phone_number": to, "status": "webhook_delivered"}],
        }
        return int(self.run(self.post(webhook_url, event("message.received", payload))))

    # -- Call Control -------------------------------------------------------------------------

    async def _dial(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        body = await request.json()
        for key in ("connection_id", "to", "from"):
            if not body.get(key):
                return self._error(422, "10002", f"{key} is required")
        call = CallRecord(id="v3:" + secrets.token_urlsafe(16), body=body)
        self.calls[call.id] = call
        if body.get("webhook_url"):
            self._spawn(self._ring(call))
        data = {"call_control_id": call.id, "call_leg_id": str(uuid.uuid4()),
                "call_session_id": str(uuid.uuid4()), "is_alive": True, "record_type": "call",
                "client_state": body.get("client_state")}  # fmt: skip
        return web.json_response({"data": data})

    def _call_payload(self, call: CallRecord, **extra: Any) -> dict[str, Any]:
        return {"call_control_id": call.id, "connection_id": call.body["connection_id"],
                "from": call.body["from"], "to": call.body["to"], "direction": "outgoing",
                "client_state": call.body.get("client_state"), **extra}  # fmt: skip

    async def _ring(self, call: CallRecord) -> None:
        url = call.body["webhook_url"]
        await asyncio.sleep(self.call_script.talk_s)
        await self.post(url, event("call.initiated", self._call_payload(call, state="bridging")))
        await asyncio.sleep(self.call_script.talk_s)
        if self.call_script.outcome == "busy":
            call.alive = False
            payload = self._call_payload(call, hangup_cause="user_busy", hangup_source="callee")
            await self.post(url, event("call.hangup", payload))
            return
        await self.post(url, event("call.answered", self._call_payload(call, state="answered")))

    async def _get_call(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        call = self.calls.get(request.match_info["id"])
        if call is None:
            return self._error(404, "10005", "Resource not found")
        return web.json_response({"data": {"call_control_id": call.id, "is_alive": call.alive,
                                           "record_type": "call"}})  # fmt: skip

    async def _command(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "10009", "Authentication failed")
        call = self.calls.get(request.match_info["id"])
        if call is None or not call.alive:
            return self._error(422, "90018", "Call has already ended")
        action = request.match_info["action"]
        body = await request.json()
        call.commands.append((action, body))
        url = call.body["webhook_url"]
        if action == "speak":
            self._spawn(self._after(url, "call.speak.ended", call))
        elif action == "playback_start":
            self._spawn(self._after(url, "call.playback.ended", call))
        elif action == "hangup":
            call.alive = False
            payload = self._call_payload(call, hangup_cause="normal_clearing",
                                         hangup_source="caller")  # fmt: skip
            self._spawn(self._after(url, "call.hangup", call, payload))
        return web.json_response({"data": {"result": "ok"}})

    async def _after(
        self, url: str, event_type: str, call: CallRecord, payload: dict[str, Any] | None = None
    ) -> None:
        await asyncio.sleep(self.call_script.talk_s)
        await self.post(url, event(event_type, payload or self._call_payload(call)))
