"""A loopback fake of Twilio's REST API (Messages and Calls, 2010-04-01), from its API
reference (providers.md section 6): form-encoded bodies, HTTP Basic auth
``AccountSid:AuthToken``, JSON answers shaped as Twilio's, errors as
``{code, message, more_info, status}``; and the webhooks Twilio sends: status callbacks
of messages and calls, and inbound messages, each signed with ``X-Twilio-Signature``
(HMAC-SHA1 of the full URL and the sorted form parameters with the Auth Token).

Scripting: ``fail_next`` (status, code) answers the next creates with that error;
``sms_final`` the final status of the next messages (delivered by default);
``call_outcome`` the next call's ending: ("completed", seconds) or ("no-answer", 0) ...
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import threading
import xml.etree.ElementTree as ET
from collections import deque
from email.utils import formatdate
from typing import Any

import httpx
from aiohttp import web

from tests.conftest import free_port

ACCOUNT_SID = "AC" + "1f" * 16
AUTH_TOKEN = "twilio-test-auth-token-0123456789"
FROM_NUMBER = "+15005550006"
# An API key of the account (REST auth as ApiKeySid:Secret; webhooks stay signed with the
# Auth Token).
API_KEY_SID = "SK" + "2e" * 16
API_KEY_SECRET = "twilio-test-api-key-secret"


def twilio_signature(token: str, url: str, params: list[tuple[str, str]]) -> str:
    """Twilio's signing: the URL, then every name with its values, names sorted, the
    values of one name sorted (written here independently of satsgate's check)."""
    by_name: dict[str, list[str]] = {}
    for name, value in params:
        by_name.setdefault(name, []).append(value)
    data = url + "".join(
        name + value for name in sorted(by_name) for value in sorted(by_name[name])
    )
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def _now() -> str:
    return formatdate(usegmt=False).replace("-0000", "+0000")


class FakeTwilio:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[dict[str, Any]] = []  # every create: method, path, form pairs
        self.messages: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.fail_next: deque[tuple[int, int | None]] = deque()
        self.sms_final: deque[str] = deque()
        self.call_outcome: deque[tuple[str, int]] = deque()
        self.callback_answers: list[tuple[str, int]] = []  # (status sent, satsgate's HTTP answer)
        self.callbacks = True  # send status callbacks at all
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self._sender: httpx.AsyncClient | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        base = f"/2010-04-01/Accounts/{ACCOUNT_SID}"
        app.router.add_post(f"{base}/Messages.json", self._create_message)
        app.router.add_get(f"{base}/Messages/{{sid}}.json", self._get_message)
        app.router.add_post(f"{base}/Calls.json", self._create_call)
        app.router.add_get(f"{base}/Calls/{{sid}}.json", self._get_call)
        app.router.add_post(f"{base}/Calls/{{sid}}.json", self._update_call)
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

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    # -- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _error(status: int, code: int | None, message: str = "error") -> web.Response:
        body = {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        }
        return web.json_response(body, status=status)

    @staticmethod
    def _authorized(request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        return any(
            given == "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
            for user, secret in ((ACCOUNT_SID, AUTH_TOKEN), (API_KEY_SID, API_KEY_SECRET))
        )

    async def _form(self, request: web.Request) -> list[tuple[str, str]] | None:
        if request.content_type != "application/x-www-form-urlencoded":
            return None
        form = await request.post()
        return [(k, str(v)) for k, v in form.items()]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def post_signed(
        self, url: str, params: list[tuple[str, str]], *, token: str = AUTH_TOKEN
    ) -> httpx.Response:
        """POST a form to ``url`` as Twilio does, signed with ``token``."""
        assert self._sender is not None
        headers = {"X-Twilio-Signature": twilio_signature(token, url, params)}
        return await self._sender.post(url, data=_multi(params), headers=headers)

    def send_inbound(
        self, url: str, sender: str, body: str, *, opt_out_type: str = ""
    ) -> httpx.Response:
        """An inbound SMS (e.g. a STOP reply) to the node's number, signed."""
        params = [
            ("MessageSid", "SM" + secrets.token_hex(16)),
            ("SmsSid", "SM" + secrets.token_hex(16)),
            ("AccountSid", ACCOUNT_SID),
            ("From", sender),
            ("To", FROM_NUMBER),
            ("Body", body),
            ("NumMedia", "0"),
            ("SmsStatus", "received"),
            ("ApiVersion", "2010-04-01"),
        ]
        if opt_out_type:
            params.append(("OptOutType", opt_out_type))
        return asyncio.run_coroutine_threadsafe(self.post_signed(url, params), self.loop).result(10)

    # -- messages ----------------------------------------------------------------------------

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        form = await self._form(request)
        if form is None:
            return self._error(400, 21601, "form-encoded body expected")
        self.requests.append({"path": request.path, "form": form})
        fields = dict(form)
        if self.fail_next:
            status, code = self.fail_next.popleft()
            return self._error(status, code)
        to = fields.get("To", "")
        if not to.startswith("+") or not to[1:].isdigit():
            return self._error(400, 21211, f"The 'To' number {to} is not a valid phone number.")
        if not fields.get("Body"):
            return self._error(400, 21602, "Message body is required.")
        if "From" not in fields and "MessagingServiceSid" not in fields:
            return self._error(400, 21603, "A 'From' or 'MessagingServiceSid' is required.")
        sid = "SM" + secrets.token_hex(16)
        now = _now()
        message = {
            "sid": sid, "account_sid": ACCOUNT_SID, "messaging_service_sid": None,
            "to": to, "from": fields.get("From"), "body": fields["Body"], "status": "queued",
            "num_segments": "1", "num_media": "0", "direction": "outbound-api",
            "api_version": "2010-04-01", "price": None, "price_unit": "USD",
            "error_code": None, "error_message": None, "date_created": now,
            "date_updated": now, "date_sent": None,
            "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}.json",
            "subresource_uris": {
                "media": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}/Media.json"
            },
        }  # fmt: skip
        self.messages[sid] = message
        final = self.sms_final.popleft() if self.sms_final else "delivered"
        callback = fields.get("StatusCallback")
        if callback and self.callbacks:
            self._spawn(self._message_callbacks(message, callback, final))
        else:
            message["_final"] = final
        return web.json_response(message, status=201)

    async def _message_callbacks(self, message: dict[str, Any], url: str, final: str) -> None:
        for status in ("sent", final):
            await asyncio.sleep(0.05)
            message["status"] = status
            message["date_updated"] = _now()
            params = [
                ("MessageSid", message["sid"]), ("SmsSid", message["sid"]),
                ("AccountSid", ACCOUNT_SID), ("From", str(message["from"])),
                ("To", message["to"]), ("MessageStatus", status), ("SmsStatus", status),
                ("ApiVersion", "2010-04-01"),
            ]  # fmt: skip
            if status in ("undelivered", "failed"):
                message["error_code"] = 30003
                params.append(("ErrorCode", "30003"))
            resp = await self.post_signed(url, params)
            self.callback_answers.append((status, resp.status_code))

    async def _get_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        message = self.messages.get(request.match_info["sid"])
        if message is None:
            return self._error(404, 20404, "not found")
        if "_final" in message:  # no callbacks: the status moves on when read
            message["status"] = message.pop("_final")
        return web.json_response({k: v for k, v in message.items() if not k.startswith("_")})

    # -- calls -------------------------------------------------------------------------------

    async def _create_call(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        form = await self._form(request)
        if form is None:
            return self._error(400, 21601, "form-encoded body expected")
        self.requests.append({"path": request.path, "form": form})
        fields = dict(form)
        if self.fail_next:
            status, code = self.fail_next.popleft()
            return self._error(status, code)
        to, twiml = fields.get("To", ""), fields.get("Twiml")
        if not to.startswith("+"):
            return self._error(400, 21217, "Phone number does not appear to be valid")
        if not fields.get("From"):
            return self._error(400, 21603, "From is required")
        if twiml is None and "Url" not in fields:
            return self._error(400, 21205, "Url or Twiml is required")
        if twiml is not None:
            try:
                ET.fromstring(twiml)
            except ET.ParseError:
                return self._error(400, 12100, "Document parse failure")
        sid = "CA" + secrets.token_hex(16)
        call = {
            "sid": sid, "account_sid": ACCOUNT_SID, "parent_call_sid": None, "to": to,
            "from": fields["From"], "status": "queued", "start_time": None, "end_time": None,
            "duration": None, "price": None, "direction": "outbound-api", "answered_by": None,
            "date_created": _now(), "date_updated": _now(),
            "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls/{sid}.json",
        }  # fmt: skip
        self.calls[sid] = call
        outcome = self.call_outcome.popleft() if self.call_outcome else ("completed", 75)
        events = [v for k, v in form if k == "StatusCallbackEvent"] or ["completed"]
        callback = fields.get("StatusCallback")
        if "Url" in fields:
            call["_url"] = fields["Url"]
        if callback and self.callbacks:
            self._spawn(self._call_callbacks(call, callback, events, outcome))
            return web.json_response(_public(call), status=201)
        answer = web.json_response(_public(call), status=201)
        call["status"], call["duration"] = outcome[0], str(outcome[1])  # ended, unreported
        return answer

    async def _call_callbacks(
        self, call: dict[str, Any], url: str, events: list[str], outcome: tuple[str, int]
    ) -> None:
        final, seconds = outcome
        steps = [("initiated", "queued"), ("ringing", "ringing")]
        if final == "completed":
            steps.append(("answered", "in-progress"))
        steps.append(("completed", final))
        for event, status in steps:
            await asyncio.sleep(0.05)
            call["status"] = status
            if event == "answered" and "_url" in call:  # the call asks for its TwiML
                params = [("CallSid", call["sid"]), ("AccountSid", ACCOUNT_SID),
                          ("CallStatus", "in-progress"), ("From", call["from"]),
                          ("To", call["to"]), ("Direction", "outbound-api")]  # fmt: skip
                resp = await self.post_signed(call["_url"], params)
                call["_twiml"] = resp.text if resp.status_code == 200 else None
            if event != "completed" and event not in events:
                continue
            params = [
                ("CallSid", call["sid"]), ("AccountSid", ACCOUNT_SID), ("From", call["from"]),
                ("To", call["to"]), ("CallStatus", status), ("Direction", "outbound-api"),
                ("ApiVersion", "2010-04-01"), ("Timestamp", _now()),
                ("SequenceNumber", str(len(self.callback_answers))),
            ]  # fmt: skip
            if event == "completed":
                call["duration"] = str(seconds)
                params += [("CallDuration", str(seconds)), ("Duration", str((seconds + 59) // 60))]
            resp = await self.post_signed(url, params)
            self.callback_answers.append((status, resp.status_code))

    async def _get_call(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        call = self.calls.get(request.match_info["sid"])
        if call is None:
            return self._error(404, 20404, "not found")
        return web.json_response(_public(call))

    async def _update_call(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        call = self.calls.get(request.match_info["sid"])
        if call is None:
            return self._error(404, 20404, "not found")
        form = dict(await self._form(request) or [])
        if form.get("Status") == "completed":
            call["status"] = "completed"
        return web.json_response(_public(call))


def _public(resource: dict[str, Any]) -> dict[str, Any]:
    """A resource without the fake's own bookkeeping (keys starting with _)."""
    return {k: v for k, v in resource.items() if not k.startswith("_")}


def _multi(params: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in params:
        out.setdefault(name, []).append(value)
    return out
