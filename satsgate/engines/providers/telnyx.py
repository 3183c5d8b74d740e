"""Provider kind ``telnyx``: Telnyx's v2 API for the engines ``fax`` (Programmable Fax,
send and inbound), ``sms`` (Messaging API) and ``voice`` (Call Control: dial, then
speak or play the message, then hang up by commands).

The operator's table::

    [providers.tx]
    kind = "telnyx"
    api_key_env = "TELNYX_API_KEY"          # Bearer key (API v2)
    public_key = "<base64, 32 bytes>"       # the account's webhook public key (portal)
    from_number = "+13125550100"            # faxes, messages and calls come from it
    fax_connection_id = "..."               # fax: the Programmable Fax Application's id
    inbound_fax_numbers = ["+13125550101"]  # receive-fax: numbers on that application
    messaging_profile_id = "..."            # sms: optional (the profile, or its number pool)
    call_connection_id = "..."              # voice: the Call Control Application's id
    # optional: base_url, timeout_s (30), max_retries (0..2, default 1), fax_from_number,
    # status_poll_s (30: fax status polling when webhooks are late), media_hosts
    # (hosts an inbound fax may be fetched from; default the API host and telnyx.com),
    # ring_timeout_s (30), default_voice ("female"), [providers.tx.voices] locale = voice

Webhooks reach ``<public base URL>/api/webhooks/telnyx/<NAME>`` (``?ref=<satsgate's
id>`` is added on each fax, message and call sent; the operator sets the bare URL on the
fax application and the messaging profile for inbound faxes and STOP replies). Each is
verified with Ed25519 over ``f"{telnyx-timestamp}|{raw body}"`` against ``public_key``
and refused (403) unless its timestamp is within 300 s of now: a forged or stale
webhook changes nothing.

Errors: 429 and 5xx are retried (a POST only when the answer proves nothing was done:
429 and 503), then mapped to the catalog (RATE_LIMITED, L402_UPSTREAM_FAILED,
SERVICE_ERROR); a 400/422 whose error points at ``/to`` is INVALID_INPUT, Telnyx's
opted-out error RECIPIENT_OPTED_OUT. Messages never name the provider, its URL or the
key; the operator's log line names the engine, the kind, the upstream status and code.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from satsgate.domain.telephony import check_e164
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.delivery import (
    REFERENCE_PARAM,
    InboundMessage,
    StatusUpdate,
    WebhookEvents,
    WebhookRequest,
    reference_of,
)
from satsgate.engines.errors import EngineError
from satsgate.engines.fax import (
    FaxRequest,
    FaxState,
    FaxStatus,
    InboundFax,
    InboundHandler,
    InboundRequest,
)
from satsgate.engines.messaging import MessageStatus, SmsRequest, SmsSent
from satsgate.engines.providers.carriers import (
    opt_out_by_reply,
    opted_out_recipient,
    ring_timeout_option,
    voices_option,
)
from satsgate.engines.providers.upstream import (
    cause_of,
    check_options,
    log_failure,
    retries_option,
    retry_after_s,
    status_error,
    timeout_option,
)
from satsgate.engines.registry import EngineDeps
from satsgate.engines.voice_call import CallPlaced, CallRequest, CallStatus
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "telnyx"
DEFAULT_BASE_URL = "https://api.telnyx.com/v2"
WEBHOOK_TOLERANCE_S = 300
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_STATUS_POLL_S = 30.0
# Hosts (and their subdomains) an inbound fax's document may be fetched from, besides
# the API's own host; the operator's ``media_hosts`` replaces this list.
DEFAULT_MEDIA_HOSTS = ("telnyx.com",)
MAX_REDIRECTS = 3
# Telnyx's messaging error for a recipient who replied STOP (obs.: Telnyx's error list,
# not providers.md): the number goes on the do-not-contact list.
OPTED_OUT_CODE = "40300"
# Fax statuses (providers.md) -> the four the payer sees.
_FAX_STATUS: Mapping[str, FaxStatus] = {
    "queued": "queued",
    "media.processed": "queued",
    "media.processing": "queued",
    "initiated": "sending",
    "originated": "sending",
    "sending": "sending",
    "sending.started": "sending",
    "delivered": "delivered",
    "failed": "failed",
}
_FAX_EVENT_STATUS: Mapping[str, FaxStatus] = {
    "fax.queued": "queued",
    "fax.media.processed": "queued",
    "fax.sending.started": "sending",
    "fax.delivered": "delivered",
    "fax.failed": "failed",
}
_REASON_RE = re.compile(r"^[a-z0-9_.\- ]{1,64}$")
_KNOWN_OPTIONS = frozenset(
    {
        "public_key", "from_number", "fax_connection_id", "fax_from_number",
        "inbound_fax_numbers", "media_hosts", "status_poll_s", "max_retries",
        "messaging_profile_id", "call_connection_id", "ring_timeout_s", "voices",
        "default_voice",
    }
)  # fmt: skip
_SEEN_EVENTS = 2048  # webhook ids remembered, to drop Telnyx's duplicate deliveries


def public_key_from(value: object, where: str) -> Ed25519PublicKey:
    """The webhook public key (base64 of the 32 raw bytes, as the portal shows it)."""
    if not isinstance(value, str) or not value:
        raise EngineConfigError(
            f"{where} needs public_key: the account's webhook public key (base64) from "
            "the portal, to verify webhooks"
        )
    try:
        raw = base64.b64decode(value, validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError):
        raise EngineConfigError(f"{where} public_key is not a base64 Ed25519 key") from None


def verify_signature(
    key: Ed25519PublicKey, headers: Mapping[str, str], body: bytes, now: float | None = None
) -> bool:
    """Telnyx's webhook signature: Ed25519 over ``f"{timestamp}|{raw body}"``, the
    timestamp within 300 s of now. ``headers`` are lower-cased."""
    stamp = headers.get("telnyx-timestamp", "")
    signature = headers.get("telnyx-signature-ed25519", "")
    if not stamp.isdigit() or not signature:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > WEBHOOK_TOLERANCE_S:
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
        key.verify(raw, stamp.encode() + b"|" + body)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def _str_list(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise EngineConfigError(f"{where} must be a list of strings")
    return tuple(value)


def _positive(value: object, where: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EngineConfigError(f"{where} must be a positive number")
    return float(value)


@dataclass
class _FaxWatch:
    state: FaxState
    version: int = 0
    returned: int = -1  # the version wait() last returned
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    touched: float = field(default_factory=time.monotonic)


class TelnyxProvider:
    """One ``[providers.NAME]`` table of kind ``telnyx``."""

    webhook_kind = KIND

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        where = f"[providers.{config.name}]"
        options = config.options
        check_options(config, _KNOWN_OPTIONS)
        if not config.api_key:
            raise EngineConfigError(
                f'{where} needs the API key: api_key_env = "ENV_VAR" or api_key = "..."'
            )
        self.config = config
        self.settings = deps.settings
        self.base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._public_key = public_key_from(options.get("public_key"), where)
        self.retries = retries_option(config)
        self.timeout_s = timeout_option(config, DEFAULT_TIMEOUT_S)
        self.status_poll_s = _positive(
            options.get("status_poll_s"), f"{where} status_poll_s", DEFAULT_STATUS_POLL_S
        )
        self.fax_connection_id = str(options.get("fax_connection_id", "") or "")
        from_number = options.get("from_number", "")
        self.from_number = self._number(from_number, f"{where} from_number") if from_number else ""
        fax_from = options.get("fax_from_number")
        self.fax_from = (
            self._number(fax_from, f"{where} fax_from_number") if fax_from else self.from_number
        )
        self._inbound = tuple(
            self._number(n, f"{where} inbound_fax_numbers")
            for n in _str_list(options.get("inbound_fax_numbers"), f"{where} inbound_fax_numbers")
        )
        self.messaging_profile_id = str(options.get("messaging_profile_id", "") or "")
        self.call_connection_id = str(options.get("call_connection_id", "") or "")
        self.ring_timeout_s = ring_timeout_option(options, where, 120)
        self.voices = voices_option(options, where, "speak voices")
        default_voice = options.get("default_voice", "female")
        if not isinstance(default_voice, str) or not default_voice:
            raise EngineConfigError(f"{where} default_voice must be a voice name")
        self.default_voice = default_voice
        self.deps = deps
        hosts = _str_list(options.get("media_hosts"), f"{where} media_hosts")
        api_host = urlsplit(self.base_url).hostname or ""
        self.media_hosts = (api_host, *(hosts or DEFAULT_MEDIA_HOSTS))
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s, connect=10.0), follow_redirects=False
        )
        self._faxes: dict[str, _FaxWatch] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._inbound_handler: InboundHandler | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._sms = TelnyxSms(self)
        self._voice = TelnyxVoice(self)

    @staticmethod
    def _number(value: object, where: str) -> str:
        if not isinstance(value, str):
            raise EngineConfigError(f"{where} must be an E.164 number")
        try:
            return check_e164(value)
        except ValueError as exc:
            raise EngineConfigError(f"{where}: {exc}") from None

    # -- the Provider protocol ----------------------------------------------------------

    def engine(self, name: str) -> object | None:
        if name == "fax":
            if not self.fax_connection_id or not self.fax_from:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves fax with fax_connection_id and "
                    "from_number (or fax_from_number)"
                )
            return self
        if name == "sms":
            if not self.from_number and not self.messaging_profile_id:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves sms with from_number or "
                    "messaging_profile_id"
                )
            return self._sms
        if name == "voice":
            if not self.call_connection_id or not self.from_number:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves voice with call_connection_id "
                    "(a Call Control application) and from_number"
                )
            return self._voice
        return None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.http.aclose()

    # -- HTTP ---------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json"}

    def webhook_url(self, reference: str | None = None) -> str:
        url = f"{self.settings.public_base_url}/api/webhooks/{KIND}/{self.config.name}"
        return f"{url}?{urlencode({REFERENCE_PARAM: reference})}" if reference else url

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def request(
        self, method: str, path: str, engine: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``data`` of a v2 call. A GET is repeated on 429, 5xx, timeouts and connection
        failures; a POST (not safe to repeat: a fax or message could go twice) only on
        429 and 503 and on a failed connect, where the upstream did nothing."""
        url = f"{self.base_url}{path}"
        safe = method == "GET"
        for attempt in range(self.retries + 1):
            last = attempt >= self.retries
            try:
                resp = await self.http.request(method, url, json=body, headers=self._headers())
            except httpx.ConnectError as exc:
                if not last:
                    await asyncio.sleep(0.25 * (attempt + 1))
                    continue
                raise self._failed(
                    engine, ErrorCode.L402_UPSTREAM_FAILED, "connection failure", True
                ) from exc
            except httpx.TimeoutException as exc:
                if safe and not last:
                    continue
                raise self._failed(engine, ErrorCode.TIMEOUT, "timeout", safe) from exc
            except httpx.HTTPError as exc:
                if safe and not last:
                    continue
                raise self._failed(
                    engine, ErrorCode.L402_UPSTREAM_FAILED, type(exc).__name__, safe
                ) from exc
            status = resp.status_code
            if status < 400:
                try:
                    data = resp.json()["data"]
                    if not isinstance(data, dict):
                        raise TypeError("data is not an object")
                    return data
                except (ValueError, KeyError, TypeError) as exc:
                    cause = f"unusable answer ({type(exc).__name__})"
                    raise self._failed(engine, ErrorCode.SERVICE_ERROR, cause, safe) from exc
            retryable = status == 429 or (status >= 500 if safe else status == 503)
            if retryable and not last:
                await asyncio.sleep(min(retry_after_s(resp.headers), 2.0) * (attempt + 1) / 2)
                continue
            code, pointer = _error_of(resp)
            cause = f"HTTP {status}" + (f" ({code})" if code else "")
            if code == OPTED_OUT_CODE:
                error = EngineError(
                    ErrorCode.RECIPIENT_OPTED_OUT, OPTED_OUT_MESSAGE, may_fall_back=False
                )
                log_failure(engine, KIND, error, cause)
                raise error
            if status in (400, 422) and pointer == "/to":
                # The destination itself was refused: the caller's input, on any provider.
                error = EngineError(
                    ErrorCode.INVALID_INPUT, INVALID_NUMBER_MESSAGE, may_fall_back=False
                )
                log_failure(engine, KIND, error, cause)
                raise error
            mapped = status_error(status, resp.headers, None)
            # Past a 429 or 503 nothing was done; past another 5xx a POST may have acted.
            nothing_done = safe or status in (429, 503) or status < 500
            raise self._failed(
                engine, mapped.code, cause, nothing_done, retry_after=mapped.retry_after_s
            )
        raise AssertionError("unreachable")

    def _failed(
        self,
        engine: str,
        code: ErrorCode,
        cause: str,
        nothing_done: bool,
        *,
        retry_after: float | None = None,
    ) -> EngineError:
        """The caller's error (no provider, URL or key in it) and the operator's log line.
        ``nothing_done``: the upstream surely did not act, so another provider may."""
        if code == ErrorCode.TIMEOUT:
            retry_after = 20
        error = EngineError(
            code,
            _MESSAGES.get(code, _MESSAGES[ErrorCode.SERVICE_ERROR]),
            retry_after_s=retry_after,
            may_fall_back=None if nothing_done else False,
        )
        log_failure(engine, KIND, error, cause)
        return error

    # -- fax: sending --------------------------------------------------------------------

    async def send(self, request: FaxRequest) -> FaxState:
        body = {
            "connection_id": self.fax_connection_id,
            "media_url": request.media_url,
            "to": request.to,
            "from": self.fax_from,
            "webhook_url": self.webhook_url(request.reference),
            "client_state": base64.b64encode(request.reference.encode()).decode(),
            "store_media": False,
        }
        data = await self.request("POST", "/faxes", "fax", body)
        fax_id = str(data.get("id") or "")
        if not fax_id:
            raise self._failed("fax", ErrorCode.SERVICE_ERROR, "answer without an id", False)
        state = _fax_state(fax_id, data)
        watch = self._faxes.get(fax_id)
        if watch is None:  # a webhook may have come before this answer
            self._faxes[fax_id] = _FaxWatch(state)
        return self._faxes[fax_id].state

    async def wait(self, fax_id: str, timeout_s: float) -> FaxState:
        watch = self._faxes.get(fax_id)
        if watch is None:  # after a restart: what the provider says now
            watch = self._faxes[fax_id] = _FaxWatch(await self._fetch_fax(fax_id))
        deadline = time.monotonic() + timeout_s
        while watch.version == watch.returned and not watch.state.final:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            watch.changed.clear()
            try:
                await asyncio.wait_for(watch.changed.wait(), min(left, self.status_poll_s))
            except TimeoutError:
                if watch.version == watch.returned:
                    # No webhook for a while: ask (the fallback when webhooks are lost).
                    try:
                        self._update(fax_id, await self._fetch_fax(fax_id))
                    except EngineError as exc:
                        log.info(
                            "telnyx %s: fax status poll failed: %s", self.config.name, exc.code
                        )
        watch.returned = watch.version
        watch.touched = time.monotonic()
        state = watch.state
        if state.final:
            self._faxes.pop(fax_id, None)
        self._prune()
        return state

    async def _fetch_fax(self, fax_id: str) -> FaxState:
        return _fax_state(fax_id, await self.request("GET", f"/faxes/{fax_id}", "fax"))

    def _update(self, fax_id: str, state: FaxState) -> None:
        watch = self._faxes.get(fax_id)
        if watch is None:
            self._faxes[fax_id] = _FaxWatch(state, version=1)
            self._prune()
            return
        if watch.state.final or state == watch.state:
            return  # a final status stays; duplicates change nothing
        if _RANK[state.status] < _RANK[watch.state.status]:
            return  # out of order: Telnyx does not order its webhooks
        watch.state = state
        watch.version += 1
        watch.changed.set()

    def _prune(self) -> None:
        cutoff = time.monotonic() - 3600
        for fax_id in [k for k, w in self._faxes.items() if w.touched < cutoff]:
            del self._faxes[fax_id]

    # -- fax: receiving -------------------------------------------------------------------

    def inbound_numbers(self) -> tuple[str, ...]:
        return self._inbound

    def unsupported(self, request: object) -> str | None:
        """Before any invoice: receive-fax in a country none of the inbound numbers is in."""
        if isinstance(request, InboundRequest):
            countries = set()
            for number in self._inbound:
                try:
                    countries.add(self.deps.destinations.destination(number).country)
                except ValueError:
                    continue
            if request.country not in countries:
                return f"no inbound fax number in {request.country} on this node"
        return None

    def on_inbound(self, handler: InboundHandler) -> None:
        self._inbound_handler = handler

    def _media_allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        api = urlsplit(self.base_url)
        if parts.scheme != "https" and not (parts.scheme == "http" and api.scheme == "http"):
            return False
        return any(host == h or host.endswith("." + h) for h in self.media_hosts if h)

    async def download(self, fax: InboundFax, max_bytes: int) -> bytes:
        url = fax.media_url
        for _ in range(MAX_REDIRECTS + 1):
            if not self._media_allowed(url):
                log.warning("telnyx %s: inbound fax media on a host not allowed", self.config.name)
                raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax could not be fetched.")
            # The key goes only to the API's own host (a presigned storage URL needs none).
            same_host = urlsplit(url).netloc == urlsplit(self.base_url).netloc
            headers = self._headers() if same_host else {}
            try:
                async with self.http.stream("GET", url, headers=headers) as resp:
                    if resp.status_code in (301, 302, 303, 307, 308):
                        url = urljoin(url, resp.headers.get("location", ""))
                        continue
                    if resp.status_code != 200:
                        break
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax is too large.")
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise EngineError(
                                ErrorCode.SERVICE_ERROR, "The received fax is too large."
                            )
                        chunks.append(chunk)
                    return b"".join(chunks)
            except httpx.HTTPError as exc:
                log.warning("telnyx %s: inbound fax download (%s)", self.config.name, cause_of(exc))
                break
        raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax could not be fetched.")

    # -- webhooks -------------------------------------------------------------------------

    async def receive_events(self, request: WebhookRequest) -> WebhookEvents:
        """POST /api/webhooks/telnyx/<NAME>: 403 unless signed by the account's key within
        300 s (then nothing changes); else 200, also for events nobody waits for (Telnyx
        retries anything else). Fax events are taken here; message and call events
        become delivery reports and inbound messages for the app."""
        if request.method != "POST":
            return WebhookEvents(405)
        if not verify_signature(self._public_key, request.headers, request.body):
            log.warning("telnyx %s: webhook refused (signature or timestamp)", self.config.name)
            return WebhookEvents(403)
        try:
            doc = json.loads(request.body)
            data = doc["data"]
            event_type = str(data["event_type"])
            event_id = str(data.get("id") or "")
            payload = data.get("payload") or {}
            if not isinstance(payload, dict):
                raise TypeError("payload")
        except (ValueError, KeyError, TypeError):
            return WebhookEvents(400)
        if event_id:
            if event_id in self._seen:
                return WebhookEvents(200)  # a duplicate delivery
            self._seen[event_id] = None
            while len(self._seen) > _SEEN_EVENTS:
                self._seen.popitem(last=False)
        return await self.on_event(event_type, payload, data, reference_of(request.url))

    async def on_event(
        self,
        event_type: str,
        payload: dict[str, Any],
        data: Mapping[str, Any],
        reference: str | None,
    ) -> WebhookEvents:
        if event_type.startswith("fax."):
            self._on_fax_event(event_type, payload, data)
            return WebhookEvents(200)
        if event_type.startswith("message."):
            return await self._on_message_event(event_type, payload, reference)
        if event_type.startswith("call."):
            return self._on_call_event(event_type, payload, data, reference)
        return WebhookEvents(200)

    def _on_fax_event(
        self, event_type: str, payload: dict[str, Any], data: Mapping[str, Any]
    ) -> None:
        fax_id = str(payload.get("fax_id") or "")
        if not fax_id:
            return
        direction = payload.get("direction")
        if event_type == "fax.received" or (
            direction == "inbound" and payload.get("status") == "received"
        ):
            self._on_inbound_fax(fax_id, payload, data)
            return
        if direction == "inbound":
            return  # an inbound fax's progress events: only the received one matters
        status = _FAX_EVENT_STATUS.get(event_type) or _FAX_STATUS.get(str(payload.get("status")))
        if status is None:
            return
        self._update(fax_id, _fax_state(fax_id, {**payload, "status": status}))

    def _on_inbound_fax(
        self, fax_id: str, payload: Mapping[str, Any], data: Mapping[str, Any]
    ) -> None:
        media_url = str(payload.get("media_url") or "")
        to = _e164(payload.get("to"))
        if not media_url or not to:
            log.warning("telnyx %s: inbound fax event without media or number", self.config.name)
            return
        handler = self._inbound_handler
        if handler is None:
            log.warning("telnyx %s: inbound fax with no inbox to take it", self.config.name)
            return
        fax = InboundFax(
            fax_id=fax_id,
            to=to,
            sender=_e164(payload.get("from")) or "",
            pages=_int(payload.get("page_count")),
            media_url=media_url,
            received_at=_timestamp(data.get("occurred_at")),
        )
        # Answered at once (Telnyx retries a slow webhook); the inbox fetches the document.
        self.spawn(handler(fax))

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("telnyx %s: webhook follow-up failed", self.config.name,
                      exc_info=task.exception())  # fmt: skip

    # -- messages ----------------------------------------------------------------------------

    async def _on_message_event(
        self, event_type: str, payload: Mapping[str, Any], reference: str | None
    ) -> WebhookEvents:
        if event_type == "message.received" or payload.get("direction") == "inbound":
            sender = payload.get("from")
            recipients = payload.get("to")
            number = _e164(sender.get("phone_number") if isinstance(sender, dict) else sender)
            to = ""
            if isinstance(recipients, list) and recipients and isinstance(recipients[0], dict):
                to = _e164(recipients[0].get("phone_number"))
            if not number:
                return WebhookEvents(200)
            message = InboundMessage(number, to, str(payload.get("text") or ""),
                                     str(payload.get("id") or ""))  # fmt: skip
            await opt_out_by_reply(self.deps.opt_outs, message, f"{KIND} {self.config.name}")
            return WebhookEvents(200, inbound=(message,))
        update = message_update(payload, reference)
        if not update.provider_ref:
            return WebhookEvents(200)
        return WebhookEvents(200, updates=(update,))

    # -- calls (Call Control) ----------------------------------------------------------------

    def _on_call_event(
        self,
        event_type: str,
        payload: Mapping[str, Any],
        data: Mapping[str, Any],
        reference: str | None,
    ) -> WebhookEvents:
        call_id = str(payload.get("call_control_id") or "")
        if not call_id:
            return WebhookEvents(200)
        call = self._calls.get(call_id)
        moment = _timestamp(data.get("occurred_at"))
        at = int(moment)
        ref = reference or (call.request.reference if call is not None else None)

        def report(status: CallStatus, **extra: Any) -> WebhookEvents:
            update = StatusUpdate("call", call_id, status, reference=ref, at=at, **extra)
            return WebhookEvents(200, updates=(update,))

        if event_type == "call.initiated":
            return report("queued")
        if event_type == "call.answered":
            if call is None:  # a call this process did not place (or forgot): end it
                self.spawn(self._command(call_id, "hangup", {}))
                return report("in-progress")
            call.answered_at = moment
            self.spawn(self._play(call_id, call))
            return report("in-progress")
        if event_type in ("call.speak.ended", "call.playback.ended"):
            if call is not None:
                call.plays += 1
                if call.plays < call.request.repeat:
                    self.spawn(self._play(call_id, call))
                else:
                    self.spawn(self._command(call_id, "hangup", {}))
            return WebhookEvents(200)
        if event_type in ("call.machine.detection.ended", "call.machine.premium.detection.ended"):
            result = str(payload.get("result") or "")
            answered_by = {"human": "human", "machine": "machine"}.get(result, "unknown")
            if call is not None:
                call.answered_by = answered_by
            return report("in-progress", answered_by=answered_by)
        if event_type == "call.hangup":
            cause = str(payload.get("hangup_cause") or "")
            answered = call.answered_at if call is not None else None
            self._calls.pop(call_id, None)
            if answered is not None:
                # Connected time in whole seconds, at least 1: an answered call was connected.
                connected = max(1, math.ceil(moment - answered))
                return report("completed", duration_s=connected, error=cause or None)
            status = _HANGUP_STATUS.get(cause, "failed")
            return report(status, error=cause or None)
        return WebhookEvents(200)

    async def _play(self, call_id: str, call: _Call) -> None:
        request = call.request
        if request.audio_url:
            await self._command(call_id, "playback_start", {"audio_url": request.audio_url})
            return
        language = "en-US" if request.language == "multi" else request.language
        voice = request.voice or self.voices.get(language.lower()) or self.default_voice
        await self._command(
            call_id, "speak", {"payload": request.text, "voice": voice, "language": language}
        )

    async def _command(self, call_id: str, action: str, body: Mapping[str, Any]) -> None:
        """A Call Control command; command_id makes a repeated one harmless."""
        try:
            await self.request(
                "POST",
                f"/calls/{call_id}/actions/{action}",
                "voice",
                {**body, "command_id": str(uuid.uuid4())},
            )
        except EngineError as exc:
            log.warning("telnyx %s: call command %s failed: %s", self.config.name, action, exc.code)
            if action != "hangup":  # a call that cannot speak is ended, not left open
                with contextlib.suppress(EngineError):
                    await self.request("POST", f"/calls/{call_id}/actions/hangup", "voice", {})

    def remember_call(self, call_id: str, request: CallRequest) -> None:
        self._calls[call_id] = _Call(request)
        while len(self._calls) > _MAX_CALLS:
            self._calls.popitem(last=False)


