"""Voice-bridge calls (the API's voice-bridge sessions): the node's implementation of
services.comms.voice_bridge's seam.

One :class:`BridgeCalls` per app (``app[VOICE_BRIDGE]``, ``ctx.desk(BRIDGE_CALLS)``,
``env.voice_bridge``). A session is a row of the store (``store.voice_bridge``), so it
outlives the process; what only a live call has (its media WebSocket, the utterance being
heard, the speech queued to play) is kept here while the call is up.

The life of a session:

1. ``open`` (the paid ``open_voice_bridge``, deposit = durationMinutes at the destination's
   per-minute rate): the number is screened (do-not-contact), a row ``dialing`` is
   written with an unguessable media token, and the ``voice_bridge`` engine dials with
   ``wss://<public url>/api/voice-bridge/media/<token>`` as the call's stream and
   ``<public url>/api/voice-bridge/status/<token>`` as its status callback.
2. The provider calls back (``ringing``; signatures verified by the engine) and, once the
   call is answered, opens the media WebSocket (``web/voice_bridge.py``; any other token,
   an ended session or a second connection is refused). The answer starts the billed time
   and the deposit's clock: at ``maxDurationSec`` the call is ended.
3. The called party's audio is cut into utterances by silence (bridge_audio.Segmenter)
   and each is transcribed by the ``transcription`` engine (in order, one at a time):
   ``transcript`` events. ``say`` synthesizes text (the ``tts`` engine, global tier 43,
   602 languages) or takes the caller's audio, converts it to mu-law 8 kHz and plays it in
   real time, then a mark; speech recognition is muted from the first frame until the
   provider echoes the mark (or the audio's duration plus a margin has passed).
4. ``end`` (or the provider's ``stop`` frame, a ``completed``/``busy``/``no-answer``
   callback, the WebSocket dropping, the deposit running out, no answer within
   ``RING_TIMEOUT_S``, a shutdown, or a restart finding it live) ends the session once:
   one conditional UPDATE (live -> ended) records the billed time, the call is hung up,
   and the deposit is settled through the node's deposit settlement
   (``satsgate.payouts.deposits``): the used part billed, the rest refunded once, to the
   refundAddress or as an LNURL-withdraw.

Billing: nothing before the answer (an unanswered call refunds the whole deposit); from
the answer, whole seconds rounded up, at least one minute (what telephony bills a
connected call), at the per-minute rate quoted at open, in whole sats rounded up, never
more than the deposit. Events (``seq``, ``type``, ``text``, ``ts_ms`` in Unix ms) are
kept per session up to ``EVENTS_KEPT`` and deleted 24 hours after they were made
(outreach.retention_rules: recent transcript extracts).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from satsgate.cluster.events import ClusterEvents
from satsgate.config.settings import Settings
from satsgate.domain.do_not_contact import (
    NO_OPT_OUTS,
    OptOuts,
    asks_not_to_be_contacted,
    opt_out,
)
from satsgate.domain.screening_rules import check_text
from satsgate.engines import EngineError, Engines
from satsgate.engines.local.tools import ToolRunner
from satsgate.engines.synthesis import SynthesisEngine, SynthesisRequest
from satsgate.engines.transcription import (
    TranscriptionEngine,
    TranscriptionRequest,
    TranscriptionResult,
)
from satsgate.engines.voice_bridge import (
    BridgeDial,
    StreamAudio,
    StreamMark,
    StreamStarted,
    StreamStopped,
    VoiceBridgeEngine,
)
from satsgate.errors import ApiError, ErrorCode
from satsgate.payouts.deposits import DepositSettler, Settlement
from satsgate.payouts.refunds import refund_object
from satsgate.services.base import DeskKey, ServiceContext
from satsgate.services.comms.bridge_audio import FRAME_BYTES, FRAME_S, RATE, Segmenter, to_mulaw
from satsgate.services.comms.bridge_audio import wav_of_mulaw as _wav_of_mulaw
from satsgate.services.comms.screening import Outreach, screen
from satsgate.services.comms.voice_bridge import (
    BridgeEvent,
    BridgePoll,
    BridgeSettlement,
    Utterance,
    VoiceBridgeOpenParams,
)
from satsgate.store import Store
from satsgate.store.voice_bridge import BridgeSessionRow

log = logging.getLogger(__name__)

MEDIA_PATH = "/api/voice-bridge/media/{token}"
# The channel a say handed over to the dialing instance is announced on (its session id).
SAYS_HANDED_OVER = "satsgate_bridge_says"
STATUS_PATH = "/api/voice-bridge/status/{token}"
ENGINE = "voice_bridge"
CODEC = "mulaw_8000"  # what a telephone call carries; the bridge's activeCodec
GLOBAL_TTS_TIER = 43  # the text-to-speech tier that speaks 602 languages by description

EVENTS_KEPT = 1000  # per session; older ones are dropped as new ones come
POLL_MAX_EVENTS = 200  # per poll; nextCursor picks up the rest
RING_TIMEOUT_S = 75.0  # no answer by then: the session ends, the deposit is refunded
ALIVE_EVERY_S = 10.0  # how often a live call's "still up" time is stored (restart billing)
PLAY_AHEAD_S = 0.2  # audio sent ahead of real time, so playback never starves
MARK_MARGIN_S = 2.0  # unmute anyway this long after the audio should have played
MIN_BILLED_S = 60  # a connected call bills at least a minute
MAX_QUEUED_SAYS = 20  # utterances waiting to play, per session
MAX_QUEUED_HEARD = 20  # utterances waiting for speech recognition, per session
FINISH_HEARING_S = 10.0  # at the end, how long the last words may take to transcribe


def billed_msat(elapsed_s: int, answered: bool, per_minute_msat: int, deposit_msat: int) -> int:
    """What a session bills: see the module."""
    if not answered:
        return 0
    seconds = max(MIN_BILLED_S, elapsed_s)
    msat = -(-seconds * per_minute_msat // 60)
    return min(deposit_msat, -(-msat // 1000) * 1000)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _sats(msat: int) -> int | float:
    """Sats for an answer: whole when they are, else to the msat."""
    return msat // 1000 if msat % 1000 == 0 else round(msat / 1000, 3)


@dataclass
class _Live:
    """What only a live call has, beside its row."""

    session_id: str
    phone: str | None  # None after a restart (the number is never stored)
    engine: VoiceBridgeEngine
    language: str
    stt: bool
    ws: web.WebSocketResponse | None = None
    claimed: bool = False  # a media WebSocket was accepted for this call
    stream_id: str = ""
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    segmenter: Segmenter = field(default_factory=Segmenter)
    heard: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    to_play: asyncio.Queue[tuple[bytes, str]] = field(default_factory=asyncio.Queue)
    playing: bool = False
    marks: dict[str, asyncio.Event] = field(default_factory=dict)
    mark_count: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    alive_stored_at: float = 0.0
    ending: bool = False


class BridgeCalls:
    """VoiceBridgeSessions (services.comms.voice_bridge) on the store, the ``voice_bridge``
    engine, speech recognition and synthesis, and the deposit settlement."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        engines: Engines,
        deposits: DepositSettler,
        opt_outs: OptOuts = NO_OPT_OUTS,
        events: ClusterEvents | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._repo = store.voice_bridge
        self._engines = engines
        self._deposits = deposits
        self._opt_outs = opt_outs
        self._tools = ToolRunner(settings.cpu_job_time_limit_s, 2)
        self._live: dict[str, _Live] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing = False
        self._free: set[asyncio.Task[Any]] = set()  # background writes and ends
        # Several instances: a say that reaches another instance than the one holding the
        # call's audio is handed over through the store, and this event tells the holder.
        self._events = events
        if events is not None:
            events.on(SAYS_HANDED_OVER, self._heard_say)
        if engines.available(ENGINE) and not self._base().startswith("https://"):
            log.warning(
                "voice bridge: base_url %s is not https; telephony providers reach the media "
                "WebSocket only at a public wss:// address (set base_url, or with several "
                "instances instance_base_url)",
                self._base(),
            )

    # -- addresses ------------------------------------------------------------------------

    def _base(self) -> str:
        """Where the provider reaches this very instance: its live calls are here."""
        return self._settings.own_base_url

    def media_url(self, token: str) -> str:
        base = self._base()
        scheme, _, rest = base.partition("://")
        ws_scheme = "wss" if scheme == "https" else "ws"
        return f"{ws_scheme}://{rest}{MEDIA_PATH.format(token=token)}"

    def status_url(self, token: str) -> str:
        return f"{self._base()}{STATUS_PATH.format(token=token)}"

    def _engine(self) -> VoiceBridgeEngine | None:
        bindings = self._engines.bindings(ENGINE)
        return bindings[0].engine if bindings else None  # type: ignore[return-value]

    # -- open (the paid call) -------------------------------------------------------------

    async def open(self, ctx: ServiceContext, params: VoiceBridgeOpenParams) -> dict[str, Any]:
        engine = self._engine()
        if engine is None or self._closing:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The voice bridge is not available right now."
            )
        await screen(ctx, Outreach("voice_bridge", (params.phoneNumber,), ""))
        payment = await self._store.payments.get(ctx.call_id)
        if payment is None:
            # A call paid from a payment session has no payment of its own to settle the
            # deposit against: refused (the session is credited back).
            raise EngineError(
                ErrorCode.INVALID_INPUT,
                "open_voice_bridge is paid by a deposit of its own: pay it per call (L402, "
                "the Payment charge intent or create_payment), not from a payment session.",
            )
        per_minute = params.per_minute_msat(ctx.rate_book)
        deposit = payment.amount_msat
        max_duration_s = max(60, deposit * 60 // per_minute)
        language = params.language
        stt = params.sttEnabled and self._transcribes(language)
        token = secrets.token_urlsafe(32)
        session_id = "vb_" + secrets.token_urlsafe(24)
        now = _now_ms()
        await self._repo.insert(
            BridgeSessionRow(
                session_id=session_id,
                payment_id=ctx.call_id,
                token_hash=_token_hash(token),
                call_id=None,
                language=language,
                stt_enabled=stt,
                tts_enabled=params.ttsEnabled,
                refund_address=params.refundAddress,
                deposit_msat=deposit,
                per_minute_msat=per_minute,
                max_duration_s=max_duration_s,
                state="dialing",
                created_at_ms=now,
            )
        )
        live = _Live(session_id, params.phoneNumber, engine, language, stt)
        self._live[session_id] = live
        try:
            await self._event(session_id, "dialing", "")
            call_id = await engine.dial(
                BridgeDial(
                    to=params.phoneNumber,
                    media_url=self.media_url(token),
                    status_url=self.status_url(token),
                    time_limit_s=max_duration_s + 5,  # the provider's own backstop
                )
            )
        except BaseException:
            # Nothing was billed: the gate refunds the whole payment for the failed open.
            self._live.pop(session_id, None)
            await self._repo.end(session_id, _now_ms(), "dial failed", 0, 0)
            await self._repo.mark_settled(session_id)
            raise
        await self._repo.set_call(session_id, call_id)
        self._spawn(live, self._ring_timeout(live))
        self._spawn(live, self._transcriber(live))
        self._spawn(live, self._player(live))
        return {
            "success": True,
            "sessionId": session_id,
            "callId": call_id,
            "activeCodec": CODEC,
            "hdAvailable": False,
            "language": language,
            "depositSats": _sats(deposit),
            "perMinuteSats": _sats(per_minute),
            "maxDurationSec": max_duration_s,
            "sttEnabled": stt,
            "ttsEnabled": params.ttsEnabled,
            "state": "dialing",
        }

    # -- say, poll, end (free) ------------------------------------------------------------

    async def say(self, session_id: str, utterance: Utterance) -> int | None:
        """Play ``utterance`` into the call; the bytes of audio queued, or None when the
        session is not live (here: a call dialed by another instance is reached through
        the store when instances share one)."""
        row = await self._repo.get(session_id)
        live = self._live.get(session_id)
        if row is None or not row.live or (live is None and self._events is None):
            return None
        if live is not None and live.ending:
            return None
        if utterance.text is not None:
            if not row.tts_enabled:
                raise ApiError(
                    ErrorCode.INVALID_INPUT,
                    "This session was opened with ttsEnabled false: send audioBase64.",
                )
            reasons = check_text(utterance.text)
            if reasons:
                raise ApiError(
                    ErrorCode.CONTENT_FILTERED,
                    "This text was not spoken: the communication screen flagged it.",
                )
            mulaw = await self._speak(utterance, row.language)
            label = utterance.text
        else:
            audio = utterance.audio or b""
            encoding = utterance.encoding or CODEC
            mulaw = audio if encoding == CODEC else await self._convert(audio, encoding)
            label = ""
        if not mulaw:
            raise ApiError(ErrorCode.INVALID_INPUT, "There is no audio to play.")
        waiting = (
            live.to_play.qsize() if live is not None else await self._repo.says_waiting(session_id)
        )
        if waiting >= MAX_QUEUED_SAYS:
            raise ApiError(
                ErrorCode.RATE_LIMITED,
                f"{MAX_QUEUED_SAYS} utterances are waiting to be played; say again once "
                "poll shows them spoken.",
            )
        if live is None:
            assert self._events is not None
            await self._repo.hand_over(session_id, mulaw, label, int(time.time()))
            self._events.publish(SAYS_HANDED_OVER, session_id)
            return len(mulaw)
        if live.ending:
            return None
        live.to_play.put_nowait((mulaw, label))
        return len(mulaw)

    @property
    def live_here(self) -> frozenset[str]:
        """The sessions whose call this instance dialed and still carries (media, loops)."""
        return frozenset(self._live)

    def _heard_say(self, session_id: str) -> None:
        """A say was handed over for a call: taken here if its audio is here."""
        if session_id in self._live:
            self._spawn_free(self.take_handed_over([session_id]))

    async def take_handed_over(self, session_ids: Sequence[str] | None = None) -> int:
        """Queue the says handed over for this instance's live calls (all of them, or
        ``session_ids``): when notified, and on the scheduler's look for a notification
        lost; how many."""
        ids = [i for i in (session_ids or list(self._live)) if i in self._live]
        taken = 0
        for session_id, audio, label in await self._repo.take_says(ids):
            live = self._live.get(session_id)
            if live is None or live.ending:
                continue
            live.to_play.put_nowait((audio, label))
            taken += 1
        return taken

    async def poll(self, session_id: str, cursor: int) -> BridgePoll | None:
        row = await self._repo.get(session_id)
        if row is None:
            return None
        events = await self._repo.events(session_id, cursor, POLL_MAX_EVENTS)
        return BridgePoll(
            session_id=session_id,
            state=row.state,
            events=tuple(BridgeEvent(e.seq, e.type, e.text, e.ts_ms) for e in events),
            next_cursor=events[-1].seq if events else cursor,
            call_id=row.call_id or "",
        )

    async def end(self, session_id: str) -> BridgeSettlement | None:
        return await self._end(session_id, "ended by the caller", wait=True)

    # -- the provider's side --------------------------------------------------------------

    async def status_callback(
        self, token: str, form: Mapping[str, Sequence[str]], headers: Mapping[str, str]
    ) -> int:
        """A call-status callback to the session of ``token``: the HTTP status to answer."""
        row = await self._repo.by_token_hash(_token_hash(token))
        live = self._live.get(row.session_id) if row is not None else None
        engine = live.engine if live is not None else self._engine()
        if row is None or engine is None:
            return 404
        status = engine.call_status(self.status_url(token), form, headers)
        if status is None:
            log.warning("voice bridge: a status callback failed its signature check")
            return 403
        if status.call_id and row.call_id and status.call_id != row.call_id:
            return 403
        if not row.live:
            return 204
        if status.progress == "ringing":
            if await self._repo.ringing(row.session_id):
                await self._event(row.session_id, "ringing", "")
        elif status.progress == "answered":
            await self._answered(row.session_id)
        elif status.progress == "ended":
            why = "call ended" if status.detail == "completed" else status.detail
            await self._end(row.session_id, why, hang_up=False)
        return 204

    async def media_target(self, token: str) -> _Live | None:
        """The live session a media WebSocket with ``token`` may attach to, or None
        (refused: unknown token, ended session, or one already connected)."""
        row = await self._repo.by_token_hash(_token_hash(token))
        if row is None or not row.live:
            return None
        live = self._live.get(row.session_id)
        if live is None or live.claimed or live.ending:
            return None
        live.claimed = True  # one media connection per session, ever
        return live

    async def serve_media(self, live: _Live, ws: web.WebSocketResponse) -> None:
        """Run the provider's media WebSocket until the stream stops or drops."""
        live.ws = ws
        reason = "call dropped"
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue  # the protocol is text frames only
                try:
                    frame = live.engine.read_frame(message.data)
                except ValueError as exc:
                    log.warning("voice bridge: unreadable media frame: %s", exc)
                    continue
                if isinstance(frame, StreamAudio):
                    self._hear(live, frame.mulaw)
                elif isinstance(frame, StreamStarted):
                    live.stream_id = frame.stream_id
                    live.connected.set()
                    await self._answered(live.session_id)
                elif isinstance(frame, StreamMark):
                    done = live.marks.get(frame.name)
                    if done is not None:
                        done.set()
                elif isinstance(frame, StreamStopped):
                    reason = "call ended"
                    break
        finally:
            live.connected.clear()
            live.ws = None
            tail = live.segmenter.flush()
            if tail is not None and live.stt:
                live.heard.put_nowait(tail)
            if not live.ending:  # after a stop frame the call has ended: no hang-up
                hang_up = reason != "call ended"
                self._spawn_free(self._end(live.session_id, reason, hang_up=hang_up))

    # -- start-up and shutdown ------------------------------------------------------------

    async def recover(self, gone: str) -> int:
        """Every session the gone instance ``gone`` left live is ended (billed up to the
        last time it was seen up) and settled; one ended but not settled is settled."""
        count = 0
        for row in await self._repo.unfinished(gone):
            until = row.alive_at_ms or row.answered_at_ms or row.created_at_ms
            await self._end(row.session_id, "service restarted", until_ms=until)
            count += 1
        return count

    async def close(self) -> None:
        """At shutdown: live calls are hung up and settled."""
        self._closing = True
        for session_id in list(self._live):
            with contextlib.suppress(Exception):
                await self._end(session_id, "service shutting down")

    # -- internals ------------------------------------------------------------------------

    async def _event(self, session_id: str, type_: str, text: str) -> int:
        return await self._repo.add_event(session_id, type_, text, _now_ms(), EVENTS_KEPT)

    async def _answered(self, session_id: str) -> None:
        now = _now_ms()
        if not await self._repo.answered(session_id, now):
            return
        await self._event(session_id, "answered", "")
        live = self._live.get(session_id)
        row = await self._repo.get(session_id)
        if live is not None and row is not None:
            self._spawn(live, self._deadline(live, row.max_duration_s))

    def _hear(self, live: _Live, mulaw: bytes) -> None:
        now = time.monotonic()
        if now - live.alive_stored_at >= ALIVE_EVERY_S:
            live.alive_stored_at = now
            self._spawn_free(self._repo.alive(live.session_id, _now_ms()))
        if not live.stt:
            return
        if live.playing:
            return  # muted while we speak: our own voice is not transcribed
        for utterance in live.segmenter.feed(mulaw):
            if live.heard.qsize() < MAX_QUEUED_HEARD:
                live.heard.put_nowait(utterance)
            else:
                log.warning("voice bridge: speech recognition is behind; an utterance dropped")

    async def _transcriber(self, live: _Live) -> None:
        language = live.language.split("-")[0].lower()
        while True:
            utterance = await live.heard.get()
            try:
                await self._hear_one(live, utterance, language)
            finally:
                live.heard.task_done()

    async def _hear_one(self, live: _Live, utterance: bytes, language: str) -> None:
        request = TranscriptionRequest(
            audio=_wav_of_mulaw(utterance), format="wav", language=language
        )
        try:
            result = await self._transcribe(request)
        except EngineError as exc:
            log.warning("voice bridge: transcription failed: %s", exc.code)
            await self._event(live.session_id, "error", "speech recognition failed")
            return
        text = result.text.strip()
        if not text:
            return
        await self._event(live.session_id, "transcript", text)
        if live.phone is not None and asks_not_to_be_contacted(text):
            with contextlib.suppress(ValueError):
                await opt_out(self._opt_outs, live.phone, source="voice-bridge")

    def _transcribes(self, language: str) -> bool:
        """Whether this node's speech recognition takes the session's language."""
        if not self._engines.available("transcription"):
            return False
        probe = TranscriptionRequest(b"", "wav", language=language.split("-")[0].lower())
        return self._engines.unsupported("transcription", probe) is None

    async def _transcribe(self, request: TranscriptionRequest) -> TranscriptionResult:
        return await self._engines.run(
            "transcription",
            TranscriptionEngine,
            lambda engine, model_name: engine.transcribe(request),
            request=request,
        )

    async def _speak(self, utterance: Utterance, language: str) -> bytes:
        request = SynthesisRequest(
            text=utterance.text or "",
            model_id=GLOBAL_TTS_TIER,
            language=utterance.language or language.split("-")[0].lower(),
            voice_description=utterance.voice_description,
            format="wav",
        )
        if not self._engines.serves_model("tts", GLOBAL_TTS_TIER):
            raise ApiError(
                ErrorCode.SERVICE_UNAVAILABLE,
                "Text to speech is not available on this node; send audioBase64 instead.",
            )
        try:
            result = await self._engines.run(
                "tts",
                SynthesisEngine,
                lambda engine, model_name: engine.synthesize(request),
                model_id=GLOBAL_TTS_TIER,
                request=request,
            )
            return await to_mulaw(self._tools, result.audio, "wav")
        except EngineError as exc:
            raise exc.api_error() from None

    async def _convert(self, audio: bytes, encoding: str) -> bytes:
        try:
            return await to_mulaw(self._tools, audio, encoding)
        except EngineError as exc:
            raise exc.api_error() from None

    async def _player(self, live: _Live) -> None:
        while True:
            mulaw, label = await live.to_play.get()
            await live.connected.wait()
            ws = live.ws
            if ws is None or ws.closed:
                continue
            live.mark_count += 1
            name = f"say-{live.mark_count}"
            played = asyncio.Event()
            live.marks[name] = played
            live.playing = True
            live.segmenter.reset()
            await self._event(live.session_id, "speaking", label)
            try:
                start = time.monotonic()
                for index, at in enumerate(range(0, len(mulaw), FRAME_BYTES)):
                    due = start + index * FRAME_S - PLAY_AHEAD_S
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    chunk = mulaw[at : at + FRAME_BYTES]
                    await ws.send_str(live.engine.audio_frame(live.stream_id, chunk))
                await ws.send_str(live.engine.mark_frame(live.stream_id, name))
                remaining = start + len(mulaw) / RATE - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(played.wait(), max(0.0, remaining) + MARK_MARGIN_S)
            except (ConnectionError, RuntimeError):
                pass  # the call went away while we spoke
            finally:
                live.marks.pop(name, None)
                live.segmenter.reset()
                live.playing = False
            await self._event(live.session_id, "spoken", label)

    async def _ring_timeout(self, live: _Live) -> None:
        await asyncio.sleep(RING_TIMEOUT_S)
        row = await self._repo.get(live.session_id)
        if row is not None and row.state in ("dialing", "ringing"):
            await self._end(live.session_id, "no answer")

    async def _deadline(self, live: _Live, max_duration_s: int) -> None:
        await asyncio.sleep(max_duration_s)
        await self._end(live.session_id, "deposit used up")

    def _spawn(self, live: _Live, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        live.tasks.add(task)
        task.add_done_callback(live.tasks.discard)

    def _spawn_free(self, coro: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._free.add(task)
        task.add_done_callback(self._free.discard)

    async def _end(
        self,
        session_id: str,
        reason: str,
        *,
        hang_up: bool = True,
        until_ms: int | None = None,
        wait: bool = False,
    ) -> BridgeSettlement | None:
        """End the session once and settle its deposit once; the settlement either way.
        A session ended elsewhere (the caller's end reached another instance, which hung
        up) that this instance dialed has its live part stopped here."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        try:
            async with lock:
                return await self._end_locked(session_id, reason, hang_up, until_ms, wait)
        finally:
            if not lock.locked():
                self._locks.pop(session_id, None)

    async def _end_locked(
        self, session_id: str, reason: str, hang_up: bool, until_ms: int | None, wait: bool
    ) -> BridgeSettlement | None:
        row = await self._repo.get(session_id)
        if row is None:
            return None
        live = self._live.get(session_id)
        if row.live:
            if live is not None:
                live.ending = True
            ended_at = until_ms if until_ms is not None else _now_ms()
            answered = row.answered_at_ms is not None
            elapsed_s = (
                max(0, math.ceil((ended_at - (row.answered_at_ms or 0)) / 1000)) if answered else 0
            )
            used = billed_msat(elapsed_s, answered, row.per_minute_msat, row.deposit_msat)
            if await self._repo.end(session_id, ended_at, reason, elapsed_s, used):
                if hang_up and row.call_id:
                    await self._hang_up(live, row.call_id)
                if live is not None:
                    await self._finish_hearing(live)
                await self._event(session_id, "ended", reason)
                if live is not None:
                    await self._stop_live(live)
                await self._repo.take_says([session_id])  # handed over, never played
            row = await self._repo.get(session_id)
            assert row is not None
        elif live is not None:  # ended at another instance: the call's media was here
            live.ending = True
            await self._finish_hearing(live)
            await self._stop_live(live)
        # The caller's own end waits for a payout to its refundAddress; an end the
        # provider or a timer causes pays out in the background.
        return await self._settle(row, wait)

    async def _finish_hearing(self, live: _Live) -> None:
        """The last words: what was being said when the call ended is transcribed, and
        the utterances waiting are, for at most ``FINISH_HEARING_S``."""
        if not live.stt:
            return
        live.stt = False  # nothing more is heard
        tail = live.segmenter.flush()
        if tail is not None:
            live.heard.put_nowait(tail)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINISH_HEARING_S):
                await live.heard.join()

    async def _hang_up(self, live: _Live | None, call_id: str) -> None:
        engine = live.engine if live is not None else self._engine()
        if engine is None:
            return
        try:
            await engine.hang_up(call_id)
        except Exception as exc:  # the call may be gone already; settle anyway
            log.warning("voice bridge: hanging up failed: %s", exc)

    async def _stop_live(self, live: _Live) -> None:
        self._live.pop(live.session_id, None)
        current = asyncio.current_task()
        for task in list(live.tasks):
            if task is not current:
                task.cancel()
        if live.ws is not None and not live.ws.closed:
            with contextlib.suppress(Exception):
                await live.ws.close()

    async def _settle(self, row: BridgeSessionRow, wait: bool) -> BridgeSettlement:
        used = row.used_msat or 0
        settled = await self._deposits.settle(
            row.payment_id,
            used,
            refund_address=row.refund_address,
            reason="voice bridge: unused deposit",
            wait=wait,
        )
        if not row.settled:
            await self._repo.mark_settled(row.session_id)
        transcript = " ".join(await self._repo.transcript(row.session_id, "transcript"))
        deposit_sats = row.deposit_msat // 1000
        if settled is None:
            # Not spent (a restart refunded the open call in full before it was answered)
            # or gone: nothing was billed; the payment's own refund stands.
            earlier = await self._store.refunds.for_payment(row.payment_id)
            refund = refund_object(earlier[-1], self._base()) if earlier else None
            return BridgeSettlement(
                row.elapsed_s or 0, 0, deposit_sats, deposit_sats, refund, transcript
            )
        return BridgeSettlement(
            elapsed_s=row.elapsed_s or 0,
            used_sats=-(-settled.used_msat // 1000),
            deposit_sats=settled.deposit_msat // 1000,
            refundable_sats=settled.refund_msat // 1000,
            refund=_refund_view(settled),
            final_transcript=transcript,
        )


# The voice-bridge sessions in a handler's context: ``ctx.desk(BRIDGE_CALLS)``.
BRIDGE_CALLS: DeskKey[BridgeCalls] = DeskKey("voice-bridge sessions")


def _refund_view(settled: Settlement) -> dict[str, Any] | None:
    """The refund as the payer sees it: the LNURL-withdraw link to claim, or, with a
    refundAddress, the payout to it (and the link again if that payout failed)."""
    if settled.refund is None:
        return None
    link = dict(settled.refund)
    if settled.refund_address is None:
        return link
    payout: dict[str, Any] = {
        "refund_address": settled.refund_address,
        "amount_sats": settled.refund_msat // 1000,
        "status": settled.refund_status,  # paying, paid, or claimable after a failed payout
        "charge_id": link.get("charge_id"),
    }
    if settled.refund_status in ("claimable", "claiming", "expired"):
        payout.update(link)  # the payout failed: the link is the payer's to claim
        payout["status"] = settled.refund_status
        payout["refund_note"] = (
            "The payout to the Lightning address failed; claim the refund with the "
            "LNURL-withdraw link."
        )
    return payout
