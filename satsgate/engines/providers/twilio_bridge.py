"""The voice bridge on Twilio: Programmable Voice dials, Media Streams carry the audio.

The Twilio provider kind (``engines/providers/twilio.py``) serves the engine name
``voice_bridge`` with :class:`TwilioBridgeEngine`, built on its REST client::

    [providers.twilio]
    kind = "twilio"
    api_key_env = "TWILIO_AUTH_TOKEN"
    account_sid = "AC..."
    from_number = "+14155550100"      # the caller id: a number of the account

    [engines]
    voice_bridge = "twilio"

The call is created with TwiML ``<Connect><Stream url="wss://.../api/voice-bridge/media/
<token>"/></Connect>``: once answered, Twilio opens that WebSocket and streams the
called party's audio as JSON text frames (``connected``, ``start``, ``media``, ``mark``,
``stop``); satsgate plays speech back with ``media`` frames and a ``mark`` after each
utterance, which Twilio echoes once it has played. Status callbacks (``initiated``,
``ringing``, ``answered``, ``completed``) are verified with ``X-Twilio-Signature``.
Wire facts: shared/docs/providers.md, section 6.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from xml.sax.saxutils import quoteattr

from satsgate.engines.config import ProviderConfig
from satsgate.engines.voice_bridge import (
    BridgeDial,
    CallProgress,
    CallStatus,
    StreamAudio,
    StreamEvent,
    StreamMark,
    StreamStarted,
    StreamStopped,
)

# The status callbacks the bridge asks for (Twilio's StatusCallbackEvent values).
STATUS_EVENTS = ("initiated", "ringing", "answered", "completed")

# Twilio's call status -> the session's view of the call.
_PROGRESS: Mapping[str, CallProgress] = {
    "queued": "dialing",
    "initiated": "dialing",
    "ringing": "ringing",
    "in-progress": "answered",
    "answered": "answered",
    "completed": "ended",
    "busy": "ended",
    "failed": "ended",
    "no-answer": "ended",
    "canceled": "ended",
}


class TwilioCalls(Protocol):
    """What the bridge uses of the Twilio provider's REST client."""

    async def create_call(
        self,
        *,
        to: str,
        from_: str,
        twiml: str,
        status_callback: str,
        status_events: Sequence[str],
        time_limit_s: int | None,
    ) -> str:
        """POST Calls.json; the call SID. EngineError on a refusal."""
        ...

    async def hang_up(self, call_sid: str) -> None:
        """POST Calls/{sid}.json ``Status=completed``."""
        ...

    def valid_signature(
        self, url: str, params: Mapping[str, Sequence[str]], signature: str
    ) -> bool:
        """``X-Twilio-Signature`` of a form POST to ``url``."""
        ...


def stream_twiml(media_url: str) -> str:
    """The TwiML that connects the answered call to ``media_url`` both ways."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(media_url)}/></Connect></Response>"
    )


class TwilioBridgeEngine:
    """VoiceBridgeEngine (satsgate.engines.voice_bridge) on Twilio."""

    def __init__(self, client: TwilioCalls, config: ProviderConfig) -> None:
        self.client = client
        self.from_number = str(config.options.get("from_number", ""))

    async def dial(self, request: BridgeDial) -> str:
        return await self.client.create_call(
            to=request.to,
            from_=self.from_number,
            twiml=stream_twiml(request.media_url),
            status_callback=request.status_url,
            status_events=STATUS_EVENTS,
            time_limit_s=request.time_limit_s,
        )

    async def hang_up(self, call_id: str) -> None:
        await self.client.hang_up(call_id)

    def call_status(
        self, url: str, form: Mapping[str, Sequence[str]], headers: Mapping[str, str]
    ) -> CallStatus | None:
        signature = next((v for k, v in headers.items() if k.lower() == "x-twilio-signature"), "")
        if not signature or not self.client.valid_signature(url, form, signature):
            return None
        status = _first(form, "CallStatus")
        progress = _PROGRESS.get(status)
        if progress is None:
            return None
        return CallStatus(_first(form, "CallSid"), progress, status)

    def read_frame(self, text: str) -> StreamEvent | None:
        frame = json.loads(text)
        if not isinstance(frame, dict):
            raise ValueError("a media-stream frame is a JSON object")
        event = frame.get("event")
        if event == "media":
            media = _object(frame, "media")
            if media.get("track", "inbound") != "inbound":
                return None
            try:
                return StreamAudio(base64.b64decode(str(media["payload"]), validate=True))
            except (KeyError, binascii.Error):
                raise ValueError("a media frame without a base64 payload") from None
        if event == "start":
            start = _object(frame, "start")
            return StreamStarted(
                str(start.get("streamSid") or frame.get("streamSid", "")),
                str(start.get("callSid", "")),
            )
        if event == "mark":
            return StreamMark(str(_object(frame, "mark").get("name", "")))
        if event == "stop":
            return StreamStopped()
        if event in ("connected", "dtmf"):
            return None
        raise ValueError(f"unknown media-stream event {event!r}")

    def audio_frame(self, stream_id: str, mulaw: bytes) -> str:
        payload = base64.b64encode(mulaw).decode("ascii")
        return json.dumps({"event": "media", "streamSid": stream_id, "media": {"payload": payload}})

    def mark_frame(self, stream_id: str, name: str) -> str:
        return json.dumps({"event": "mark", "streamSid": stream_id, "mark": {"name": name}})


def _first(form: Mapping[str, Sequence[str]], key: str) -> str:
    values = form.get(key) or ()
    return str(values[0]) if values else ""


def _object(frame: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = frame.get(key)
    if not isinstance(value, dict):
        raise ValueError(f"a {frame.get('event')} frame without its {key!r} object")
    return value