@dataclass
class _Call:
    """A call this process placed: what it says, once answered."""

    request: CallRequest
    plays: int = 0
    answered_at: float | None = None  # Unix seconds of call.answered
    answered_by: str | None = None


_MAX_CALLS = 1000
# call.hangup causes of a call never answered -> the neutral call status.
_HANGUP_STATUS: Mapping[str, CallStatus] = {
    "user_busy": "busy",
    "call_rejected": "busy",
    "no_answer": "no-answer",
    "timeout": "no-answer",
    "originator_cancel": "canceled",
    "normal_clearing": "no-answer",
    "time_limit": "no-answer",
}
# Message to[].status (providers.md) -> the neutral message status.
_MESSAGE_STATUS: Mapping[str, MessageStatus] = {
    "queued": "queued",
    "sending": "queued",
    "sent": "sent",
    "delivered": "delivered",
    "sending_failed": "failed",
    "delivery_failed": "undelivered",
    # The carrier took it and never confirmed: as far as anyone can tell, sent.
    "delivery_unconfirmed": "sent",
}


def message_update(doc: Mapping[str, Any], reference: str | None = None) -> StatusUpdate:
    """A message object (API answer or webhook payload) -> a StatusUpdate."""
    recipients = doc.get("to")
    raw = ""
    if isinstance(recipients, list) and recipients and isinstance(recipients[0], dict):
        raw = str(recipients[0].get("status") or "")
    errors = doc.get("errors")
    error = None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        code = errors[0].get("code")
        error = str(code) if code is not None else None
    return StatusUpdate(
        channel="sms",
        provider_ref=str(doc.get("id") or ""),
        status=_MESSAGE_STATUS.get(raw, "queued"),
        reference=reference,
        at=int(_timestamp(doc.get("completed_at") or doc.get("sent_at"))),
        error=error,
    )


