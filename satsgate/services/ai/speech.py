"""Speech and audio: text-to-speech, clone-voice, transcription, transcribe-translate,
book-to-audiobook and music. Engine names: ``tts``, ``voice_clone``, ``transcription``,
``speech_translation``, ``audiobook`` (and ``translation`` for a book's translateToLanguage),
``music``. Local engines (satsgate.engines.local) serve ``tts`` and ``audiobook`` on the
global tier (43) with eSpeak NG, and ``transcription`` in English with Whisper tiny.en."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from satsgate.domain.languages import (
    TranscriptionLanguage,
    TranscriptionSource,
)
from satsgate.domain.media import MediaError, audio_duration_s, audio_format
from satsgate.domain.voices import (
    CLONED_VOICE,
    TTS_FAMILY,
    TTS_VOICES,
    check_tts_voice,
    check_voice_description,
)
from satsgate.engines import EngineError
from satsgate.engines.speech_translation import SpeechTranslationEngine, SpeechTranslationRequest
from satsgate.engines.synthesis import SynthesisEngine, SynthesisRequest
from satsgate.engines.transcription import (
    Segment,
    Task,
    TranscriptionEngine,
    TranscriptionRequest,
    TranscriptionResult,
    to_srt,
    to_vtt,
)
from satsgate.engines.voice_clone import VoiceCloneEngine, VoiceCloneRequest
from satsgate.errors import ErrorCode
from satsgate.public_urls import (
    FetchFailed,
    UnsafeUrl,
    check_public_https_url,
    fetch_public,
)
from satsgate.services.ai.engine_io import with_route
from satsgate.services.ai.music import GenerateMusicParams, generate_music
from satsgate.services.base import FlatPrice, PriceShape, ServiceContext, ServiceResult, ServiceSpec
from satsgate.services.catalog.pricing import (
    MSAT,
    MUSIC_LYRICS_ADDON_SATS,
    MUSIC_SATS_PER_SECOND,
    TRANSCRIBE_TRANSLATE_HEADROOM_SATS,
    TRANSCRIBE_TRANSLATE_MARGIN_PERCENT,
    TRANSCRIPTION_SATS_PER_MINUTE,
    TTS_CHARS_PER_SAT,
    TTS_TIER_NAMES,
    music_msat,
    transcribe_translate_msat,
    transcription_msat,
    tts_msat,
)
from satsgate.services.catalog.routing import auto_tts_model
from satsgate.services.inputs.params import (
    AutoModelChoice,
    CallbackFields,
    InvalidField,
    MiB,
    ModelChoice,
    ServiceParams,
    TranslationTarget,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    read_media,
)

SPEED_MIN, SPEED_MAX = 0.5, 2.0
# Tier names a TTS modelId or tier may use besides best / better / standard.
TTS_TIER_ALIASES = TTS_TIER_NAMES
TTS_MODELS = (33, 34, 43, 3)
# An ISO 639 code with optional subtags: the global tier's language (602+ languages), also
# the language of a voice bridge's spoken text (services.comms.voice_bridge).
LANGUAGE_CODE = r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$"


def _voice_owner(voice: str) -> int | None:
    """The TTS model whose voice set holds ``voice`` (the first of its family)."""
    for model_id, family in TTS_FAMILY.items():
        if voice in TTS_VOICES[family]:
            return model_id
    return None


# -- text-to-speech ------------------------------------------------------------------------


class TextToSpeechParams(ServiceParams, AutoModelChoice):
    """The voice must belong to the resolved tier; the global tier takes voice_description
    (words from the listed groups, one per group) and language instead."""

    MODELS: ClassVar[tuple[int, ...]] = TTS_MODELS
    DEFAULT: ClassVar[int] = 33
    TIER_ALIASES: ClassVar[dict[str, int]] = TTS_TIER_ALIASES

    text: str = Field(min_length=1, max_length=5000, description="1 to 5000 characters.")
    voice: str | None = Field(
        None, max_length=80, description="Language_VoiceName from the resolved tier's set."
    )
    speed: float = Field(1.0, ge=SPEED_MIN, le=SPEED_MAX, description="0.5 to 2.0, default 1.0.")
    language: str | None = Field(
        None,
        pattern=LANGUAGE_CODE,
        description="Global tier only: ISO 639 code (602+ languages), default en.",
    )
    voice_description: str | None = Field(
        None,
        validation_alias=alias("voice_description", "voiceDescription"),
        description="Global tier only: comma-separated words, one per group: male|female; "
        "child|teenager|young adult|middle-aged|elderly; very low|low|moderate|high|very high "
        "pitch; whisper; american|british|australian|canadian|indian|chinese|korean|japanese|"
        "portuguese|russian.",
    )
    emotion: Literal["neutral", "happy", "sad", "angry", "fearful", "surprised", "calm"] | None = (
        Field(None, description="Premium tier only.")
    )
    format: Literal["mp3", "wav"] = Field("mp3", validation_alias=alias("format", "audio_format"))
    model: Literal["auto"] | None = Field(
        None,
        description="'auto': a preset voice picks its tier; a description or a non-English "
        "language picks global; otherwise premium.",
    )

    @field_validator("voice_description")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        return None if value is None else check_voice_description(value)

    @model_validator(mode="after")
    def _tier_rules(self) -> Self:
        if self.model == "auto" and (self.modelId is not None or self.tier is not None):
            raise ValueError("model 'auto' cannot be combined with modelId or tier")
        family = TTS_FAMILY[self.chosen_model]
        if self.voice is not None:
            check_tts_voice(self.voice, self.chosen_model)
        if family != "global" and (self.voice_description or self.language):
            raise ValueError("voice_description and language are for the global tier (43) only")
        if self.emotion is not None and family != "premium":
            raise ValueError("emotion is for the premium tier only")
        return self

    def choose_model(self) -> int:
        if self.model == "auto":
            return auto_tts_model(
                voice=self.voice,
                voice_description=self.voice_description,
                language=self.language,
                family_of=_voice_owner,
            )
        return super().choose_model()

    def same_tier(self, a: int, b: int) -> bool:
        return TTS_FAMILY[a] == TTS_FAMILY[b]

    def accepts_model(self, model_id: int) -> bool:
        # Voices, descriptions and emotion belong to a tier family: stay within it; a
        # request with nothing tier-specific may also run on the global tier.
        family = TTS_FAMILY[model_id]
        if family == TTS_FAMILY[self.choose_model()]:
            return True
        return family == "global" and self.voice is None and self.emotion is None

    def to_request(self) -> SynthesisRequest:
        return SynthesisRequest(
            text=self.text,
            model_id=self.chosen_model,
            voice=self.voice,
            speed=self.speed,
            language=self.language,
            voice_description=self.voice_description,
            emotion=self.emotion,
            format=self.format,
        )


async def text_to_speech(ctx: ServiceContext, p: TextToSpeechParams) -> ServiceResult:
    request = p.to_request()
    result = await ctx.engines.run(
        "tts",
        SynthesisEngine,
        lambda engine, name: engine.synthesize(replace(request, model_name=name)),
        model_id=p.chosen_model,
    )
    seconds: float
    try:
        fmt = audio_format(result.audio)
        if result.duration_s is not None:
            seconds = result.duration_s
        else:
            seconds = await asyncio.to_thread(audio_duration_s, result.audio)
    except MediaError:
        fmt, seconds = "", 0.0
    if fmt != p.format:
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            "The speech engine returned no usable audio.",
        )
    stored = await ctx.files.save(result.audio, p.format)
    body = {
        "audioUrl": stored.url,
        "format": p.format,
        "durationSeconds": round(seconds, 2),
        "modelId": p.chosen_model,
    }
    return with_route(ServiceResult(body), p)


def speech_rates_text(chars_per_sat: Mapping[int, int]) -> str:
    """Each speech model's characters per sat, from the table the price reads."""
    return ", ".join(f"{chars_per_sat[m]} chars/sat on model {m}" for m in TTS_MODELS)


