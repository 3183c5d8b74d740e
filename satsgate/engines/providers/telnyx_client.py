"""The REST core of the telnyx provider kind: its table's options, calls to Telnyx's v2
API with their retries, and the API's errors mapped to the catalog. The fax engine
(telnyx_fax.py) and the provider (telnyx.py) are built on :class:`TelnyxClient`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from satsgate.domain.telephony import check_e164
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.delivery import REFERENCE_PARAM
from satsgate.engines.errors import EngineError
from satsgate.engines.providers.carriers import ring_timeout_option, voices_option
from satsgate.engines.providers.telnyx_parsing import positive_number, public_key_from, string_list
from satsgate.engines.providers.upstream import (
    check_options,
    log_failure,
    retries_option,
    retry_after_s,
    status_error,
    timeout_option,
)
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger("satsgate.engines.providers.telnyx")  # one logger for the kind

KIND = "telnyx"
DEFAULT_BASE_URL = "https://api.telnyx.com/v2"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_STATUS_POLL_S = 30.0
# Hosts (and their subdomains) an inbound fax's document may be fetched from, besides
# the API's own host; the operator's ``media_hosts`` replaces this list.
DEFAULT_MEDIA_HOSTS = ("telnyx.com",)
# Telnyx's messaging error for a recipient who replied STOP (obs.: Telnyx's error list,
# not providers.md): the number goes on the do-not-contact list.
OPTED_OUT_CODE = "40300"
_KNOWN_OPTIONS = frozenset(
    {
        "public_key", "from_number", "fax_connection_id", "fax_from_number",
        "inbound_fax_numbers", "media_hosts", "status_poll_s", "max_retries",
        "messaging_profile_id", "call_connection_id", "ring_timeout_s", "voices",
        "default_voice",
    }
)  # fmt: skip

INVALID_NUMBER_MESSAGE = "The destination number was refused."
OPTED_OUT_MESSAGE = "The recipient opted out of messages from this node."
_MESSAGES: Mapping[ErrorCode, str] = {
    ErrorCode.RATE_LIMITED: ("The telephony engine is rate-limited right now."),
    ErrorCode.TIMEOUT: "The telephony engine did not answer in time.",
    ErrorCode.L402_UPSTREAM_FAILED: "The telephony engine failed.",
    ErrorCode.SERVICE_ERROR: "The telephony engine rejected the request.",
}


class TelnyxClient:
    """The options of one ``[providers.NAME]`` table of kind ``telnyx``, and Telnyx's v2
    API called with them."""

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
        self.status_poll_s = positive_number(
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
            for n in string_list(options.get("inbound_fax_numbers"), f"{where} inbound_fax_numbers")
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
        hosts = string_list(options.get("media_hosts"), f"{where} media_hosts")
        api_host = urlsplit(self.base_url).hostname or ""
        self.media_hosts = (api_host, *(hosts or DEFAULT_MEDIA_HOSTS))
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s, connect=10.0), follow_redirects=False
        )
        self._tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def _number(value: object, where: str) -> str:
        if not isinstance(value, str):
            raise EngineConfigError(f"{where} must be an E.164 number")
        try:
            return check_e164(value)
        except ValueError as exc:
            raise EngineConfigError(f"{where}: {exc}") from None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.http.aclose()

    # -- HTTP ---------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json"}

    def webhook_url(self, reference: str | None = None, *, here: bool = False) -> str:
        """The webhook route; ``here``: at this instance's own address (the events of a
        call this instance dialed need the call it keeps in memory)."""
        base = self.settings.own_base_url if here else self.settings.public_base_url
        url = f"{base}/api/webhooks/{KIND}/{self.config.name}"
        return f"{url}?{urlencode({REFERENCE_PARAM: reference})}" if reference else url

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("telnyx %s: webhook follow-up failed", self.config.name,
                      exc_info=task.exception())  # fmt: skip

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
