"""Provider kind ``elevenlabs``: premium and studio text-to-speech (engine ``tts``) and
voice cloning (engine ``voice_clone``) on ElevenLabs' API (``xi-api-key``).

- ``POST /v1/text-to-speech/{voice_id}?output_format=mp3_44100_128`` (or ``wav_44100``)
  with ``{"text", "model_id", "language_code", "voice_settings": {"speed"}}``; the spec's
  voice names (``English_Aria``) map to ElevenLabs voice ids by the provider's ``voices``
  table, ``default_voice`` (a voice id) serves requests that name none, and a voice
  made by clone-voice (``Custom_`` and the 20-character voice id) is that voice id;
- ``POST /v1/voices/add`` (multipart: ``name``, one ``files`` part,
  ``remove_background_noise``) for clone-voice.

Models (``[providers.NAME.models]``): the spec's TTS tiers 33 (premium), 34 (premium
mini) and 3 (studio) to ElevenLabs model ids; DEFAULT_MODELS is a copyable default.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import httpx

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.local.narration import tts_narrator
from satsgate.engines.providers.upstream import retry_after_whole_s
from satsgate.engines.registry import EngineDeps
from satsgate.engines.synthesis import SynthesisRequest, SynthesisResult
from satsgate.engines.voice_clone import VoiceCloneRequest, VoiceCloneResult
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "elevenlabs"
# Characters per text-to-speech request when narrating a book (the API takes 10,000 on
# its multilingual models and 5,000 on the others).
NARRATION_PART_CHARS = 4500
CLONED_PREFIX = "Custom_"
DEFAULT_BASE_URL = "https://api.elevenlabs.io"
DEFAULT_MODELS: Mapping[str, str] = {
    "33": "eleven_multilingual_v2",  # premium
    "34": "eleven_flash_v2_5",  # premium mini
    "3": "eleven_v3",  # studio
}
_OUTPUT_FORMAT = {"mp3": "mp3_44100_128", "wav": "wav_44100"}
_VOICE_ID = re.compile(r"^[A-Za-z0-9]{20}$")
_MIME = {"mp3": "audio/mpeg", "wav": "audio/wav", "m4a": "audio/mp4"}
# ElevenLabs' voice_settings.speed range; the spec's 0.5..2.0 is clamped into it.
SPEED_MIN, SPEED_MAX = 0.7, 1.2


class ElevenLabsProvider:
    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        self.deps = deps
        self.base_url = config.base_url or DEFAULT_BASE_URL
        voices = config.options.get("voices", {})
        if not isinstance(voices, Mapping) or not all(
            isinstance(v, str) and v for v in voices.values()
        ):
            raise EngineConfigError(
                f"[providers.{config.name}.voices] maps spec voice names to voice ids"
            )
        self.voices: dict[str, str] = {str(k): str(v) for k, v in voices.items()}
        self.default_voice = str(config.options.get("default_voice", ""))
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=10.0), follow_redirects=False
        )

    def engine(self, name: str) -> object | None:
        if name == "tts":
            return _Speech(self)
        if name == "voice_clone":
            return _Clone(self)
        if name == "audiobook":  # premium and studio narration, parts within one request
            return tts_narrator(self.deps, _Speech(self), self.config.models, NARRATION_PART_CHARS)
        return None

    async def aclose(self) -> None:
        await self.http.aclose()

    def voice_id(self, voice: str | None) -> str | None:
        if voice is None:
            return self.default_voice or None
        if voice in self.voices:
            return self.voices[voice]
        # clone-voice answers the provider's id as "Custom_<id>" (the spec's cloned-voice form)
        voice = voice.removeprefix(CLONED_PREFIX)
        return voice if _VOICE_ID.match(voice) else None

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"xi-api-key": self.config.api_key}
        try:
            resp = await self.http.post(f"{self.base_url}{path}", headers=headers, **kwargs)
        except httpx.TimeoutException as exc:
            raise EngineError(
                ErrorCode.TIMEOUT, "The voice service took too long.", may_fall_back=False
            ) from exc
        except httpx.HTTPError as exc:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The voice service could not be reached."
            ) from exc
        if resp.status_code < 400:
            return resp
        status = _status(resp)
        log.warning(
            "elevenlabs %s: %s answered %d (%s)",
            self.config.name,
            path.split("?")[0].rsplit("/", 1)[0],
            resp.status_code,
            status,
        )
        if resp.status_code == 429:
            raise EngineError(
                ErrorCode.RATE_LIMITED,
                "The voice service is busy; try again shortly.",
                retry_after_s=retry_after_whole_s(resp.headers),
            )
        if resp.status_code == 422 or status in ("voice_not_found", "max_character_limit_exceeded"):
            raise EngineError(
                ErrorCode.INVALID_INPUT,
                "The voice service refused this input.",
                may_fall_back=False,
            )
        raise EngineError(ErrorCode.SERVICE_ERROR, "The voice service failed.")


class _Speech:
    """SynthesisEngine on ElevenLabs."""

    def __init__(self, provider: ElevenLabsProvider) -> None:
        self.p = provider

    def unsupported(self, request: object) -> str | None:
        """A voice this provider has no id for (checked before any invoice where the
        service asks)."""
        if isinstance(request, SynthesisRequest) and self.p.voice_id(request.voice) is None:
            return f"voice {request.voice or '(default)'} is not offered on this node"
        return None

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        voice = self.p.voice_id(request.voice)
        if voice is None or not request.model_name:
            raise EngineError(
                ErrorCode.INVALID_INPUT,
                "This voice is not offered on this node.",
                may_fall_back=True,
            )
        body: dict[str, Any] = {
            "text": request.text,
            "model_id": request.model_name,
            "voice_settings": {"speed": min(SPEED_MAX, max(SPEED_MIN, request.speed))},
        }
        if request.language:
            body["language_code"] = request.language
        resp = await self.p.post(
            f"/v1/text-to-speech/{voice}?output_format={_OUTPUT_FORMAT[request.format]}",
            json=body,
        )
        if not resp.content:
            raise EngineError(ErrorCode.SERVICE_ERROR, "The voice service returned no audio.")
        return SynthesisResult(resp.content, request.format)


class _Clone:
    """VoiceCloneEngine on ElevenLabs (instant voice cloning)."""

    def __init__(self, provider: ElevenLabsProvider) -> None:
        self.p = provider

    async def clone(self, request: VoiceCloneRequest) -> VoiceCloneResult:
        files = {
            "files": (
                f"sample.{request.format}",
                request.sample,
                _MIME.get(request.format, "application/octet-stream"),
            )
        }
        data = {
            "name": request.name,
            "remove_background_noise": "true" if request.remove_background_noise else "false",
        }
        resp = await self.p.post("/v1/voices/add", data=data, files=files)
        try:
            doc = resp.json()
            return VoiceCloneResult(str(doc["voice_id"]), bool(doc.get("requires_verification")))
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The voice service answered nonsense.", may_fall_back=False
            ) from exc


def _status(resp: httpx.Response) -> str:
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    if isinstance(detail, Mapping):
        return str(detail.get("status", ""))
    return ""