TEXT_TO_SPEECH = ServiceSpec(
    slug="text-to-speech",
    tool_name="text_to_speech",
    category="speech",
    title="Text to speech",
    description="Speech from text: { audioUrl }. Per character by tier (BTC-pegged): about "
    + speech_rates_text(TTS_CHARS_PER_SAT)
    + ".",
    params=TextToSpeechParams,
    price_msat=lambda p, book: tts_msat(book, p.chosen_model, len(p.text)),
    handler=text_to_speech,
    price_shape=PriceShape(
        "per_character",
        "per character",
        MSAT,
        rate_by=("tier",),
        btc_pegged=True,
        model_rates={m: f"about {TTS_CHARS_PER_SAT[m]} characters per sat" for m in TTS_MODELS},
        estimate="text-to-speech",
        note=f"About {speech_rates_text(TTS_CHARS_PER_SAT)} (BTC-pegged); at least 1 sat.",
    ),
    model_ids=TTS_MODELS,
    failure_codes=(ErrorCode.INVALID_INPUT,),
    max_body_bytes=64 * 1024,
    example={"text": "Hello from satsgate.", "voice": "English_Aria"},
    engine="tts",
    # A language or voice description the engine cannot speak (the local voice: no Hmong,
    # no Indian accent) is refused before any invoice.
    engine_request=TextToSpeechParams.to_request,
)