class TelnyxSms:
    """The ``sms`` engine (satsgate.engines.messaging.SmsEngine) on the Messaging API."""

    def __init__(self, provider: TelnyxProvider) -> None:
        self.p = provider

    async def send_sms(self, request: SmsRequest) -> SmsSent:
        p = self.p
        body: dict[str, Any] = {
            "to": request.to,
            "text": request.text,
            "type": "SMS",
            "webhook_url": p.webhook_url(request.reference),
            "use_profile_webhooks": False,
        }
        if p.from_number:
            body["from"] = p.from_number
        if p.messaging_profile_id:
            body["messaging_profile_id"] = p.messaging_profile_id
        try:
            data = await p.request("POST", "/messages", "sms", body)
        except EngineError as exc:
            if exc.code == ErrorCode.RECIPIENT_OPTED_OUT:
                await opted_out_recipient(p.deps.opt_outs, request.to)
            raise
        update = message_update(data)
        if not update.provider_ref:
            raise p._failed("sms", ErrorCode.SERVICE_ERROR, "answer without an id", False)
        status: MessageStatus = update.status  # type: ignore[assignment]
        return SmsSent(update.provider_ref, status, _int(data.get("parts")))

    async def sms_status(self, message_id: str) -> StatusUpdate:
        return message_update(await self.p.request("GET", f"/messages/{message_id}", "sms"))


