"""Voices: text-to-speech voice sets per tier, global-tier voice descriptions, AI-call voices
and locales.

A TTS voice is ``Language_VoiceName`` and belongs to one tier family; a voice
of another family is refused before payment. The global tier has no preset
voices: it takes a description whose words come only from the groups below,
at most one per group.
"""

from __future__ import annotations

import re
from typing import Final, Literal

TtsFamily = Literal["premium", "studio", "global"]

# TTS model id -> tier family (premium mini shares the premium voices).
TTS_FAMILY: Final[dict[int, TtsFamily]] = {33: "premium", 34: "premium", 3: "studio", 43: "global"}


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


TTS_VOICES: Final[dict[TtsFamily, frozenset[str]]] = {
    "premium": frozenset(
        _words("""English_Aria English_Brian English_Clara English_Daniel English_Emma English_James
        English_Olivia English_Noah Spanish_Lucia Spanish_Mateo French_Camille French_Louis
        German_Hanna German_Felix Italian_Giulia Italian_Marco Portuguese_Ana Portuguese_Tiago
        Japanese_Yuki Japanese_Haruto Chinese_Mei Chinese_Wei Korean_Jiwoo Hindi_Aarav
        Arabic_Layla Russian_Dmitri Dutch_Sanne Polish_Zofia Turkish_Elif""")
    ),
    "studio": frozenset(
        _words("""English_Narrator English_Storyteller English_Anchor English_Documentary
        English_Audiobook_Female English_Audiobook_Male Spanish_Narrador French_Narrateur
        German_Erzaehler""")
    ),
    "global": frozenset(),
}

# Voices cloned with clone-voice are studio voices with this id shape.
CLONED_VOICE = re.compile(r"^Custom_[A-Za-z0-9]{8,64}$")
VOICE_SHAPE = re.compile(r"^[A-Z][A-Za-z]+(_[A-Za-z0-9]+)+$")


def check_tts_voice(voice: str, model_id: int) -> None:
    """Raise ValueError unless ``voice`` belongs to the tier of ``model_id``."""
    family = TTS_FAMILY[model_id]
    if family == "global":
        raise ValueError(
            "the global tier has no preset voices: describe the voice with voice_description"
        )
    if voice in TTS_VOICES[family] or (family == "studio" and CLONED_VOICE.match(voice)):
        return
    owner = next((f for f, voices in TTS_VOICES.items() if voice in voices), None)
    if owner is not None:
        raise ValueError(f"voice {voice!r} belongs to the {owner} tier, not {family}")
    if not VOICE_SHAPE.match(voice) and not CLONED_VOICE.match(voice):
        raise ValueError(f"voice {voice!r} is not of the form Language_VoiceName")
    raise ValueError(f"voice {voice!r} is not in the {family} tier's voice set")


# Global-tier voice description: each word from one group, at most one per group.
DESCRIPTION_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "gender": ("male", "female"),
    "age": ("child", "teenager", "young adult", "middle-aged", "elderly"),
    "pitch": ("very low pitch", "low pitch", "moderate pitch", "high pitch", "very high pitch"),
    "style": ("whisper",),
    "accent": (
        "american", "british", "australian", "canadian", "indian", "chinese", "korean",
        "japanese", "portuguese", "russian",
    ),
}  # fmt: skip
_WORD_GROUP: Final[dict[str, str]] = {
    word: group for group, words in DESCRIPTION_GROUPS.items() for word in words
}
MAX_DESCRIPTION_CHARS = 200


def check_voice_description(value: str) -> str:
    """Normalized description (lower case, ", " joined), or ValueError naming the bad word."""
    if len(value) > MAX_DESCRIPTION_CHARS:
        raise ValueError(f"voice description is longer than {MAX_DESCRIPTION_CHARS} characters")
    words = [" ".join(w.split()).lower() for w in value.split(",")]
    words = [w.removesuffix(" accent") if w.endswith(" accent") else w for w in words]
    if not any(words):
        raise ValueError("voice description is empty")
    seen: dict[str, str] = {}
    for word in words:
        group = _WORD_GROUP.get(word)
        if group is None:
            allowed = "; ".join(", ".join(ws) for ws in DESCRIPTION_GROUPS.values())
            raise ValueError(f"voice description word {word!r} is not allowed; use: {allowed}")
        if group in seen:
            raise ValueError(f"voice description has two {group} words: {seen[group]!r}, {word!r}")
        seen[group] = word
    return ", ".join(words)


# -- AI calls ------------------------------------------------------------------------------

AI_CALL_VOICES: Final[tuple[str, ...]] = (
    "Adrian", "Myra", "Paola", "Chris", "Marissa", "Nathan", "Cimo", "Drew", "Olivia",
)  # fmt: skip

AI_CALL_LOCALES: Final[tuple[str, ...]] = _words(
    """en-US en-GB en-IN en-AU en-NZ es-ES es-419 pt-BR pt-PT fr-FR fr-CA de-DE it-IT nl-NL
    nl-BE ru-RU uk-UA pl-PL cs-CZ sk-SK sl-SI hr-HR bs-BA sr-RS mk-MK bg-BG ro-RO hu-HU el-GR
    tr-TR da-DK fi-FI no-NO sv-SE is-IS lt-LT lv-LV ca-ES gl-ES zh-CN yue-CN ja-JP ko-KR vi-VN
    th-TH id-ID ms-MY fil-PH hi-IN ta-IN kn-IN mr-IN ur-IN ne-NP ar-SA he-IL fa-IR az-AZ hy-AM
    kk-KZ af-ZA sw-KE cy-GB multi"""
)
assert len(AI_CALL_LOCALES) == 64
_LOCALE_BY_LOWER: Final[dict[str, str]] = {loc.lower(): loc for loc in AI_CALL_LOCALES}


def check_ai_call_locale(value: str) -> str:
    """The canonical spelling of one of the listed locales (case-insensitive, ``_`` or ``-``)."""
    found = _LOCALE_BY_LOWER.get(value.strip().replace("_", "-").lower())
    if found is None:
        raise ValueError(
            f"language {value!r} is not one of the AI-call locales: " + ", ".join(AI_CALL_LOCALES)
        )
    return found


def check_ai_call_voice(value: str) -> str:
    for voice in AI_CALL_VOICES:
        if voice.lower() == value.strip().lower():
            return voice
    raise ValueError(f"voice {value!r} is not one of " + ", ".join(AI_CALL_VOICES))
