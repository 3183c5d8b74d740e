"""epub-audiobook: a whole book narrated chapter by chapter (a job), its price by the
book's characters and the voices asked for."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from satsgate.domain.languages import (
    TranslationLanguage,
)
from satsgate.domain.media import MediaError, audio_duration_s, measure_book
from satsgate.domain.voices import (
    TTS_FAMILY,
    check_tts_voice,
    check_voice_description,
)
from satsgate.engines import EngineError
from satsgate.engines.audiobook import AudiobookEngine, Chapter, NarrationRequest
from satsgate.engines.local import book as books
from satsgate.engines.translation import TranslationEngine, TranslationRequest
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.ai.speech import (
    SPEED_MAX,
    SPEED_MIN,
    TTS_MODELS,
    TTS_TIER_ALIASES,
    speech_rates_text,
)
from satsgate.services.base import PriceShape, ServiceContext, ServiceResult, ServiceSpec
from satsgate.services.catalog.pricing import (
    AUDIOBOOK_CHARS_PER_SAT,
    AUDIOBOOK_MIN_SATS,
    MSAT,
    audiobook_msat,
    translation_msat,
)
from satsgate.services.catalog.rates import RateBook
from satsgate.services.inputs.params import (
    CallbackFields,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    read_media,
)

# -- epub-audiobook ------------------------------------------------------------------------

BOOK_MAX_BYTES = 50 * MiB


class EpubAudiobookParams(ServiceParams, ModelChoice, CallbackFields):
    MODELS: ClassVar[tuple[int, ...]] = TTS_MODELS
    DEFAULT: ClassVar[int] = 33
    TIER_ALIASES: ClassVar[dict[str, int]] = TTS_TIER_ALIASES

    epubBase64: str = Field(
        validation_alias=alias("epubBase64", "file", "documentBase64"),
        max_length=b64_chars(BOOK_MAX_BYTES),
        description="Base64 of an EPUB, PDF or TXT file, at most 50 MB.",
    )
    fileName: str = Field(
        min_length=5,
        max_length=255,
        pattern=r"(?i)\.(epub|pdf|txt)$",
        validation_alias=alias("fileName", "file_name"),
        description="Original name with extension (.epub, .pdf or .txt).",
    )
    voice: str | None = Field(
        None,
        max_length=200,
        description="A voice of the resolved tier (omit unless modelId is pinned); on the global "
        "tier a voice design from the voice_description word groups.",
    )
    language: TranslationLanguage = Field("English", description="Narration language.")
    speed: float = Field(1.0, ge=SPEED_MIN, le=SPEED_MAX, description="0.5 to 2.0, default 1.0.")
    selectedChapterIndices: list[int] | None = Field(
        None,
        max_length=2000,
        validation_alias=alias("selectedChapterIndices", "selected_chapter_indices"),
        description="Zero-based chapter indices; omit to narrate every chapter.",
    )
    translateToLanguage: TranslationLanguage | None = Field(
        None,
        validation_alias=alias("translateToLanguage", "translate_to_language"),
        description="Translate first (English name, ISO 639 code or locale tag); the "
        "translation cost is added.",
    )

    @model_validator(mode="after")
    def _voice(self) -> Self:
        if self.voice is not None:
            if TTS_FAMILY[self.chosen_model] == "global":
                self.voice = check_voice_description(self.voice)
            else:
                check_tts_voice(self.voice, self.chosen_model)
        return self

    def check(self) -> int:
        """Narrated characters (the selected chapters) -- the price's measure."""
        data = decode_file(self.epubBase64, "epubBase64", BOOK_MAX_BYTES)
        return read_media(
            data,
            "epubBase64",
            lambda d: measure_book(d, self.fileName).chars_of(self.selectedChapterIndices),
        )

    @property
    def narrated_chars(self) -> int:
        return int(self.checked())

    def accepts_model(self, model_id: int) -> bool:
        # A tier's preset voice stays on its tier; without one any tier can narrate.
        return self.voice is None or TTS_FAMILY[model_id] == TTS_FAMILY[self.choose_model()]


def _audiobook_msat(p: EpubAudiobookParams, book: RateBook) -> int:
    chars = p.narrated_chars
    price = audiobook_msat(book, p.chosen_model, chars)
    if p.translateToLanguage is not None:
        price += translation_msat(chars, p.translateToLanguage)
    return price


