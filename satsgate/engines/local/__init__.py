"""Local engines: open-source tools and models that ship in Debian or PyPI packages and
run on the operator's machine with no keys. Each is the default for its engine name
wherever its probe finds it installed (satsgate.engines.registry.LocalEngine)."""

from __future__ import annotations

from satsgate.engines.local import (
    apertium,
    espeak,
    narration,
    ocr,
    pkpass,
    speech_translation,
    whisper,
)
from satsgate.engines.local.images import LOCAL_IMAGE_ENGINES
from satsgate.engines.registry import LocalEngine

LOCAL_ENGINES: tuple[LocalEngine, ...] = (
    pkpass.LOCAL,
    *LOCAL_IMAGE_ENGINES,
    apertium.APERTIUM,  # translation
    ocr.ENGINE,  # extract-document, extract-receipt
    # speech: the global TTS tier (43) and its audiobooks with eSpeak NG; English
    # transcription with Whisper tiny.en
    LocalEngine("tts", espeak.LABEL, espeak.probe, espeak.build, frozenset({43})),
    LocalEngine("audiobook", narration.LABEL, espeak.probe, narration.build, frozenset({43})),
    LocalEngine("transcription", whisper.LABEL, whisper.probe, whisper.build),
    # translate-rare-language: Apertium pairs into Occitan, Sardinian, Asturian
    apertium.APERTIUM_RARE,
    # transcribe-translate: English speech (Whisper) then Apertium from English
    speech_translation.LOCAL,
)
