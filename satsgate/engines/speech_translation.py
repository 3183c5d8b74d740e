"""Speech translation: the capability the ``speech_translation`` engine name serves
(transcribe-translate): what was said, and its translation into the target language.

:class:`TranscribeThenTranslate` builds it from a TranscriptionEngine and a
TranslationEngine (what the ``openai`` provider kind does with its speech-to-text model
and its chat model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from satsgate.engines.transcription import TranscriptionEngine, TranscriptionRequest
from satsgate.engines.translation import TranslationEngine, TranslationRequest


@dataclass(frozen=True)
class SpeechTranslationRequest:
    audio: bytes  # the caller's file, checked before payment
    format: str  # its sniffed container: mp3, wav, flac, ogg, m4a
    target_language: str  # one of the 119 (domain.languages code form)
    source_language: str | None = None  # one of the 13 transcription codes; None: detect
    model_name: str | None = None  # the provider's name for the spec model (10)


@dataclass(frozen=True)
class SpeechTranslationResult:
    transcript: str
    translation: str  # equals transcript when nothing needed translating
    source_language: str | None  # as given or detected
    translated: bool  # whether a translation step ran


class SpeechTranslationEngine(Protocol):
    async def transcribe_translate(
        self, request: SpeechTranslationRequest
    ) -> SpeechTranslationResult:
        """EngineError (satsgate.engines) on failure."""
        ...


@dataclass(frozen=True)
class TranscribeThenTranslate:
    transcriber: TranscriptionEngine
    translator: TranslationEngine

    async def transcribe_translate(
        self, request: SpeechTranslationRequest
    ) -> SpeechTranslationResult:
        heard = await self.transcriber.transcribe(
            TranscriptionRequest(
                audio=request.audio,
                format=request.format,
                language=request.source_language,
                model_name=request.model_name,
            )
        )
        source = request.source_language or heard.language
        if source == request.target_language or not heard.text.strip():
            return SpeechTranslationResult(heard.text, heard.text, source, False)
        result = await self.translator.translate(
            TranslationRequest(heard.text, request.target_language, source)
        )
        return SpeechTranslationResult(
            heard.text, result.text, source or result.source_language, True
        )
