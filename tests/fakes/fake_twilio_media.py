"""Twilio Programmable Voice with Media Streams, on loopback, for the voice bridge (in its
own thread and event loop). Wire facts: shared/docs/providers.md section 6.

- ``POST /2010-04-01/Accounts/{AccountSid}/Calls.json`` (form, HTTP Basic
  ``AccountSid:AuthToken``) -> 201 with the call JSON. The call then plays out as
  Twilio's does: signed status callbacks (``ringing``, then ``in-progress``) to the
  ``StatusCallback``; the ``<Connect><Stream url>`` of the ``Twiml`` is opened as a
  WebSocket; ``connected`` and ``start`` frames, then the ``callee`` audio (mu-law 8 kHz)
  as ``media`` frames every 20 ms in real time, then silence for as long as the call
  lasts. Our ``media`` frames are collected (``received``); a ``mark`` is echoed once the
  audio sent before it has played (real time from its arrival).
- ``POST .../Calls/{CallSid}.json`` with ``Status=completed`` hangs up: a ``stop`` frame,
  the WebSocket closed, a ``completed`` callback.
- :meth:`FakeTwilio.drop` is the called party hanging up (the same, without our asking).

Callbacks are signed as Twilio signs them (``X-Twilio-Signature``: HMAC-SHA1 of the URL and
the sorted form parameters under the Auth Token, base64), computed here independently.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web

from tests.conftest import free_port

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "fake-twilio-auth-token"
FROM_NUMBER = "+14155550100"
FRAME_BYTES = 160  # 20 ms of mu-law 8 kHz


def twilio_signature(token: str, url: str, params: Mapping[str, Sequence[str]]) -> str:
    """X-Twilio-Signature of a form POST to ``url`` (providers.md, section 6)."""
    data = url
    for key in sorted(params):
        for value in sorted(set(params[key])):
            data += key + value
    digest = hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


@dataclass
class FakeCall:
    sid: str
    to: str
    from_: str
    stream_url: str
    status_callback: str
    status_events: list[str]
    time_limit: str | None
    status: str = "queued"
    stream_sid: str = field(default_factory=lambda: "MZ" + secrets.token_hex(16))
    received: bytearray = field(default_factory=bytearray)  # our audio, mu-law
    echoed: int = 0  # how much of it came back on the inbound track (echo)
    speech: bytearray = field(default_factory=bytearray)  # what the callee says, mu-law
    spoken: int = 0  # how much of it was streamed
    marks: list[str] = field(default_factory=list)  # marks echoed back
    frames_in: list[str] = field(default_factory=list)  # events of our frames, in order
    callbacks: list[tuple[str, int]] = field(default_factory=list)  # (status, our answer)
    ws: aiohttp.ClientWebSocketResponse | None = None
    hung_up_by_api: bool = False
    answered_at: float | None = None
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class FakeTwilio:
    def __init__(self, callee_audio: bytes = b"", ring_s: float = 0.2) -> None:
        self.callee_audio = callee_audio  # what the called party says once answered
        self.ring_s = ring_s
        self.calls: dict[str, FakeCall] = {}
        self.refuse_to: set[str] = set()  # numbers Twilio refuses to dial (error 21211)
        self.echo = False  # the callee's line echoes what we play back to us
        self.says_to: dict[str, bytes] = {}  # what the callee of a number says instead
        self.requests: list[str] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._run(self._start())

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _run(self, coro: Any, timeout: float = 20) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application()
        base = f"/2010-04-01/Accounts/{ACCOUNT_SID}"
        app.router.add_post(f"{base}/Calls.json", self._create)
        app.router.add_post(base + "/Calls/{sid}.json", self._update)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._session = aiohttp.ClientSession()

    def stop(self) -> None:
        async def down() -> None:
            for call in self.calls.values():
                if call.task is not None:
                    call.task.cancel()
            if self._session is not None:
                await self._session.close()
            if self._runner is not None:
                await self._runner.cleanup()

        self._run(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def provider_table(self) -> dict[str, Any]:
        """The ``[providers.twilio]`` table that points satsgate here."""
        return {
            "kind": "twilio",
            "base_url": self.url,
            "account_sid": ACCOUNT_SID,
            "api_key": AUTH_TOKEN,
            "from_number": FROM_NUMBER,
        }

    # -- what tests ask --------------------------------------------------------------------

    def drop(self, sid: str) -> None:
        """The called party hangs up."""
        self._run(self._end_call(self.calls[sid], "completed"))

    def callee_says(self, sid: str, audio: bytes) -> None:
        """The called party speaks (again)."""

        async def say() -> None:
            self.calls[sid].speech += audio

        self._run(say())

    async def wait_for(self, predicate: Any, within_s: float = 20) -> None:
        """Wait (in the caller's loop) until ``predicate()`` holds."""
        deadline = time.monotonic() + within_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting on the fake Twilio")
            await asyncio.sleep(0.05)

    # -- REST ------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        expected = "Basic " + base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        return request.headers.get("Authorization") == expected

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response(
                {"code": 20003, "message": "Authenticate", "status": 401}, status=401
            )
        form = parse_qs(await request.text(), keep_blank_values=True)
        self.requests.append("create " + " ".join(sorted(form)))
        twiml = form.get("Twiml", [""])[0]
        stream = ET.fromstring(twiml).find("./Connect/Stream")
        if stream is None or not form.get("To") or not form.get("From"):
            return web.json_response(
                {"code": 21205, "message": "Invalid TwiML", "status": 400}, status=400
            )
        if form["To"][0] in self.refuse_to:
            return web.json_response(
                {
                    "code": 21211,
                    "message": f"The 'To' number {form['To'][0]} is not a valid phone number.",
                    "more_info": "https://www.twilio.com/docs/errors/21211",
                    "status": 400,
                },
                status=400,
            )
        sid = "CA" + secrets.token_hex(16)
        call = FakeCall(
            sid=sid,
            to=form["To"][0],
            from_=form["From"][0],
            stream_url=str(stream.get("url")),
            status_callback=form.get("StatusCallback", [""])[0],
            status_events=form.get("StatusCallbackEvent", []),
            time_limit=form["TimeLimit"][0] if "TimeLimit" in form else None,
        )
        self.calls[sid] = call
        call.task = asyncio.ensure_future(self._play(call))
        return web.json_response(self._call_json(call), status=201)

    async def _update(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": 20003, "status": 401}, status=401)
        call = self.calls.get(request.match_info["sid"])
        if call is None:
            return web.json_response({"code": 20404, "status": 404}, status=404)
        form = parse_qs(await request.text())
        self.requests.append(f"update {call.sid} {form.get('Status', [''])[0]}")
        if form.get("Status") == ["completed"]:
            call.hung_up_by_api = True
            # Twilio answers first; the stream's stop and the callback follow.
            self._spawn(self._end_call(call, "completed"))
        return web.json_response(self._call_json(call))

    def _call_json(self, call: FakeCall) -> dict[str, Any]:
        return {
            "sid": call.sid,
            "account_sid": ACCOUNT_SID,
            "to": call.to,
            "from": call.from_,
            "status": call.status,
            "direction": "outbound-api",
            "duration": None,
            "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls/{call.sid}.json",
        }

    # -- the call --------------------------------------------------------------------------

    async def _callback(self, call: FakeCall, status: str, **extra: str) -> None:
        event = {"in-progress": "answered"}.get(status, status)
        if not call.status_callback or event not in call.status_events:
            return
        params = {
            "AccountSid": ACCOUNT_SID,
            "CallSid": call.sid,
            "CallStatus": status,
            "From": call.from_,
            "To": call.to,
            "Direction": "outbound-api",
            "ApiVersion": "2010-04-01",
            **extra,
        }
        signature = twilio_signature(
            AUTH_TOKEN, call.status_callback, {k: [v] for k, v in params.items()}
        )
        assert self._session is not None
        try:
            async with self._session.post(
                call.status_callback, data=params, headers={"X-Twilio-Signature": signature}
            ) as resp:
                call.callbacks.append((status, resp.status))
        except aiohttp.ClientError:  # the node is down: Twilio would retry; the fake doesn't
            call.callbacks.append((status, 0))

    async def _play(self, call: FakeCall) -> None:
        await self._callback(call, "initiated")
        call.status = "ringing"
        await self._callback(call, "ringing")
        await asyncio.sleep(self.ring_s)
        call.status = "in-progress"
        call.answered_at = time.monotonic()
        await self._callback(call, "in-progress")
        assert self._session is not None
        ws = await self._session.ws_connect(call.stream_url)
        call.ws = ws
        reader = asyncio.ensure_future(self._read(call, ws))
        try:
            await ws.send_str(
                json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            )
            start = {
                "streamSid": call.stream_sid,
                "accountSid": ACCOUNT_SID,
                "callSid": call.sid,
                "tracks": ["inbound"],
                "customParameters": {},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            }
            await ws.send_str(
                json.dumps(
                    {
                        "event": "start",
                        "sequenceNumber": "1",
                        "streamSid": call.stream_sid,
                        "start": start,
                    }
                )
            )
            began = time.monotonic()
            chunk = 0
            call.speech += self.says_to.get(call.to, self.callee_audio)
            while call.status == "in-progress" and not ws.closed:
                piece = bytes(call.speech[call.spoken : call.spoken + FRAME_BYTES])
                call.spoken += len(piece)
                if self.echo and not piece and call.echoed < len(call.received):
                    # A line with an echo: what we play comes back on the inbound track.
                    piece = bytes(call.received[call.echoed : call.echoed + FRAME_BYTES])
                    call.echoed += len(piece)
                piece += b"\xff" * (FRAME_BYTES - len(piece))  # mu-law silence after
                chunk += 1
                frame = {
                    "event": "media",
                    "sequenceNumber": str(chunk + 1),
                    "streamSid": call.stream_sid,
                    "media": {
                        "track": "inbound",
                        "chunk": str(chunk),
                        "timestamp": str(chunk * 20),
                        "payload": base64.b64encode(piece).decode(),
                    },
                }
                await ws.send_str(json.dumps(frame))
                delay = began + chunk * 0.02 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            if call.status == "in-progress":  # our side closed the stream: the call ends
                await self._end_call(call, "completed")
            reader.cancel()

    async def _read(self, call: FakeCall, ws: aiohttp.ClientWebSocketResponse) -> None:
        played_until = time.monotonic()
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(message.data)
            call.frames_in.append(frame["event"])
            assert frame.get("streamSid") == call.stream_sid, frame
            if frame["event"] == "media":
                audio = base64.b64decode(frame["media"]["payload"])
                call.received += audio
                played_until = max(played_until, time.monotonic()) + len(audio) / 8000
            elif frame["event"] == "mark":
                name = frame["mark"]["name"]
                self._spawn(self._echo_mark(call, ws, name, played_until))

    async def _echo_mark(
        self, call: FakeCall, ws: aiohttp.ClientWebSocketResponse, name: str, at: float
    ) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        if ws.closed:
            return
        call.marks.append(name)
        frame = {
            "event": "mark",
            "sequenceNumber": "0",
            "streamSid": call.stream_sid,
            "mark": {"name": name},
        }
        await ws.send_str(json.dumps(frame))

    async def _end_call(self, call: FakeCall, status: str) -> None:
        if call.done.is_set():
            return
        call.done.set()
        was_live = call.status == "in-progress"
        call.status = status
        ws = call.ws
        if ws is not None and not ws.closed:
            stop = {
                "event": "stop",
                "sequenceNumber": "0",
                "streamSid": call.stream_sid,
                "stop": {"accountSid": ACCOUNT_SID, "callSid": call.sid},
            }
            try:
                await ws.send_str(json.dumps(stop))
                await ws.close()
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass
        duration = int(time.monotonic() - call.answered_at) if call.answered_at else 0
        if was_live or status != "completed":
            await self._callback(call, status, CallDuration=str(duration))
