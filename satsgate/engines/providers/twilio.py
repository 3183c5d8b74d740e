"""Provider kind ``twilio``: SMS (engine ``sms``) on the Messages API, automated calls
(engine ``voice``) on the Calls API with TwiML, and the voice bridge's calls (engine
``voice_bridge``, satsgate.engines.providers.twilio_bridge) through the same REST client.

::

    [providers.twilio]
    kind = "twilio"
    account_sid = "AC0123456789abcdef0123456789abcdef"
    api_key_env = "TWILIO_AUTH_TOKEN"   # the account's Auth Token (or api_key = "...")
    from_number = "+14155550100"        # the node's Twilio number (calls; SMS unless:)
    messaging_service_sid = "MG..."     # optional: send SMS through a Messaging Service
    # api_key_sid = "SK..."             # optional: REST auth with an API key: api_key is
    #                                   # then its secret, and webhook_token(_env) the
    #                                   # Auth Token that signs webhooks
    timeout_s = 20                      # optional, per request (default 20)
    max_retries = 1                     # optional: 0, 1 (default) or 2 (see below)
    ring_timeout_s = 30                 # optional: how long a call rings (5 to 600)
    status_callbacks = true             # optional: ask for status webhooks (default true)
    voices = { "de-DE" = "Google.de-DE-Standard-A" }   # optional: <Say> voice by locale
    default_voice = "Polly.Joanna"      # optional: <Say> voice for other locales
    machine_detection = false           # optional: true waits for a voicemail's beep
                                        # (MachineDetection=DetectMessageEnd) so the whole
                                        # message is recorded; humans hear it ~2 s later
    speech = "provider"                 # optional: "node" plays the node's own speech
                                        # (text-to-speech global tier, an expiring file
                                        # link under the public base URL) instead of <Say>

    [engines]
    sms = "twilio"
    voice = "twilio"

Wire facts: providers.md section 6. Requests are form-encoded with HTTP Basic auth
(``AccountSid:AuthToken``, or ``ApiKeySid:Secret``). Status webhooks go to
``<public base URL>/api/webhooks/twilio/<NAME>?ref=<delivery id>`` and are verified with
``X-Twilio-Signature`` (HMAC-SHA1 over the full URL and the sorted form parameters, keyed
by the Auth Token); a forged one is answered 403 and changes nothing. Point the number's
"A message comes in" webhook at ``<public base URL>/api/webhooks/twilio/<NAME>`` too: a
STOP (UNSUBSCRIBE, CANCEL, END, QUIT, and the other languages of
satsgate.domain.do_not_contact) reply puts the sender on the do-not-contact list.

Retries (``max_retries``): a create (message or call) is repeated only when Twilio
certainly did not act on it: 429 (too many requests; after its Retry-After, at most 5
s) and 503, and a connection that failed before the request went out. A timeout or a
500/502/504 after the request went out is not repeated and never falls back to another
provider (the message may be on its way). Reads (status fetches) are also repeated on
other 5xx and dropped connections.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import logging
import re
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import httpx

from satsgate.constant_time import texts_equal
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
from satsgate.engines.messaging import MessageStatus, SmsRequest, SmsSent
from satsgate.engines.providers.carriers import (
    opt_out_by_reply,
    recording_opt_out,
    ring_timeout_option,
    voices_option,
)
from satsgate.engines.providers.upstream import check_options, retries_option, timeout_option
from satsgate.engines.registry import EngineDeps
from satsgate.engines.voice_call import CallPlaced, CallRequest, CallStatus
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "twilio"
DEFAULT_BASE_URL = "https://api.twilio.com"
API_VERSION = "2010-04-01"
DEFAULT_TIMEOUT_S = 20.0
MAX_RETRY_WAIT_S = 5.0
# Twilio takes TwiML inline up to this many characters; longer TwiML is served from
# the webhook route (the call asks for it at answer time).
MAX_INLINE_TWIML = 4000
TWIML_PARAM = "twiml"
MAX_PENDING_TWIML = 1000

_ACCOUNT_SID = re.compile(r"^AC[0-9a-fA-F]{32}$")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
_SID = re.compile(r"^[A-Z]{2}[0-9a-fA-F]{32}$")
# Characters XML 1.0 cannot carry, even escaped.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_KNOWN_OPTIONS = frozenset(
    {
        "account_sid",
        "from_number",
        "messaging_service_sid",
        "api_key_sid",
        "webhook_token",
        "webhook_token_env",
        "max_retries",
        "ring_timeout_s",
        "status_callbacks",
        "voices",
        "default_voice",
        "speech",
        "machine_detection",
    }
)

# Twilio error codes (https://www.twilio.com/docs/api/errors) that say the caller's
# number cannot be reached as given: the caller's input, refunded, no other provider.
INVALID_NUMBER_CODES = frozenset(
    {21211, 21214, 21217, 21401, 21407, 21421, 21614, 13223, 13224, 21610}
)
OPTED_OUT_CODE = 21610  # the recipient replied STOP to this sender
RATE_CODES = frozenset({14107, 20429, 30022})

_MESSAGE_STATUS: Mapping[str, MessageStatus] = {
    "accepted": "queued",
    "scheduled": "queued",
    "queued": "queued",
    "sending": "queued",
    "sent": "sent",
    "delivered": "delivered",
    "read": "delivered",
    "partially_delivered": "delivered",
    "undelivered": "undelivered",
    "failed": "failed",
    "canceled": "failed",
}
_CALL_STATUS: Mapping[str, CallStatus] = {
    "queued": "queued",
    "initiated": "queued",
    "ringing": "ringing",
    "in-progress": "in-progress",
    "answered": "in-progress",
    "completed": "completed",
    "busy": "busy",
    "no-answer": "no-answer",
    "failed": "failed",
    "canceled": "canceled",
}

SMS_FAILED = "The SMS could not be sent."
CALL_FAILED = "The call could not be placed."
NOT_REACHABLE = "The number cannot be reached as given (not a valid or reachable number)."
OPTED_OUT = "The recipient asked not to receive messages from this node."
BUSY = "The phone network service is busy right now."
TIMED_OUT = "The phone network service did not answer in time."


# -- signatures ------------------------------------------------------------------------------


def signature(token: str, url: str, params: Mapping[str, Sequence[str]]) -> str:
    """X-Twilio-Signature of a form POST to ``url`` (providers.md section 6): base64 of
    HMAC-SHA1 over the URL and each parameter name followed by its sorted, distinct
    values, names sorted."""
    data = url
    for key in sorted(params):
        for value in sorted(set(params[key])):
            data += key + value
    mac = hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(mac).decode()


def _url_variants(url: str) -> list[str]:
    """The URL as given, and with/without the scheme's default port (the SDK accepts
    both)."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    variants = [url]
    if default is None or not parts.hostname:
        return variants
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port is None:
        variants.append(urlunsplit(parts._replace(netloc=f"{host}:{default}")))
    elif parts.port == default:
        variants.append(urlunsplit(parts._replace(netloc=host)))
    return variants