# Sanity bounds of a narration's length: no voice reads faster than FASTEST_CHARS_PER_S
# characters a second at speed 1.0 (espeak-ng reads about 15); an audiobook that would last
# over MAX_AUDIOBOOK_S even so, or does, is refused (OUTPUT_DURATION_INSANE), and so is one
# four times shorter than its text could be read.
FASTEST_CHARS_PER_S = 25.0
MAX_AUDIOBOOK_S = 24 * 3600


def _duration_insane(seconds: float, why: str) -> ApiError:
    return ApiError(
        ErrorCode.OUTPUT_DURATION_INSANE,
        f"{why}; nothing was delivered and the payment was refunded.",
        extra={"output_duration_seconds": round(seconds, 1)},
    )


async def _translate(ctx: ServiceContext, text: str, source: str, target: str) -> str:
    request = TranslationRequest(text=text, target_language=target, source_language=source)
    result = await ctx.engines.run(
        "translation",
        TranslationEngine,
        lambda engine, name: engine.translate(replace(request, model_name=name)),
    )
    return result.text


async def _translate_chapters(
    ctx: ServiceContext, chapters: tuple[tuple[str, str], ...], source: str, target: str
) -> tuple[tuple[str, str], ...]:
    if not ctx.engines.available("translation"):
        raise EngineError(
            ErrorCode.INVALID_INPUT,
            "translateToLanguage needs a translation engine; none runs here.",
        )
    out = []
    for number, (title, text) in enumerate(chapters, start=1):
        ctx.progress(5.0 + 10.0 * number / len(chapters), "translating")
        translated_title = await _translate(ctx, title, source, target)
        out.append((translated_title, await _translate(ctx, text, source, target)))
    return tuple(out)


async def epub_audiobook(ctx: ServiceContext, params: EpubAudiobookParams) -> ServiceResult:
    prepared, told = await _prepared_book(ctx, params)
    selection = prepared.selection
    chapters, language = told.chapters, params.language
    if params.translateToLanguage is not None and params.translateToLanguage != language:
        chapters = await _translate_chapters(ctx, chapters, language, params.translateToLanguage)
        language = params.translateToLanguage
    spoken_chars = sum(len(title) + len(text) for title, text in chapters)
    fastest_s = spoken_chars / (FASTEST_CHARS_PER_S * params.speed)
    if fastest_s > MAX_AUDIOBOOK_S:
        raise _duration_insane(
            fastest_s,
            f"At this speed the narration would last over {fastest_s / 3600:.0f} "
            "hours (the limit is 24)",
        )
    request = NarrationRequest(
        chapters=tuple(Chapter(title, text) for title, text in chapters),
        model_id=params.chosen_model,
        language=language,
        speed=params.speed,
        voice=params.voice,
        title=prepared.title,
    )
    ctx.progress(15.0, "narrating")
    result = await ctx.engines.run(
        "audiobook",
        AudiobookEngine,
        lambda engine, name: engine.narrate(
            replace(request, model_name=name),
            lambda done, message: ctx.progress(15.0 + 0.8 * done, message),
        ),
        model_id=params.chosen_model,
    )
    seconds = _checked_duration_s(result.m4b, spoken_chars, params.speed)
    ctx.progress(97.0, "storing")
    stored = await ctx.files.save(result.m4b, "m4b")
    annexe_url = None
    if told.annexe:
        annexe = await ctx.run_cpu(books.annexe_pdf, prepared.title, told.annexe)
        annexe_url = (await ctx.files.save(annexe.data, "pdf")).url
    narrated_chars = prepared.priced_chars
    charged = audiobook_msat(ctx.rate_book, params.chosen_model, narrated_chars)
    if params.translateToLanguage is not None:
        charged += translation_msat(narrated_chars, params.translateToLanguage)
    quoted = _audiobook_msat(params, ctx.rate_book)
    return ServiceResult(
        {
            "url": stored.url,
            "annexeUrl": annexe_url,
            "duration_s": round(seconds, 3),
            "chapters": [
                {"title": m.title, "start_s": m.start_s, "end_s": m.end_s} for m in result.chapters
            ],
            "narratedChapters": list(selection.chosen),
            "skippedChapters": [{"index": i, "reason": why} for i, why in selection.skipped],
            "annexeEntries": len(told.annexe),
            "language": language,
            "modelId": params.chosen_model,
        },
        charged_msat=charged if charged < quoted else None,
    )


