"""transcribe-translate on this machine: English speech written out by the local Whisper
tiny.en engine (:mod:`.whisper`), then translated by the local Apertium engine
(:mod:`.apertium`) from English into the languages its installed pairs serve (Spanish,
Catalan, Galician, Esperanto, Serbian, Croatian, Bosnian with the pairs scripts/setup.sh
installs). The two run one after the other through
:class:`satsgate.engines.speech_translation.TranscribeThenTranslate`.

Whisper tiny.en hears English only: a request that names another source language, or a
target no installed pair reaches from English, is refused before any invoice
(:meth:`LocalSpeechTranslation.unsupported`). Speech with no source language given is
taken as English (tiny.en writes whatever it hears as English words).
"""

from __future__ import annotations

from dataclasses import dataclass

from satsgate.domain.languages import language_name
from satsgate.engines.local import apertium, whisper
from satsgate.engines.registry import EngineDeps, LocalEngine
from satsgate.engines.speech_translation import (
    SpeechTranslationRequest,
    SpeechTranslationResult,
    TranscribeThenTranslate,
)

LABEL = "Whisper tiny.en then Apertium (English speech)"
SOURCE = "en"


@dataclass(frozen=True)
class LocalSpeechTranslation(TranscribeThenTranslate):
    """TranscribeThenTranslate over the local engines, which serve English speech and
    the English -> X pairs installed here only."""

    transcriber: whisper.WhisperEngine
    translator: apertium.ApertiumTranslator

    @property
    def targets(self) -> tuple[str, ...]:
        # Installed pairs only: a pivoted pair would need its answer to say so, and the
        # speech answer has no place for that yet.
        pairs = self.translator.language_pairs()
        return tuple(
            sorted({t for s, t in pairs if s == SOURCE and self.translator.pivot(s, t) is None})
        )

    def language_pairs(self) -> tuple[tuple[str, str], ...]:
        """(source, target) served (discovery's thisNode.speechTranslation.pairs)."""
        return tuple((SOURCE, target) for target in self.targets)

    def unsupported(self, request: object) -> str | None:
        """Why ``request`` cannot be served here (cheap, no I/O; before any invoice)."""
        if not isinstance(request, SpeechTranslationRequest):
            return None
        if request.source_language not in (None, SOURCE):
            return (
                "this node transcribes English speech only, not "
                f"{language_name(request.source_language)}"
            )
        target = request.target_language
        if target == SOURCE or target in self.targets:
            return None  # (into English: the transcript is the answer)
        return (
            f"this node translates English speech into {', '.join(self.targets)} only, not "
            f"into {language_name(target)}"
        )

    async def transcribe_translate(
        self, request: SpeechTranslationRequest
    ) -> SpeechTranslationResult:
        # The recognizer is told the language it hears: English, always.
        return await super().transcribe_translate(
            SpeechTranslationRequest(
                request.audio,
                request.format,
                request.target_language,
                SOURCE,
                request.model_name,
            )
        )


def probe() -> str:
    missing = [reason for reason in (whisper.probe(), apertium.probe()) if reason]
    if not missing and not any(s == SOURCE for s, _ in apertium.installed_pairs()):
        missing.append("no Apertium language pair from English installed")
    return "; ".join(missing)


def build(deps: EngineDeps) -> LocalSpeechTranslation:
    return LocalSpeechTranslation(whisper.build(deps), apertium.build(deps))


# The spec's transcribe-translate model (10) is the only one it has.
LOCAL = LocalEngine("speech_translation", LABEL, probe, build, frozenset({10}))