class TelnyxVoice:
    """The ``voice`` engine (satsgate.engines.voice_call.VoiceCallEngine) on Call Control:
    dial, then on ``call.answered`` speak (or play) the message ``repeat`` times and hang
    up; ``time_limit_secs`` ends a call at the paid time whatever happens."""

    def __init__(self, provider: TelnyxProvider) -> None:
        self.p = provider

    async def place_call(self, request: CallRequest) -> CallPlaced:
        p = self.p
        body = {
            "connection_id": p.call_connection_id,
            "to": request.to,
            "from": p.from_number,
            "webhook_url": p.webhook_url(request.reference),
            "client_state": base64.b64encode(request.reference.encode()).decode(),
            "timeout_secs": p.ring_timeout_s,
            "time_limit_secs": max(30, request.max_duration_s),
        }
        data = await p.request("POST", "/calls", "voice", body)
        call_id = str(data.get("call_control_id") or "")
        if not call_id:
            raise p._failed("voice", ErrorCode.SERVICE_ERROR, "answer without a call id", False)
        p.remember_call(call_id, request)
        return CallPlaced(call_id, "queued")

    async def call_status(self, call_id: str) -> StatusUpdate:
        data = await self.p.request("GET", f"/calls/{call_id}", "voice")
        call = self.p._calls.get(call_id)
        reference = call.request.reference if call is not None else None
        if data.get("is_alive"):
            status: CallStatus = "in-progress" if call is None or call.answered_at else "queued"
            return StatusUpdate("call", call_id, status, reference=reference)
        duration = _int(data.get("call_duration")) or 0
        if duration > 0:
            return StatusUpdate("call", call_id, "completed", reference=reference,
                                duration_s=duration)  # fmt: skip
        return StatusUpdate("call", call_id, "no-answer", reference=reference)