async def _prepared_book(
    ctx: ServiceContext, params: EpubAudiobookParams
) -> tuple[books.Prepared, books.Narration]:
    """The book read, its chapters chosen, and what is to be narrated; refused
    (BOOK_QUALITY_CHECK_FAILED, refunded) when a chapter to narrate fails its sanity
    checks."""
    data = await asyncio.to_thread(decode_file, params.epubBase64, "epubBase64", BOOK_MAX_BYTES)
    ctx.progress(1.0, "reading the book")
    try:
        prepared = await ctx.run_cpu(
            books.prepare, data, params.fileName, params.selectedChapterIndices, params.language
        )
    except MediaError as exc:  # it was measured before payment; it must read now too
        raise EngineError(ErrorCode.INVALID_INPUT, f"The book cannot be read: {exc}") from None
    if prepared.failures or prepared.narration is None:
        raise ApiError(
            ErrorCode.BOOK_QUALITY_CHECK_FAILED,
            f"{len(prepared.failures)} sanity check(s) failed on the chapters to narrate (see "
            "smoke_failures); nothing was narrated and the payment was refunded.",
            extra={"smoke_failures": prepared.failures},
        )
    return prepared, prepared.narration


def _checked_duration_s(m4b: bytes, spoken_chars: int, speed: float) -> float:
    """The audiobook's length, measured here whatever the engine says; refused
    (OUTPUT_DURATION_INSANE, refunded) when over the limit or far too short for its text."""
    try:
        seconds = audio_duration_s(m4b)
    except MediaError:
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The engine returned no readable audiobook."
        ) from None
    if seconds > MAX_AUDIOBOOK_S:
        raise _duration_insane(seconds, f"The audiobook lasts {seconds / 3600:.1f} hours")
    if seconds < spoken_chars / (FASTEST_CHARS_PER_S * 4 * speed):
        raise _duration_insane(
            seconds, f"The audiobook lasts {seconds:.0f} s, far too short for its text"
        )
    return seconds


EPUB_AUDIOBOOK = ServiceSpec(
    slug="epub-audiobook",
    tool_name="epub_to_audiobook",
    category="speech",
    title="Book to audiobook",
    description="EPUB, PDF or TXT to an M4B audiobook with chapter markers (async, 5 to 60+ "
    "minutes): { url, annexeUrl }. Per narrated character by tier (BTC-pegged): "
    f"about {speech_rates_text(AUDIOBOOK_CHARS_PER_SAT)}; minimum {AUDIOBOOK_MIN_SATS}; "
    "translation added when asked.",
    params=EpubAudiobookParams,
    price_msat=_audiobook_msat,
    handler=epub_audiobook,
    price_shape=PriceShape(
        "per_character",
        "per character",
        AUDIOBOOK_MIN_SATS * MSAT,
        rate_by=("tier", "translation"),
        btc_pegged=True,
        estimate="audiobook",
        note=f"Narrated characters at about {speech_rates_text(AUDIOBOOK_CHARS_PER_SAT)} "
        f"(BTC-pegged), minimum {AUDIOBOOK_MIN_SATS}; translateToLanguage adds the "
        "translation price.",
    ),
    mode="job",
    job_type="epub-audiobook",
    model_ids=TTS_MODELS,
    failure_codes=(
        ErrorCode.INVALID_INPUT,
        ErrorCode.BOOK_QUALITY_CHECK_FAILED,
        ErrorCode.OUTPUT_DURATION_INSANE,
    ),
    max_body_bytes=body_limit(BOOK_MAX_BYTES),
    example={"epubBase64": "<base64 EPUB>", "fileName": "book.epub"},
    engine="audiobook",
    # A narration language or voice the engine cannot speak is refused before any invoice.
    engine_request=lambda p: NarrationRequest(
        chapters=(),
        model_id=p.chosen_model,
        language=p.translateToLanguage or p.language,
        speed=p.speed,
        voice=p.voice,
    ),
)


SERVICES: tuple[ServiceSpec[Any], ...] = (EPUB_AUDIOBOOK,)
