"""What the voice-agent platforms' adapters share (``retell``, ``vapi``): the HTTP client,
the create-then-report and fetch-then-report calls, the variables the agent's prompt
reads, the mapping of upstream failures to EngineError (never naming the platform, its
URL or key), the webhook route's entry point and the listeners a verified webhook wakes.

Each adapter keeps what really differs: its request body, its status and end-reason
vocabularies (``report``) and how its webhooks are authenticated."""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import httpx

from satsgate.domain.voices import AI_CALL_VOICES
from satsgate.engines.ai_call import AiCallReport, AiCallRequest
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.providers.upstream import cause_of
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

ENGINE = "ai_call"
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def option_str(config: ProviderConfig, key: str, *, required: bool = False) -> str:
    value = config.options.get(key, "")
    if not isinstance(value, str) or (required and not value):
        raise EngineConfigError(f'[providers.{config.name}] needs {key} = "..."')
    return value


def voice_map(config: ProviderConfig) -> dict[str, str]:
    """``voices = {Adrian = "<the platform's voice id>", ...}``: the spec's voice names the
    operator mapped; a voice not mapped is left to the agent's own."""
    raw = config.options.get("voices", {})
    if not isinstance(raw, Mapping):
        raise EngineConfigError(f"[providers.{config.name}] voices must be a table")
    out: dict[str, str] = {}
    for name, voice_id in raw.items():
        if name not in AI_CALL_VOICES or not isinstance(voice_id, str) or not voice_id:
            raise EngineConfigError(
                f"[providers.{config.name}] voices: {name!r} is not one of "
                + ", ".join(AI_CALL_VOICES)
            )
        out[str(name)] = voice_id
    return out


def prompt_variables(request: AiCallRequest) -> dict[str, str]:
    """The variables the agent's prompt template reads (``{{agent_prompt}}``, ...)."""
    return {
        "agent_prompt": request.prompt,
        "begin_message": request.begin_message,
        "language": request.language,
        "voice": request.voice or "",
    }


def mapping(value: Any) -> Mapping[str, Any]:
    """An upstream JSON object, or an empty one for anything else."""
    return value if isinstance(value, Mapping) else {}


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def call_id_in(body: bytes, *path: str) -> str | None:
    """The call id at ``path`` in a webhook's JSON body; None if absent or not a string."""
    try:
        found: Any = json.loads(body)
        for key in path:
            found = found[key]
    except (ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found, str) and found else None


def iso_seconds(value: Any) -> float | None:
    """An ISO 8601 time as epoch seconds; None if absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class VoiceAgentProvider(ABC):
    """Base of the voice-agent adapters: one object serves the ``ai_call`` engine."""

    KIND = ""
    DEFAULT_BASE_URL = ""
    CREATE_PATH = ""  # POST: place a call
    CALL_PATH = ""  # GET: one call, "{call_id}" in it

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        self.base_url = (config.base_url or self.DEFAULT_BASE_URL).rstrip("/")
        self.settings = deps.settings
        self.opt_outs = deps.opt_outs  # the do-not-contact list (a transcript's opt-out)
        self.voices = voice_map(config)
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=10.0), follow_redirects=False
        )
        self._listeners: list[Callable[[str], None]] = []

    @property
    def webhook_kind(self) -> str:
        return self.KIND

    def webhook_url(self) -> str:
        return f"{self.settings.public_base_url}/api/webhooks/{self.KIND}/{self.config.name}"

    # -- the Provider protocol ----------------------------------------------------------

    def engine(self, name: str) -> object | None:
        return self if name == ENGINE else None

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- the AiCallEngine protocol ------------------------------------------------------

    def on_update(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    async def place_call(self, request: AiCallRequest) -> AiCallReport:
        body = self.call_body(request)
        return self.normalise(await self.create(f"{self.base_url}{self.CREATE_PATH}", body))

    async def get_call(self, provider_call_id: str) -> AiCallReport:
        path = self.CALL_PATH.format(call_id=provider_call_id)
        return self.normalise(await self.fetch(f"{self.base_url}{path}"))

    # -- what each platform says its own way ---------------------------------------------

    @abstractmethod
    def call_body(self, request: AiCallRequest) -> dict[str, Any]:
        """The create call's body."""

    @abstractmethod
    def normalise(self, call: Mapping[str, Any]) -> AiCallReport:
        """The platform's call object as an AiCallReport."""

    # -- HTTP -----------------------------------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"}

    async def create(self, url: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST the create call. Failures: nothing placed (fall back allowed) when the
        platform refused it or could not be reached; unknown (no fallback) when the
        request may have reached it."""
        try:
            resp = await self.http.post(url, json=body, headers=self.auth_headers())
        except httpx.ConnectError as exc:
            log.warning(
                "%s %s: create unreachable (%s)", self.KIND, self.config.name, cause_of(exc)
            )
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The call service could not be reached; no call was placed.",
            ) from exc
        except httpx.HTTPError as exc:
            log.warning("%s %s: create failed (%s)", self.KIND, self.config.name, cause_of(exc))
            raise EngineError(
                ErrorCode.TIMEOUT, "The call service did not answer in time.", may_fall_back=False
            ) from exc
        return self._json(resp, creating=True)

    async def fetch(self, url: str) -> Mapping[str, Any]:
        try:
            resp = await self.http.get(url, headers=self.auth_headers())
        except httpx.HTTPError as exc:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The call's status could not be read."
            ) from exc
        return self._json(resp, creating=False)

    def _json(self, resp: httpx.Response, *, creating: bool) -> Mapping[str, Any]:
        status = resp.status_code
        if status >= 300:
            log.warning("%s %s: HTTP %d: %s", self.KIND, self.config.name, status, resp.text[:300])
            what = "The call could not be placed" if creating else "The call's status is unknown"
            if status == 429:
                raise EngineError(ErrorCode.RATE_LIMITED, f"{what}: too many calls right now.",
                                  retry_after_s=10)  # fmt: skip
            if status in (400, 422) and creating:
                raise EngineError(
                    ErrorCode.INVALID_INPUT,
                    f"{what}: the destination or the request was refused.",
                    may_fall_back=False,
                )
            # 401/403: this node's account; 5xx: the platform. Nothing was placed on a 4xx;
            # a 5xx may have been half done: no second platform then.
            raise EngineError(
                ErrorCode.SERVICE_ERROR, f"{what}.", may_fall_back=creating and status < 500
            )
        if len(resp.content) > MAX_RESPONSE_BYTES:
            raise EngineError(ErrorCode.SERVICE_ERROR, "The call service answered too much.")
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        if not isinstance(doc, Mapping):
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The call service answered something unreadable.",
                may_fall_back=False,
            )  # fmt: skip
        return doc

    # -- webhooks -------------------------------------------------------------------------

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The platform's call id a genuine webhook is about; None when forged (or when no
        webhook secret is configured: polling only)."""
        raise NotImplementedError

    async def receive_webhook(self, headers: Mapping[str, str], body: bytes) -> int:
        """POST /api/webhooks/<kind>/<name>: 401 when not genuine, else 204."""
        call_id = self.verify_webhook(headers, body)
        if call_id is None:
            log.warning("%s %s: webhook refused (signature)", self.KIND, self.config.name)
            return 401
        for listener in list(self._listeners):
            try:
                listener(call_id)
            except Exception:  # one listener must not stop the others
                log.exception("ai-call webhook listener failed")
        return 204