# -- clone-voice ---------------------------------------------------------------------------

CLONE_MAX_BYTES = 20 * MiB
CLONE_MIN_S, CLONE_MAX_S = 10.0, 300.0
CLONE_MODEL_ID = 22  # the spec's voice-cloning model
STUDIO_TTS_MODEL_ID = 3  # the text-to-speech tier that takes cloned voices


class CloneVoiceParams(ServiceParams):
    voiceFileUrl: str | None = Field(
        None,
        max_length=2048,
        validation_alias=alias("voiceFileUrl", "voice_file_url", "url"),
        description="Public https:// URL of the sample; send this or voiceFileBase64.",
    )
    voiceFileBase64: str | None = Field(
        None,
        max_length=b64_chars(CLONE_MAX_BYTES),
        validation_alias=alias("voiceFileBase64", "file", "audioBase64"),
        description="The sample as base64: MP3, M4A or WAV, 10 s to 5 min, at most 20 MB, one "
        "speaker, no background music.",
    )
    model: str | None = Field(
        None, max_length=64, description="Voice model family to clone into (engine specific)."
    )
    accuracy: float = Field(0.7, ge=0.0, le=1.0, description="Similarity threshold, 0 to 1.")

    @field_validator("voiceFileUrl")
    @classmethod
    def _public(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_public_https_url(value)
            except UnsafeUrl as exc:
                raise ValueError(f"voiceFileUrl must be public https: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.voiceFileUrl is None) == (self.voiceFileBase64 is None):
            raise ValueError("send exactly one of voiceFileUrl or voiceFileBase64")
        return self

    def check(self) -> Any:
        if self.voiceFileBase64 is None:
            return True  # the URL's file is fetched and checked after payment (clone_voice)
        data = decode_file(self.voiceFileBase64, "voiceFileBase64", CLONE_MAX_BYTES)
        return _checked_sample(data, "voiceFileBase64")


def _checked_sample(data: bytes, field: str) -> tuple[bytes, str]:
    """The sample and its container if it is MP3, M4A or WAV of 10 s to 5 minutes."""
    fmt = read_media(data, field, audio_format)
    seconds = read_media(data, field, audio_duration_s)
    if fmt not in ("mp3", "m4a", "wav"):
        raise InvalidField(field, "the sample must be MP3, M4A or WAV")
    if not CLONE_MIN_S <= seconds <= CLONE_MAX_S:
        raise InvalidField(field, f"the sample is {seconds:.1f} s; it must be 10 s to 5 minutes")
    return data, fmt


async def clone_voice(ctx: ServiceContext, p: CloneVoiceParams) -> ServiceResult:
    """A new voice on the node's cloning provider, usable as the ``voice`` of
    text-to-speech on the same provider. A sample sent as base64 was checked before
    payment; a sample by URL is fetched (public addresses only) and checked now, and a
    bad one is refunded like any failure after payment."""
    if p.voiceFileBase64 is not None:
        # Checked before payment; computed again off the loop if this is a fresh params object.
        sample, fmt = await asyncio.to_thread(p.checked)
    else:
        assert p.voiceFileUrl is not None  # exactly one of the two (the model's validator)
        try:
            data = await fetch_public(ctx.http, p.voiceFileUrl, CLONE_MAX_BYTES)
            sample, fmt = await asyncio.to_thread(_checked_sample, data, "voiceFileUrl")
        except FetchFailed as exc:
            raise EngineError(ErrorCode.INVALID_INPUT, f"voiceFileUrl: {exc}.") from None
        except InvalidField as exc:
            raise EngineError(ErrorCode.INVALID_INPUT, exc.message) from None
    result = await ctx.engines.run(
        "voice_clone",
        VoiceCloneEngine,
        lambda engine, name: engine.clone(
            VoiceCloneRequest(
                sample=sample,
                format=fmt,
                # A label for the provider's voice list: the call id, never the caller's words.
                name=f"satsgate-{ctx.call_id[:16]}",
                remove_background_noise=True,
                model_name=p.model or name,
            )
        ),
        # Instant cloning has no model choice on the providers it runs on: any binding serves.
        model_id=None,
    )
    voice_id = f"Custom_{result.voice_id}"  # the spec's cloned-voice form (voices.CLONED_VOICE)
    if not CLONED_VOICE.match(voice_id):
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The cloning service answered an unusable voice id."
        )
    message = (
        "Voice cloned. Use voice_id as the voice of text-to-speech on this node "
        f"(modelId {STUDIO_TTS_MODEL_ID}, studio)."
    )
    if result.requires_verification:
        message += " The provider asks the voice's owner to verify it before first use."
    return ServiceResult({"voice_id": voice_id, "model": p.model or "default", "message": message})


CLONE_VOICE = ServiceSpec(
    slug="clone-voice",
    tool_name="clone_voice",
    category="voice_cloning",
    title="Clone voice",
    description="Clone a voice from a sample: { voice_id, model, message }; the voice is "
    "reusable in text-to-speech (studio tier).",
    params=CloneVoiceParams,
    price_msat=FlatPrice.of_sats(7500, "voice-cloning"),
    handler=clone_voice,
    model_ids=(CLONE_MODEL_ID,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(CLONE_MAX_BYTES),
    example={"voiceFileUrl": "https://files.example.org/sample.mp3"},
    engine="voice_clone",
)

# -- transcribe-audio ----------------------------------------------------------------------

AUDIO_MAX_BYTES = 45 * MiB
# The request schema's 3 hours (the tool catalog says 60 minutes): the request schema wins.
TRANSCRIPTION_MAX_S = 3 * 3600


class _AudioInput(ServiceParams, CallbackFields):
    file: str = Field(
        validation_alias=alias("file", "audioBase64", "audio"),
        max_length=b64_chars(AUDIO_MAX_BYTES),
        description="Base64 audio: mp3, wav, flac, ogg or m4a; at most 45 MB and 3 hours.",
    )

    def check(self) -> float:
        """Duration in seconds (the price's measure)."""
        data = decode_file(self.file, "file", AUDIO_MAX_BYTES)
        seconds = read_media(data, "file", audio_duration_s)
        if seconds > TRANSCRIPTION_MAX_S:
            raise InvalidField("file", f"the audio is {seconds / 60:.0f} minutes; at most 180")
        return seconds

    @property
    def seconds(self) -> float:
        return float(self.checked())


class TranscribeAudioParams(_AudioInput, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (10,)
    DEFAULT: ClassVar[int] = 10

    type: Literal["transcription", "translation"] = Field(
        "transcription", description="transcription, or translation (into English)."
    )
    language: TranscriptionLanguage = Field("auto", description="auto or one of the 13 codes.")
    names: list[str] | None = Field(
        None,
        max_length=100,
        validation_alias=alias("names", "namesHint", "names_hint"),
        description="Names of people and places to spell right (no extra cost).",
    )
    timestamps: Literal["segment", "word"] = Field(
        "segment", description="'word' for word-level timestamps."
    )

    @field_validator("names")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not 1 <= len(n) <= 100 for n in value):
            raise ValueError("each name is 1 to 100 characters")
        return value


async def _transcribe(
    ctx: ServiceContext,
    p: _AudioInput,
    *,
    language: str | None,
    task: Task = "transcription",
    names: tuple[str, ...] = (),
    words: bool = False,
) -> TranscriptionResult:
    data = await asyncio.to_thread(decode_file, p.file, "file", AUDIO_MAX_BYTES)
    request = TranscriptionRequest(
        audio=data,
        format=audio_format(data),
        language=language,
        task=task,
        names=names,
        word_timestamps=words,
    )
    ctx.progress(5, "transcribing")
    return await ctx.engines.run(
        "transcription",
        TranscriptionEngine,
        lambda engine, name: engine.transcribe(replace(request, model_name=name)),
        model_id=10,
    )


def _segment_doc(segment: Segment, words: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "start": round(segment.start, 3),
        "end": round(segment.end, 3),
        "text": segment.text,
    }
    if words:
        doc["words"] = [
            {"start": round(w.start, 3), "end": round(w.end, 3), "word": w.text}
            for w in segment.words
        ]
    return doc


async def transcribe_audio(ctx: ServiceContext, p: TranscribeAudioParams) -> ServiceResult:
    result = await _transcribe(
        ctx,
        p,
        language=None if p.language == "auto" else p.language,
        task=p.type,
        names=tuple(p.names or ()),
        words=p.timestamps == "word",
    )
    body: dict[str, Any] = {
        "text": result.text,
        "language": result.language,
        "durationSeconds": round(result.duration_s or p.seconds, 2),
    }
    if result.segments:
        body["segments"] = [_segment_doc(s, p.timestamps == "word") for s in result.segments]
        body["srt"] = to_srt(result.segments)
        body["vtt"] = to_vtt(result.segments)
    return ServiceResult(body)


TRANSCRIBE_AUDIO = ServiceSpec(
    slug="transcribe-audio",
    tool_name="transcribe_audio",
    category="speech",
    title="Transcribe audio",
    description="Speech to text in 13 languages (async): { requestId, status, poll_url }, then "
    f"{{ text, segments?, srt?, vtt? }}. {TRANSCRIPTION_SATS_PER_MINUTE} sats per started "
    "minute of audio.",
    params=TranscribeAudioParams,
    price_msat=lambda p, _book: transcription_msat(p.seconds),
    handler=transcribe_audio,
    price_shape=PriceShape(
        "per_minute", "per started minute", transcription_msat(0), estimate="transcribe-audio"
    ),
    mode="job",
    job_type="transcription",
    untrusted_output=True,
    model_ids=(10,),
    failure_codes=(ErrorCode.INVALID_INPUT,),
    max_body_bytes=body_limit(AUDIO_MAX_BYTES),
    example={"file": "<base64 MP3>", "type": "transcription", "language": "en"},
    engine="transcription",
    # A language the engine does not transcribe (the local one: English only) is refused
    # before any invoice; the audio is not needed to tell.
    engine_request=lambda p: TranscriptionRequest(
        audio=b"",
        format="",
        language=None if p.language == "auto" else p.language,
        task=p.type,
    ),
    engine_request_field="language",
)


class TranscribeTranslateParams(_AudioInput, TranslationTarget):
    sourceLanguage: TranscriptionSource | None = Field(
        None,
        validation_alias=alias("sourceLanguage", "source_language"),
        description="One of the 13 transcription codes; omit to detect.",
    )


async def transcribe_translate(ctx: ServiceContext, p: TranscribeTranslateParams) -> ServiceResult:
    data = await asyncio.to_thread(decode_file, p.file, "file", AUDIO_MAX_BYTES)
    request = SpeechTranslationRequest(
        audio=data,
        format=audio_format(data),
        target_language=p.targetLanguage,
        source_language=p.sourceLanguage,
    )
    ctx.progress(5, "transcribing and translating")
    result = await ctx.engines.run(
        "speech_translation",
        SpeechTranslationEngine,
        lambda engine, name: engine.transcribe_translate(replace(request, model_name=name)),
        model_id=10,
    )
    return ServiceResult(
        {
            "transcript": result.transcript,
            "translation": result.translation,
            "sourceLanguage": result.source_language,
            "targetLanguage": p.targetLanguage,
            "translated": result.translated,
        }
    )


TRANSCRIBE_TRANSLATE = ServiceSpec(
    slug="transcribe-translate",
    tool_name="transcribe_translate",
    category="speech",
    title="Transcribe and translate",
    description="Transcribe, then translate into one of 119 languages (async): { jobId }, then "
    "{ transcript, translation, sourceLanguage, targetLanguage, translated }. Transcription "
    f"base plus {TRANSCRIBE_TRANSLATE_HEADROOM_SATS} sats, plus "
    f"{TRANSCRIBE_TRANSLATE_MARGIN_PERCENT}%.",
    params=TranscribeTranslateParams,
    price_msat=lambda p, _book: transcribe_translate_msat(p.seconds),
    handler=transcribe_translate,
    price_shape=PriceShape(
        "per_minute",
        "per started minute",
        transcribe_translate_msat(0),
        base_sats=TRANSCRIBE_TRANSLATE_HEADROOM_SATS,
        estimate="transcribe-translate",
        note=f"The transcription price ({TRANSCRIPTION_SATS_PER_MINUTE} sats per started "
        f"minute) plus {TRANSCRIBE_TRANSLATE_HEADROOM_SATS} sats, plus "
        f"{TRANSCRIBE_TRANSLATE_MARGIN_PERCENT}%.",
    ),
    mode="job",
    job_type="transcribe-translate",
    untrusted_output=True,
    model_ids=(10,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(AUDIO_MAX_BYTES),
    example={"file": "<base64 MP3>", "targetLanguage": "Spanish"},
    engine="speech_translation",
    # A local engine names the source and target languages it serves (English speech,
    # the targets its translator reaches from English): others are refused before any
    # invoice; the audio is not needed to tell.
    engine_request=lambda p: SpeechTranslationRequest(
        audio=b"",
        format="",
        target_language=p.targetLanguage,
        source_language=p.sourceLanguage,
    ),
)

# -- generate-music ------------------------------------------------------------------------


GENERATE_MUSIC = ServiceSpec(
    slug="generate-music",
    tool_name="generate_music",
    category="music",
    title="Generate music",
    description="Music from a prompt and optional lyrics, 15 to 300 s: { audioUrl, billing }. "
    f"{MUSIC_SATS_PER_SECOND} sats per second; lyricsAddon +{MUSIC_LYRICS_ADDON_SATS}. Prepaid, "
    "refunded on failure.",
    params=GenerateMusicParams,
    price_msat=lambda p, _book: music_msat(p.duration, p.lyricsAddon),
    handler=generate_music,
    price_shape=PriceShape(
        "per_second",
        "per second",
        music_msat(15, False),
        estimate="music",
        note=f"15 to 300 seconds; lyricsAddon adds {MUSIC_LYRICS_ADDON_SATS} sats.",
    ),
    model_ids=(23,),
    failure_codes=(ErrorCode.TIMEOUT,),
    max_body_bytes=64 * 1024,
    example={"prompt": "lo-fi hip hop, 80 BPM, mellow piano", "duration": 30},
    engine="music",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (
    TEXT_TO_SPEECH,
    CLONE_VOICE,
    TRANSCRIBE_AUDIO,
    TRANSCRIBE_TRANSLATE,
    GENERATE_MUSIC,
)