def valid_signature(token: str, url: str, params: Mapping[str, Sequence[str]], given: str) -> bool:
    if not token or not given:
        return False
    return any(
        texts_equal(given, signature(token, candidate, params)) for candidate in _url_variants(url)
    )


# -- TwiML -----------------------------------------------------------------------------------


def speakable(text: str) -> str:
    """``text`` as XML 1.0 can carry it: normalised (NFC), without control characters."""
    return _XML_FORBIDDEN.sub(" ", unicodedata.normalize("NFC", text))


def say_twiml(
    text: str, *, language: str | None, voice: str | None, repeat: int, audio_url: str | None
) -> str:
    """``<Response><Pause length="1"/><Say|Play loop="repeat">...</Say|Play><Hangup/>
    </Response>``: a second's pause so the person who picked up hears the start; every
    caller-given string is XML-escaped by the serializer, never pasted into markup."""
    root = ET.Element("Response")
    ET.SubElement(root, "Pause", {"length": "1"})
    if audio_url is not None:
        play = ET.SubElement(root, "Play", {"loop": str(repeat)})
        play.text = audio_url
    else:
        attrs = {"loop": str(repeat)}
        if language:
            attrs["language"] = language
        if voice:
            attrs["voice"] = voice
        say = ET.SubElement(root, "Say", attrs)
        say.text = speakable(text)
    ET.SubElement(root, "Hangup")
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(root, encoding="unicode")


