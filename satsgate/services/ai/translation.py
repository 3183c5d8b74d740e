"""Translation services: translate-text (the 119 languages), translate-rare-language
(Apertium's rare pairs) and translate-epub (a whole book, as a job)."""

from __future__ import annotations

import asyncio
import posixpath
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import Field

from satsgate.domain.languages import (
    RARE_LANGUAGES,
    RareLanguage,
    TranslationSource,
    language_name,
    translation_engine,
)
from satsgate.domain.media import MediaError, measure_book
from satsgate.engines import EngineError
from satsgate.engines.translation import (
    TranslationEngine,
    TranslationRequest,
    TranslationResult,
)
from satsgate.errors import ErrorCode
from satsgate.services.ai import epub_translation
from satsgate.services.base import (
    PriceShape,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.pricing import (
    MSAT,
    RARE_TRANSLATE_BASE_SATS,
    RARE_TRANSLATE_MSAT_PER_CHAR,
    TRANSLATE_EPUB_MIN_SATS,
    TRANSLATE_MIN_SATS,
    TRANSLATE_MSAT_PER_CHAR,
    TRANSLATE_ROUTED_MSAT_PER_CHAR,
    rare_translation_msat,
    translate_epub_msat,
    translation_msat,
)
from satsgate.services.inputs.params import (
    CallbackFields,
    MiB,
    ModelChoice,
    ServiceParams,
    TranslationTarget,
    alias,
    b64_chars,
    body_limit,
    decode_file,
)

# -- translate-text ------------------------------------------------------------------------

TRANSLATE_MAX_CHARS = 200_000


class TranslationLanguages(TranslationTarget):
    """The target and source languages of a translation: one of the 119, by code, name
    or locale tag; the source may be omitted (or 'auto') to be detected."""

    sourceLanguage: TranslationSource | None = Field(
        None,
        validation_alias=alias("sourceLanguage", "source_language"),
        description="Omit (or 'auto') to detect.",
    )


class TranslateTextParams(ServiceParams, ModelChoice, TranslationLanguages):
    """Without modelId the target picks the engine; a pinned text model (31, 1, 6) prices
    at its own text rate (minimum 1)."""

    MODELS: ClassVar[tuple[int, ...]] = (6, 1, 31)
    DEFAULT: ClassVar[int] = 0  # 0: the target language's engine

    text: str = Field(min_length=1, max_length=TRANSLATE_MAX_CHARS)

    @property
    def pinned_model(self) -> int | None:
        return self.chosen_model or None

    def to_request(self) -> TranslationRequest:
        return TranslationRequest(
            self.text, self.targetLanguage, self.sourceLanguage, model_id=self.pinned_model
        )


async def _translate(
    ctx: ServiceContext, request: TranslationRequest, model_id: int | None = None
) -> TranslationResult:
    """``request`` through the node's translation engine (local or provider alike)."""

    async def call(engine: TranslationEngine, model_name: str | None) -> TranslationResult:
        return await engine.translate(replace(request, model_name=model_name))

    return await ctx.engines.run(
        "translation", TranslationEngine, call, model_id=model_id, request=request
    )


async def translate_text(ctx: ServiceContext, params: TranslateTextParams) -> ServiceResult:
    # A pinned text model runs there; else the engine's own choice, except that a routed
    # target (where the standard engine is weak) asks for the better text tier wherever
    # this node serves it.
    model_id = params.pinned_model
    if model_id is None and translation_engine(params.targetLanguage) == "routed":
        model_id = 1 if ctx.engines.serves_model("translation", 1) else None
    request = replace(params.to_request(), model_id=model_id)
    result = await _translate(ctx, request, model_id)
    return ServiceResult(
        {
            "translatedText": result.text,
            "sourceLanguage": result.source_language or params.sourceLanguage,
            "targetLanguage": params.targetLanguage,
            **pivot_note(result),
        }
    )


def pivot_note(result: TranslationResult) -> dict[str, str]:
    """An answer's word on a translation made in two steps: the pivot language, and that a
    text translated twice reads less exactly than one translated directly."""
    if result.pivot_language is None:
        return {}
    name = language_name(result.pivot_language)
    return {
        "pivotLanguage": result.pivot_language,
        "note": f"This node has no direct translation for this pair: the text was "
        f"translated through {name}, which can lose nuance.",
    }


def _per_1000(msat_per_char: int) -> str:
    """A per-character rate in msat as sats per 1000 characters ("1 sat", "10 sats")."""
    return "1 sat" if msat_per_char == 1 else f"{msat_per_char} sats"


TRANSLATE_TEXT = ServiceSpec(
    slug="translate-text",
    tool_name="translate_text",
    category="text",
    title="Translate text",
    description="Translate into one of 119 languages: { translatedText, sourceLanguage, "
    "targetLanguage, and pivotLanguage with a note when this node translated through a "
    "third language }. A provider's text model takes any pair; on a node with the local "
    "engine only, GET /api/languages lists the pairs it has (thisNode.translation). "
    f"{_per_1000(TRANSLATE_MSAT_PER_CHAR)} per 1000 characters on the standard engine "
    f"(minimum {TRANSLATE_MIN_SATS}); routed targets cost "
    f"{_per_1000(TRANSLATE_ROUTED_MSAT_PER_CHAR)} per 1000.",
    params=TranslateTextParams,
    price_msat=lambda p, _book: translation_msat(
        len(p.text), p.targetLanguage, p.chosen_model or None
    ),
    handler=translate_text,
    price_shape=PriceShape(
        "per_character",
        "per character",
        TRANSLATE_MIN_SATS * MSAT,
        rate_by=("target_language", "tier"),
        estimate="translate",
        note=f"{_per_1000(TRANSLATE_MSAT_PER_CHAR)} per 1000 characters on the standard "
        f"engine, {_per_1000(TRANSLATE_ROUTED_MSAT_PER_CHAR)} on routed targets (GET "
        "/api/languages); a pinned modelId prices at that text model's rate.",
    ),
    untrusted_output=True,
    model_ids=(31, 1, 6),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=4 * TRANSLATE_MAX_CHARS + 64 * 1024,
    example={"text": "Good morning", "targetLanguage": "es"},
    engine="translation",
    engine_request=TranslateTextParams.to_request,
)

# -- translate-rare-language ---------------------------------------------------------------

RARE_MAX_CHARS = 20_000


class TranslateRareParams(ServiceParams):
    text: str = Field(min_length=1, max_length=RARE_MAX_CHARS)
    targetLanguage: RareLanguage = Field(
        validation_alias=alias("targetLanguage", "target_language"),
        description="ISO 639-3 code or English name (GET /api/languages).",
    )

    def to_request(self) -> TranslationRequest:
        # No source language in the spec's parameters: the engine identifies it (a local
        # engine that serves some pairs only refuses, before any invoice, a text in a
        # language it cannot translate into the target).
        return TranslationRequest(self.text, self.targetLanguage)


async def translate_rare(ctx: ServiceContext, p: TranslateRareParams) -> ServiceResult:
    request = p.to_request()
    result = await ctx.engines.run(
        "rare_translation",
        TranslationEngine,
        lambda engine, name: engine.translate(replace(request, model_name=name)),
        request=request,
    )
    tier = (
        RARE_LANGUAGES[p.targetLanguage][1]
        if p.targetLanguage in RARE_LANGUAGES
        else ("unverified")
    )
    return ServiceResult(
        {
            "translatedText": result.text,
            "targetLanguage": p.targetLanguage,
            "targetLanguageName": language_name(p.targetLanguage),
            **pivot_note(result),
            # No chrF is measured here for any language (domain.languages): null.
            "quality": {"tier": tier, "chrf": None},
        }
    )


def _rare_rate() -> str:
    """The rare-language rate per character in sats ("0.002 sat")."""
    return f"{RARE_TRANSLATE_MSAT_PER_CHAR / MSAT:g} sat"


TRANSLATE_RARE = ServiceSpec(
    slug="translate-rare-language",
    tool_name="translate_rare_language",
    category="text",
    title="Translate into a rare language",
    description="Translate into a low-resource language: { translatedText, targetLanguage, "
    f"targetLanguageName, quality: {{ tier, chrf }} }}. "
    f"{RARE_TRANSLATE_BASE_SATS} sats plus {_rare_rate()} per character.",
    params=TranslateRareParams,
    price_msat=lambda p, _book: rare_translation_msat(len(p.text)),
    handler=translate_rare,
    price_shape=PriceShape(
        "per_character",
        "per character",
        rare_translation_msat(1),
        base_sats=rare_translation_msat(0) // MSAT,
        note=f"{_rare_rate()} per character.",
    ),
    untrusted_output=True,
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=4 * RARE_MAX_CHARS + 64 * 1024,
    example={"text": "Welcome", "targetLanguage": "tpi"},
    engine="rare_translation",
    engine_request=TranslateRareParams.to_request,
)

# -- translate-epub ------------------------------------------------------------------------

EPUB_MAX_BYTES = 50 * MiB
EPUB_MAX_VISIBLE_CHARS = 3_000_000
# The download link of a translated book (the spec: a 6-hour token).
EPUB_URL_TTL_S = 6 * 3600
# Documents translated at once (each one engine call per chunk).
EPUB_PARALLEL_DOCUMENTS = 4


@dataclass(frozen=True)
class _CheckedEpub:
    visible_chars: int  # the price's measure
    sample: str  # plain text of its longest documents: its language, before any invoice


class TranslateEpubParams(ServiceParams, CallbackFields, TranslationLanguages):
    epubBase64: str = Field(
        validation_alias=alias("epubBase64", "file", "epub"),
        max_length=b64_chars(EPUB_MAX_BYTES),
        description="The EPUB as base64, at most 50 MB.",
    )
    fileName: str | None = Field(
        None, max_length=255, validation_alias=alias("fileName", "file_name")
    )

    def check(self) -> _CheckedEpub:
        """Visible characters of the book (the price's measure), and a text sample."""
        data = decode_file(self.epubBase64, "epubBase64", EPUB_MAX_BYTES)
        try:
            chars = measure_book(data, "book.epub").chars
            book = epub_translation.read_epub(data)
        except (MediaError, epub_translation.EpubError) as exc:
            raise ValueError(f"epubBase64: {exc}") from None
        if chars > EPUB_MAX_VISIBLE_CHARS:
            raise ValueError(
                f"the book has {chars} visible characters; at most {EPUB_MAX_VISIBLE_CHARS}"
            )
        if not book.documents:
            raise ValueError("epubBase64: the EPUB has no XHTML document with a body")
        return _CheckedEpub(chars, book.sample())

    @property
    def visible_chars(self) -> int:
        checked: _CheckedEpub = self.checked()
        return checked.visible_chars

    def to_request(self) -> TranslationRequest:
        """What the engine is asked, for the check before any invoice: the language pair,
        and the book's text once it has been read (to identify a missing source)."""
        checked = self._checked
        sample = checked.sample if isinstance(checked, _CheckedEpub) else ""
        return TranslationRequest(sample, self.targetLanguage, self.sourceLanguage)

    @property
    def output_name(self) -> str:
        stem = posixpath.splitext(posixpath.basename(self.fileName or "book.epub"))[0]
        return f"{stem or 'book'}.{self.targetLanguage}.epub"


async def _translate_document(
    ctx: ServiceContext, doc: epub_translation.Document, target: str, source: str | None
) -> tuple[str, str | None]:
    """A document's body in ``target`` (its chunks in order) and the source language the
    engine read it as."""
    parts = []
    local = ctx.engines.status("translation").source == "local"
    size = epub_translation.LOCAL_CHUNK_CHARS if local else epub_translation.CHUNK_CHARS
    for chunk in doc.chunks(size):
        request = TranslationRequest(chunk, target, source, format="html")
        result = await _translate(ctx, request)
        parts.append(result.text)
        source = source or result.source_language
    return "".join(parts), source


async def translate_epub(ctx: ServiceContext, params: TranslateEpubParams) -> ServiceResult:
    data = await asyncio.to_thread(decode_file, params.epubBase64, "epubBase64", EPUB_MAX_BYTES)
    target = params.targetLanguage
    try:
        book = await ctx.run_cpu(epub_translation.read_epub, data)
    except epub_translation.EpubError as exc:
        raise EngineError(ErrorCode.INVALID_INPUT, f"epubBase64: {exc}") from None
    if not book.documents:  # checked before the invoice; never translate nothing for pay
        raise EngineError(ErrorCode.INVALID_INPUT, "epubBase64: the EPUB has no XHTML document.")
    # The longest document first: without a sourceLanguage, the language it reads as is
    # the book's, for every other document (a title page alone would be a poor guess).
    docs = sorted(book.documents, key=lambda d: -len(d.body))
    total = sum(len(d.body) for d in docs) or 1
    done = 0
    bodies: dict[str, str] = {}
    ctx.progress(1, f"translating {len(docs)} documents")
    first, source = await _translate_document(ctx, docs[0], target, params.sourceLanguage)
    bodies[docs[0].name] = first
    done += len(docs[0].body)
    ctx.progress(100 * done / total * 0.95, f"translated 1 of {len(docs)} documents")
    slots = asyncio.Semaphore(EPUB_PARALLEL_DOCUMENTS)

    async def one(doc: epub_translation.Document) -> None:
        nonlocal done
        async with slots:
            bodies[doc.name], _ = await _translate_document(ctx, doc, target, source)
        done += len(doc.body)
        ctx.progress(
            100 * done / total * 0.95, f"translated {len(bodies)} of {len(docs)} documents"
        )

    await asyncio.gather(*(one(doc) for doc in docs[1:]))
    try:
        translated = await ctx.run_cpu(epub_translation.write_epub, data, book, bodies, target)
    except epub_translation.EpubError as exc:
        raise EngineError(
            ErrorCode.BOOK_QUALITY_CHECK_FAILED, f"The translated book failed its check: {exc}."
        ) from None
    stored = await ctx.files.save(translated, "epub")
    ctx.progress(100, "done")
    return ServiceResult(
        {
            "url": ctx.files.url_for(stored.name, EPUB_URL_TTL_S),
            "fileName": params.output_name,
            "docs": len(docs),
            "visibleChars": params.visible_chars,
            "sourceLanguage": source,
            "targetLanguage": target,
            "engine": translation_engine(target),
            "bytes": stored.size,
        }
    )


TRANSLATE_EPUB = ServiceSpec(
    slug="translate-epub",
    tool_name="translate_epub",
    category="text",
    title="Translate EPUB",
    description="Translate an EPUB (async, up to about 3 hours): { requestId }, then { url, "
    "fileName, docs, visibleChars, targetLanguage, engine }. Visible characters times the "
    "target engine's rate, minimum 50.",
    params=TranslateEpubParams,
    price_msat=lambda p, _book: translate_epub_msat(p.visible_chars, p.targetLanguage),
    handler=translate_epub,
    price_shape=PriceShape(
        "per_character",
        "per visible character",
        TRANSLATE_EPUB_MIN_SATS * MSAT,
        rate_by=("target_language",),
        estimate="translate-epub",
        note="Visible characters of the book at the target engine's rate.",
    ),
    mode="job",
    job_type="translate-epub",
    failure_codes=(
        ErrorCode.INVALID_INPUT,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.BOOK_QUALITY_CHECK_FAILED,
    ),
    max_body_bytes=body_limit(EPUB_MAX_BYTES),
    example={"epubBase64": "<base64 EPUB>", "targetLanguage": "French"},
    engine="translation",
    engine_request=TranslateEpubParams.to_request,
)


SERVICES: tuple[ServiceSpec[Any], ...] = (TRANSLATE_TEXT, TRANSLATE_RARE, TRANSLATE_EPUB)