_RANK: Mapping[FaxStatus, int] = {"queued": 0, "sending": 1, "delivered": 2, "failed": 2}

INVALID_NUMBER_MESSAGE = "The destination number was refused."
OPTED_OUT_MESSAGE = "The recipient opted out of messages from this node."
_MESSAGES: Mapping[ErrorCode, str] = {
    ErrorCode.RATE_LIMITED: ("The telephony engine is rate-limited right now."),
    ErrorCode.TIMEOUT: "The telephony engine did not answer in time.",
    ErrorCode.L402_UPSTREAM_FAILED: "The telephony engine failed.",
    ErrorCode.SERVICE_ERROR: "The telephony engine rejected the request.",
}


def _error_of(resp: httpx.Response) -> tuple[str | None, str | None]:
    """The first error's ``code`` and ``source.pointer`` of Telnyx's error body."""
    try:
        errors = resp.json().get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            first = errors[0]
            code = first.get("code")
            source = first.get("source")
            pointer = source.get("pointer") if isinstance(source, dict) else None
            return (
                str(code) if code is not None else None,
                str(pointer) if pointer is not None else None,
            )
    except (ValueError, AttributeError):
        pass
    return None, None


def _fax_state(fax_id: str, data: Mapping[str, Any]) -> FaxState:
    status = _FAX_STATUS.get(str(data.get("status")), "queued")
    reason = ""
    if status == "failed":
        raw = str(data.get("failure_reason") or "").lower()
        reason = raw.replace("_", " ") if _REASON_RE.match(raw) else "not delivered"
    return FaxState(fax_id, status, _int(data.get("page_count")), reason)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _e164(value: object) -> str:
    """A number as Telnyx reports it (sometimes without its ``+``), in E.164; "" if not one."""
    if not isinstance(value, str):
        return ""
    digits = value.strip()
    if digits and not digits.startswith("+"):
        digits = "+" + digits
    try:
        return check_e164(digits)
    except ValueError:
        return ""


def _timestamp(value: object) -> float:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()