EMPTY_TWIML = b'<?xml version="1.0" encoding="UTF-8"?><Response/>'


# -- REST client -----------------------------------------------------------------------------


class TwilioClient:
    """The REST calls satsgate makes (messages, calls, their status, hang-up) and the
    webhook signature check; shared by the SMS, call and voice-bridge engines. Errors
    are EngineErrors whose messages name no provider, URL or key."""

    def __init__(
        self,
        *,
        account_sid: str,
        username: str,
        secret: str,
        signing_token: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 1,
        name: str = KIND,
    ) -> None:
        self.account_sid = account_sid
        self._auth = httpx.BasicAuth(username, secret)
        self._signing_token = signing_token
        self.base = f"{base_url.rstrip('/')}/{API_VERSION}/Accounts/{account_sid}"
        self.max_retries = max_retries
        self.name = name  # the operator's provider name, for log lines
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    def valid_signature(
        self, url: str, params: Mapping[str, Sequence[str]], signature: str
    ) -> bool:
        """Whether ``signature`` (X-Twilio-Signature) signs a form POST to ``url``."""
        return valid_signature(self._signing_token, url, params, signature)

    # -- requests ----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        form: Sequence[tuple[str, str]] | None,
        *,
        creates: bool,
        failed: str,
    ) -> dict[str, Any]:
        """One request with the retry rules of the module docstring; the JSON answer."""
        url = f"{self.base}{path}"
        attempt = 0
        while True:
            try:
                resp = await self.http.request(
                    method,
                    url,
                    data=_form_dict(form) if form is not None else None,
                    auth=self._auth,
                    headers={"Accept": "application/json"},
                )
            except httpx.ConnectError as exc:  # nothing went out: safe to repeat
                if attempt < self.max_retries:
                    attempt += 1
                    await asyncio.sleep(0.25 * attempt)
                    continue
                self._log(path, "connection failed", ErrorCode.SERVICE_ERROR)
                raise EngineError(ErrorCode.SERVICE_ERROR, failed) from exc
            except httpx.TimeoutException as exc:
                self._log(path, "timeout", ErrorCode.TIMEOUT)
                raise EngineError(
                    ErrorCode.TIMEOUT,
                    f"{TIMED_OUT} {failed}",
                    retry_after_s=20,
                    may_fall_back=not creates,
                ) from exc
            except httpx.HTTPError as exc:  # broken mid-way: it may have been acted on
                self._log(path, f"transport error {type(exc).__name__}", ErrorCode.SERVICE_ERROR)
                raise EngineError(
                    ErrorCode.SERVICE_ERROR, failed, may_fall_back=not creates
                ) from exc
            status = resp.status_code
            if status < 400:
                try:
                    doc = resp.json()
                except ValueError as exc:
                    self._log(path, f"HTTP {status} unreadable body", ErrorCode.SERVICE_ERROR)
                    raise EngineError(ErrorCode.SERVICE_ERROR, failed, may_fall_back=False) from exc
                if not isinstance(doc, dict):
                    raise EngineError(ErrorCode.SERVICE_ERROR, failed, may_fall_back=False)
                return doc
            retryable = status in (429, 503) or (not creates and status >= 500)
            if retryable and attempt < self.max_retries:
                attempt += 1
                await asyncio.sleep(min(MAX_RETRY_WAIT_S, _retry_after(resp, 0.5 * attempt)))
                continue
            raise self._error(path, resp, creates=creates, failed=failed)

    def _error(self, path: str, resp: httpx.Response, *, creates: bool, failed: str) -> EngineError:
        code = _twilio_code(resp)
        status = resp.status_code
        cause = f"HTTP {status}" + (f" (error {code})" if code else "")
        if code == OPTED_OUT_CODE:
            error = EngineError(ErrorCode.RECIPIENT_OPTED_OUT, OPTED_OUT, may_fall_back=False)
        elif code in INVALID_NUMBER_CODES:
            error = EngineError(ErrorCode.INVALID_INPUT, NOT_REACHABLE, may_fall_back=False)
        elif status == 429 or code in RATE_CODES:
            error = EngineError(
                ErrorCode.RATE_LIMITED,
                BUSY,
                retry_after_s=_retry_after(resp, 10.0),
                may_fall_back=True,
            )
        elif status == 503:
            error = EngineError(ErrorCode.SERVICE_ERROR, failed, may_fall_back=True)
        elif status >= 500:
            # The create may have been carried out before the error: never elsewhere again.
            error = EngineError(ErrorCode.SERVICE_ERROR, failed, may_fall_back=not creates)
        else:  # 400/401/403/404: the operator's account, number or permissions
            error = EngineError(ErrorCode.SERVICE_ERROR, failed, may_fall_back=True)
        self._log(path, cause, error.code)
        return error

    def _log(self, path: str, cause: str, code: ErrorCode) -> None:
        # The path without ids: "Messages.json", "Calls/….json".
        what = re.sub(r"[A-Z]{2}[0-9a-fA-F]{32}", "…", path)
        log.warning("twilio %s: %s %s -> %s", self.name, what, cause, code)

    # -- messages ----------------------------------------------------------------------------

    async def send_message(
        self,
        *,
        to: str,
        body: str,
        from_: str | None = None,
        messaging_service_sid: str | None = None,
        status_callback: str | None = None,
    ) -> dict[str, Any]:
        """POST Messages.json -> the message resource (``sid``, ``status``, ...)."""
        form = [("To", to), ("Body", body)]
        if messaging_service_sid:
            form.append(("MessagingServiceSid", messaging_service_sid))
        elif from_:
            form.append(("From", from_))
        if status_callback:
            form.append(("StatusCallback", status_callback))
        return await self._request("POST", "/Messages.json", form, creates=True, failed=SMS_FAILED)

    async def fetch_message(self, sid: str) -> dict[str, Any]:
        _check_sid(sid)
        return await self._request(
            "GET", f"/Messages/{sid}.json", None, creates=False, failed=SMS_FAILED
        )

    # -- calls -------------------------------------------------------------------------------

    async def create_call(
        self,
        *,
        to: str,
        from_: str,
        twiml: str | None = None,
        status_callback: str | None = None,
        status_events: Sequence[str] = ("completed",),
        time_limit_s: int | None = None,
        url: str | None = None,
        ring_timeout_s: int | None = None,
        machine_detection: str | None = None,
    ) -> str:
        """POST Calls.json with inline ``twiml`` (or a ``url`` that serves it) -> the
        call's SID."""
        if (twiml is None) == (url is None):
            raise ValueError("give twiml or url")
        form = [("To", to), ("From", from_)]
        if twiml is not None:
            form.append(("Twiml", twiml))
        else:
            form += [("Url", str(url)), ("Method", "POST")]
        if status_callback:
            form += [("StatusCallback", status_callback), ("StatusCallbackMethod", "POST")]
            form += [("StatusCallbackEvent", event) for event in status_events]
        if time_limit_s is not None:
            form.append(("TimeLimit", str(int(time_limit_s))))
        if ring_timeout_s is not None:
            form.append(("Timeout", str(int(ring_timeout_s))))
        if machine_detection is not None:
            form.append(("MachineDetection", machine_detection))
        doc = await self._request("POST", "/Calls.json", form, creates=True, failed=CALL_FAILED)
        sid = doc.get("sid")
        if not isinstance(sid, str) or not sid:
            raise EngineError(ErrorCode.SERVICE_ERROR, CALL_FAILED, may_fall_back=False)
        return sid

    async def fetch_call(self, sid: str) -> dict[str, Any]:
        _check_sid(sid)
        return await self._request(
            "GET", f"/Calls/{sid}.json", None, creates=False, failed=CALL_FAILED
        )

    async def hang_up(self, call_sid: str) -> None:
        """End a call (``Status=completed``); a call that already ended is fine."""
        _check_sid(call_sid)
        try:
            await self._request(
                "POST",
                f"/Calls/{call_sid}.json",
                [("Status", "completed")],
                creates=False,
                failed=CALL_FAILED,
            )
        except EngineError as exc:
            # Twilio answers 4xx for a call that is no longer in progress.
            if exc.code not in (ErrorCode.SERVICE_ERROR, ErrorCode.INVALID_INPUT):
                raise


def _form_dict(form: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Form pairs -> httpx's form mapping, repeated names (StatusCallbackEvent) kept."""
    out: dict[str, list[str]] = {}
    for key, value in form:
        out.setdefault(key, []).append(value)
    return out


def _check_sid(sid: str) -> None:
    if not _SID.match(sid):
        raise EngineError(ErrorCode.SERVICE_ERROR, "Unknown message or call.", may_fall_back=False)


def _twilio_code(resp: httpx.Response) -> int | None:
    try:
        doc = resp.json()
    except ValueError:
        return None
    code = doc.get("code") if isinstance(doc, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _retry_after(resp: httpx.Response, default: float) -> float:
    raw = resp.headers.get("retry-after", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return default


def _unix(value: object) -> int | None:
    """An RFC 2822 date of Twilio's JSON -> unix seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError):
        return None


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value not in (None, "") else None
    except ValueError:
        return None


def message_update(doc: Mapping[str, Any], reference: str | None = None) -> StatusUpdate:
    """A message resource (or its status callback, lower-cased) -> a StatusUpdate."""
    status = _MESSAGE_STATUS.get(str(doc.get("status", "")), "queued")
    error = doc.get("error_code")
    return StatusUpdate(
        channel="sms",
        provider_ref=str(doc.get("sid", "")),
        status=status,
        reference=reference,
        at=_unix(doc.get("date_updated")),
        error=None if error in (None, "") else str(error),
    )


def call_update(doc: Mapping[str, Any], reference: str | None = None) -> StatusUpdate:
    status = _CALL_STATUS.get(str(doc.get("status", "")), "queued")
    return StatusUpdate(
        channel="call",
        provider_ref=str(doc.get("sid", "")),
        status=status,
        reference=reference,
        at=_unix(doc.get("date_updated")),
        duration_s=_int(doc.get("duration")) if status == "completed" else None,
        answered_by=str(doc["answered_by"]) if doc.get("answered_by") else None,
    )


# -- provider ---------------------------------------------------------------------------------


class TwilioProvider:
    """``[providers.NAME] kind = "twilio"``: engines ``sms``, ``voice``, ``voice_bridge``;
    the delivery webhooks at /api/webhooks/twilio/NAME (satsgate.engines.delivery)."""

    webhook_kind = KIND

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        where = f"[providers.{config.name}]"
        opts = config.options
        check_options(config, _KNOWN_OPTIONS)
        sid = opts.get("account_sid")
        if not isinstance(sid, str) or not _ACCOUNT_SID.match(sid):
            raise EngineConfigError(f'{where} needs account_sid = "AC..." (34 characters)')
        if not config.api_key:
            raise EngineConfigError(
                f'{where} needs the Auth Token: api_key_env = "ENV_VAR" or api_key = "..."'
            )
        self.from_number = _opt_str(opts, "from_number", where)
        if self.from_number and not _E164.match(self.from_number):
            raise EngineConfigError(f"{where} from_number must be E.164 (+14155550100)")
        self.messaging_service_sid = _opt_str(opts, "messaging_service_sid", where)
        if self.messaging_service_sid and not self.messaging_service_sid.startswith("MG"):
            raise EngineConfigError(f'{where} messaging_service_sid must be "MG..."')
        if not self.from_number and not self.messaging_service_sid:
            raise EngineConfigError(f"{where} needs from_number (or messaging_service_sid)")
        key_sid = _opt_str(opts, "api_key_sid", where)
        signing = config.api_key
        if key_sid:
            if not key_sid.startswith("SK"):
                raise EngineConfigError(f'{where} api_key_sid must be "SK..."')
            signing = _webhook_token(opts, where, deps)
        retries = retries_option(config)
        self.ring_timeout_s = ring_timeout_option(opts, where, 600)
        callbacks = opts.get("status_callbacks", True)
        if not isinstance(callbacks, bool):
            raise EngineConfigError(f"{where} status_callbacks must be true or false")
        self.status_callbacks = callbacks
        self.voices = voices_option(opts, where, "<Say> voice names")
        self.default_voice = _opt_str(opts, "default_voice", where)
        speech = opts.get("speech", "provider")
        if speech not in ("provider", "node"):
            raise EngineConfigError(f'{where} speech must be "provider" or "node"')
        self.node_speech = speech == "node"
        detection = opts.get("machine_detection", False)
        if not isinstance(detection, bool):
            raise EngineConfigError(f"{where} machine_detection must be true or false")
        self.machine_detection = detection
        self.config = config
        self.deps = deps
        self.client = TwilioClient(
            account_sid=sid,
            username=key_sid or sid,
            secret=config.api_key,
            signing_token=signing,
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout_s=timeout_option(config, DEFAULT_TIMEOUT_S),
            max_retries=retries,
            name=config.name,
        )
        # TwiML too long to send inline, by delivery id, until the call asks for it.
        self._pending_twiml: dict[str, str] = {}

    def engine(self, name: str) -> object | None:
        if name == "sms":
            return TwilioSms(self)
        if name == "voice":
            if not self.from_number:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] calls need from_number (a voice number)"
                )
            return TwilioVoice(self)
        if name == "voice_bridge":
            try:
                from satsgate.engines.providers import twilio_bridge  # type: ignore[attr-defined,unused-ignore]
            except ImportError:
                return None
            return twilio_bridge.TwilioBridgeEngine(self.client, self.config)  # type: ignore[no-any-return,unused-ignore]
        return None

    async def aclose(self) -> None:
        await self.client.aclose()

    def webhook_url(self, reference: str, *, here: bool = False, **extra: str) -> str:
        """The webhook route; ``here``: at this instance's own address (a long message's
        TwiML is kept in this instance's memory until its call fetches it)."""
        query = urlencode({REFERENCE_PARAM: reference, **extra})
        settings = self.deps.settings
        base = (settings.own_base_url if here else settings.public_base_url).rstrip("/")
        return f"{base}/api/webhooks/{KIND}/{quote(self.config.name, safe='')}?{query}"

    def voice_for(self, language: str) -> str | None:
        return self.voices.get(language.lower()) or self.default_voice or None

    # -- webhooks -----------------------------------------------------------------------------

    async def receive_events(self, request: WebhookRequest) -> WebhookEvents:
        """Status callbacks, inbound messages and TwiML fetches, each signed with
        X-Twilio-Signature; anything unsigned or forged -> 403 and nothing else."""
        if request.method != "POST":
            return WebhookEvents(405)
        try:
            params = parse_qs(
                request.body.decode("utf-8"), keep_blank_values=True, strict_parsing=False
            )
        except UnicodeDecodeError:
            return WebhookEvents(400)
        given = request.headers.get("x-twilio-signature", "")
        if not any(self.client.valid_signature(url, params, given) for url in request.urls):
            log.warning("twilio %s: webhook with a bad signature refused", self.config.name)
            return WebhookEvents(403)
        query = parse_qs(urlsplit(request.url).query)
        reference = reference_of(request.url)

        def one(name: str) -> str:
            values = params.get(name) or [""]
            return values[0]

        if query.get(TWIML_PARAM) and reference:
            twiml = self._pending_twiml.get(reference)  # kept for a retried fetch
            if twiml is None:
                return WebhookEvents(200, body=EMPTY_TWIML, content_type="application/xml")
            return WebhookEvents(200, body=twiml.encode(), content_type="application/xml")
        if one("CallSid") and one("CallStatus"):
            status = one("CallStatus")
            doc = {
                "sid": one("CallSid"),
                "status": status,
                "duration": one("CallDuration"),
                "answered_by": one("AnsweredBy"),
            }
            update = call_update(doc, reference)
            if status in ("completed", "busy", "no-answer", "failed", "canceled") and reference:
                self._pending_twiml.pop(reference, None)
            error = one("ErrorCode") or None
            if error:
                update = dataclasses.replace(update, error=error)
            return WebhookEvents(200, updates=(update,))
        message_status = one("MessageStatus") or one("SmsStatus")
        if one("MessageSid") and message_status and message_status not in ("received", "receiving"):
            doc = {
                "sid": one("MessageSid"),
                "status": message_status,
                "error_code": one("ErrorCode"),
            }
            return WebhookEvents(200, updates=(message_update(doc, reference),))
        if one("MessageSid") and one("From"):
            inbound = InboundMessage(one("From"), one("To"), one("Body"), one("MessageSid"))
            await opt_out_by_reply(
                self.deps.opt_outs,
                inbound,
                f"{KIND} {self.config.name}",
                stop=one("OptOutType").upper() == "STOP",  # Twilio's own classification
            )
            return WebhookEvents(
                200, inbound=(inbound,), body=EMPTY_TWIML, content_type="application/xml"
            )
        return WebhookEvents(200)


class TwilioSms:
    """The ``sms`` engine (satsgate.engines.messaging.SmsEngine)."""

    def __init__(self, provider: TwilioProvider) -> None:
        self.p = provider

    async def send_sms(self, request: SmsRequest) -> SmsSent:
        p = self.p
        callback = p.webhook_url(request.reference) if p.status_callbacks else None
        async with recording_opt_out(p.deps.opt_outs, request.to):
            doc = await p.client.send_message(
                to=request.to,
                body=request.text,
                from_=p.from_number,
                messaging_service_sid=p.messaging_service_sid,
                status_callback=callback,
            )
        update = message_update(doc)
        if not update.provider_ref:
            raise EngineError(ErrorCode.SERVICE_ERROR, SMS_FAILED, may_fall_back=False)
        status: MessageStatus = update.status  # type: ignore[assignment]
        return SmsSent(update.provider_ref, status, _int(doc.get("num_segments")))

    async def sms_status(self, message_id: str) -> StatusUpdate:
        return message_update(await self.p.client.fetch_message(message_id))


class TwilioVoice:
    """The ``voice`` engine (satsgate.engines.voice_call.VoiceCallEngine)."""

    def __init__(self, provider: TwilioProvider) -> None:
        self.p = provider
        # The call service synthesizes the message and passes its audio_url (``speech =
        # "node"``); otherwise Twilio's <Say> speaks the text.
        self.wants_audio = provider.node_speech

    async def place_call(self, request: CallRequest) -> CallPlaced:
        p = self.p
        language = None if request.language == "multi" else request.language
        voice = request.voice or (p.voice_for(language) if language else None)
        twiml = say_twiml(
            request.text,
            language=language,
            voice=voice,
            repeat=request.repeat,
            audio_url=request.audio_url,
        )
        callback = p.webhook_url(request.reference) if p.status_callbacks else None
        inline: str | None = twiml
        url: str | None = None
        if len(twiml) > MAX_INLINE_TWIML:
            inline, url = None, p.webhook_url(request.reference, here=True, **{TWIML_PARAM: "1"})
            while len(p._pending_twiml) >= MAX_PENDING_TWIML:  # ended calls no report closed
                p._pending_twiml.pop(next(iter(p._pending_twiml)))
            p._pending_twiml[request.reference] = twiml
        try:
            sid = await p.client.create_call(
                to=request.to,
                from_=str(p.from_number),
                twiml=inline,
                url=url,
                status_callback=callback,
                status_events=("initiated", "ringing", "answered", "completed"),
                time_limit_s=request.max_duration_s,
                ring_timeout_s=p.ring_timeout_s,
                machine_detection="DetectMessageEnd" if p.machine_detection else None,
            )
        except EngineError:
            p._pending_twiml.pop(request.reference, None)
            raise
        return CallPlaced(sid, "queued")

    async def call_status(self, call_id: str) -> StatusUpdate:
        return call_update(await self.p.client.fetch_call(call_id))


def _opt_str(opts: Mapping[str, Any], key: str, where: str) -> str:
    value = opts.get(key, "")
    if not isinstance(value, str):
        raise EngineConfigError(f"{where} {key} must be a string")
    return value


def _webhook_token(opts: Mapping[str, Any], where: str, deps: EngineDeps) -> str:
    import os

    token = _opt_str(opts, "webhook_token", where)
    env = _opt_str(opts, "webhook_token_env", where)
    if env:
        if token:
            raise EngineConfigError(f"{where}: give webhook_token or webhook_token_env, not both")
        token = os.environ.get(env, "")
        if not token:
            raise EngineConfigError(f"{where}: webhook_token_env names {env!r}, which is not set")
    if not token:
        raise EngineConfigError(
            f"{where}: with api_key_sid, webhook_token(_env) must give the account's Auth "
            "Token (Twilio signs webhooks with it)"
        )
    return token
