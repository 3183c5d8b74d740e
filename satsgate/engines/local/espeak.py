"""Text-to-speech on this machine with eSpeak NG (GPL-3.0-or-later, Debian package
``espeak-ng``): the global tier (model 43) of text-to-speech, and the local voice of
epub-audiobook.

- ``language``: an ISO 639 code or a locale tag; resolved against the voices this
  espeak-ng has (``espeak-ng --voices``: about 130 languages and accents); plain ``en``
  speaks American English.
- ``voice_description``: mapped onto espeak-ng's voice variants and pitch: ``male`` /
  ``female`` and the age words pick a variant (``elderly``: grandpa / grandma), the pitch
  words set the pitch, ``whisper`` the whisper variants; the accents it has for English
  are ``american`` and ``british``. A description it cannot render (another accent, an
  accent on a non-English language) is refused, never silently ignored.
- ``speed``: words per minute, 175 at 1.0.
- WAV (22.05 kHz mono PCM, as espeak-ng writes it) or MP3 (ffmpeg with LAME, 64 kbit/s).

espeak-ng and ffmpeg run as asyncio subprocesses (text on stdin, files in a private
temporary directory), within the CPU time limit, a few at a time. With ``[workers] mode
= "queue"`` a call's synthesis is one CPU job instead (:func:`speak_audio`, the same
commands run by a ``satsgate worker``), so speech runs on the workers' machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from satsgate.domain.languages import UnknownLanguage, resolve_translation_language
from satsgate.domain.voices import DESCRIPTION_GROUPS
from satsgate.engines.cpu_jobs import CpuRunner
from satsgate.engines.errors import EngineError
from satsgate.engines.local.tools import _NICE, ToolRunner, wav_duration_s
from satsgate.engines.registry import EngineDeps
from satsgate.engines.synthesis import SynthesisRequest, SynthesisResult
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

ESPEAK = "espeak-ng"
GLOBAL_TIER = 43
LABEL = "eSpeak NG speech synthesis"
BASE_WPM = 175  # espeak-ng's default rate: speed 1.0
MIN_WPM, MAX_WPM = 80, 450
MP3_BITRATE = "64k"
# A plain language code whose espeak-ng default is not the one callers expect.
_PREFERRED = {"en": "en-us"}
# Accents (voice_description) espeak-ng has voices for: English only.
ACCENT_VOICES = {"american": "en-us", "british": "en-gb-x-rp"}
_PITCH = {
    "very low pitch": 15, "low pitch": 32, "moderate pitch": 50, "high pitch": 68,
    "very high pitch": 85,
}  # fmt: skip
_AGE_PITCH = {"child": 80, "teenager": 62, "elderly": 42}
# (gender, age) -> espeak-ng variant; gender None: the male variants (espeak's default
# voice is male), but a child sounds like one.
_VARIANTS: dict[tuple[str, str | None], str] = {
    ("male", None): "m3", ("male", "child"): "m3", ("male", "teenager"): "m2",
    ("male", "young adult"): "m3", ("male", "middle-aged"): "m1", ("male", "elderly"): "grandpa",
    ("female", None): "f2", ("female", "child"): "f4", ("female", "teenager"): "f4",
    ("female", "young adult"): "f2", ("female", "middle-aged"): "f1",
    ("female", "elderly"): "grandma",
}  # fmt: skip
_SPEAKABLE = re.compile(r"\w")


class Unsupported(ValueError):
    """The request asks for something this voice cannot do (a language, an accent)."""


def probe() -> str:
    missing = [tool for tool in (ESPEAK, "ffmpeg") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed" if missing else ""


def espeak_languages() -> dict[str, str]:
    """Language code or tag (lower case) -> the espeak-ng voice that speaks it, from
    ``espeak-ng --voices`` (run once when the engine is built)."""
    try:
        out = subprocess.run(
            [ESPEAK, "--voices"], capture_output=True, check=True, timeout=20
        ).stdout.decode("utf-8", errors="replace")
    except (OSError, subprocess.SubprocessError) as exc:  # a broken install: speaks nothing
        log.error("espeak-ng --voices failed (%s); the local voice refuses every language", exc)
        return {}
    return parse_voice_list(out)


def parse_voice_list(listing: str) -> dict[str, str]:
    voices: dict[str, str] = {}
    others: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 5 or not fields[0].isdigit():
            continue
        language = fields[1]
        voices[language.lower()] = language
        for alias, priority in re.findall(r"\(([A-Za-z0-9-]+) (\d+)\)", line):
            best = others.get(alias.lower())
            if best is None or int(priority) < best[0]:
                others[alias.lower()] = (int(priority), language)
    for alias, (_priority, language) in others.items():
        voices.setdefault(alias, language)
    for code, preferred in _PREFERRED.items():
        if preferred in voices:
            voices[code] = voices[preferred]
    return voices


@dataclass(frozen=True)
class VoicePlan:
    voice: str  # espeak-ng -v: "en-us+f2"
    pitch: int  # -p, 0 to 99
    wpm: int  # -s, words per minute


def description_words(description: str | None) -> dict[str, str]:
    """group -> word of a normalized voice description ("female, elderly, low pitch")."""
    if not description:
        return {}
    by_word = {w: group for group, words in DESCRIPTION_GROUPS.items() for w in words}
    found: dict[str, str] = {}
    for word in (w.strip() for w in description.split(",")):
        if word in by_word:
            found[by_word[word]] = word
    return found


def plan_voice(
    voices: dict[str, str], language: str | None, description: str | None, speed: float
) -> VoicePlan:
    """The espeak-ng voice, pitch and rate for a request; Unsupported when it cannot."""
    words = description_words(description)
    base = resolve_voice(voices, language or "en")
    accent = words.get("accent")
    if accent is not None:
        if not base.lower().startswith("en"):
            raise Unsupported(
                f"an accent ({accent}) can be given for English only on this node's voice"
            )
        if accent not in ACCENT_VOICES:
            raise Unsupported(
                f"this node's voice has no {accent} accent; it has " + " and ".join(ACCENT_VOICES)
            )
        base = ACCENT_VOICES[accent]
    gender, age = words.get("gender"), words.get("age")
    if "style" in words:  # whisper
        variant: str | None = "whisperf" if gender == "female" else "whisper"
    elif gender is None and age is None:
        variant = None  # the language's own default voice
    elif gender is None and age == "child":
        variant = _VARIANTS[("female", "child")]
    else:
        variant = _VARIANTS[(gender or "male", age)]
    pitch = _PITCH.get(words.get("pitch", ""), _AGE_PITCH.get(age or "", 50))
    wpm = min(MAX_WPM, max(MIN_WPM, round(BASE_WPM * speed)))
    return VoicePlan(f"{base}+{variant}" if variant else base, pitch, wpm)


def resolve_voice(voices: dict[str, str], language: str) -> str:
    """The espeak-ng voice for an ISO 639 code, locale tag or language name."""
    key = language.strip().replace("_", "-").lower()
    candidates = [key, key.split("-", 1)[0]]
    with contextlib.suppress(UnknownLanguage):
        candidates.append(resolve_translation_language(language))
    for candidate in candidates:
        if candidate in voices:
            return voices[candidate]
    raise Unsupported(f"this node's voice does not speak {language!r}")


def _espeak_args(plan: VoicePlan, wav: Path) -> list[str]:
    return [
        ESPEAK, "-v", plan.voice, "-s", str(plan.wpm), "-p", str(plan.pitch),
        "-b", "1", "-w", str(wav),
    ]  # fmt: skip


def _encode_args(wav: Path, out: Path, fmt: Literal["mp3", "aac"]) -> list[str]:
    codec = (
        ["-codec:a", "libmp3lame", "-b:a", MP3_BITRATE]
        if fmt == "mp3"
        else ["-codec:a", "aac", "-b:a", "48k"]
    )
    return ["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(wav), *codec, str(out)]


def _tool(args: list[str], stdin: bytes | None, what: str) -> None:
    """One tool run to its end (the CPU job's time limit interrupts it: then it is killed)."""
    done = subprocess.run(
        [*_NICE, *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        log.warning("%s exited %s: %s", args[0], done.returncode, done.stderr[-800:])
        raise EngineError(ErrorCode.SERVICE_ERROR, f"{what.capitalize()} failed on this input.")


def speak_audio(text: str, plan: VoicePlan, fmt: Literal["wav", "mp3"]) -> SynthesisResult:
    """In a CPU job (a pool or a worker process): the speech of ``text`` as
    :meth:`EspeakEngine.synthesize` makes it, by the same commands."""
    with tempfile.TemporaryDirectory(prefix="satsgate-tts-") as tmp:
        wav = Path(tmp) / "speech.wav"
        _tool(_espeak_args(plan, wav), text.encode("utf-8"), "speech synthesis")
        duration = wav_duration_s(wav.read_bytes())
        if fmt == "wav":
            return SynthesisResult(wav.read_bytes(), "wav", round(duration, 3))
        mp3 = Path(tmp) / "speech.mp3"
        _tool(_encode_args(wav, mp3, "mp3"), None, "audio encoding")
        return SynthesisResult(mp3.read_bytes(), "mp3", round(duration, 3))


class EspeakEngine:
    """SynthesisEngine for the global tier (43): espeak-ng, WAV or MP3. ``offload``: a
    CpuRunner that runs each synthesis as one job (the worker queue) instead of the
    tools here."""

    def __init__(
        self, tools: ToolRunner, voices: dict[str, str], offload: CpuRunner | None = None
    ) -> None:
        self.tools = tools
        self.offload = offload
        self.voices = voices
        # Language codes and tags it speaks (lower case), for discovery.
        self.languages = frozenset(voices)

    def unsupported(self, request: object) -> str | None:
        """Why this engine cannot serve ``request`` (cheap, no I/O); None if it can."""
        if not isinstance(request, SynthesisRequest):
            return None
        if request.model_id != GLOBAL_TIER:
            return f"model {request.model_id} is not served by this node's voice"
        try:
            plan_voice(self.voices, request.language, request.voice_description, 1.0)
        except Unsupported as exc:
            return str(exc)
        return None

    def plan(self, request: SynthesisRequest) -> VoicePlan:
        reason = self.unsupported(request)
        if reason is not None:
            raise EngineError(ErrorCode.INVALID_INPUT, reason[0].upper() + reason[1:] + ".")
        return plan_voice(self.voices, request.language, request.voice_description, request.speed)

    async def speak_to_file(self, text: str, plan: VoicePlan, path: Path) -> float:
        """Speak ``text`` into a WAV file at ``path``; its duration in seconds."""
        await self.tools.run(
            _espeak_args(plan, path), stdin=text.encode("utf-8"), what="speech synthesis"
        )
        return wav_duration_s(await asyncio.to_thread(path.read_bytes))

    async def encode(self, wav: Path, out: Path, fmt: Literal["mp3", "aac"]) -> None:
        await self.tools.run(_encode_args(wav, out, fmt), what="audio encoding")

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        plan = self.plan(request)
        if not _SPEAKABLE.search(request.text):
            raise EngineError(ErrorCode.INVALID_INPUT, "The text has nothing to speak.")
        if self.offload is not None:
            result: SynthesisResult = await self.offload(
                speak_audio, request.text, plan, request.format
            )
            return result
        with tempfile.TemporaryDirectory(prefix="satsgate-tts-") as tmp:
            wav = Path(tmp) / "speech.wav"
            duration = await self.speak_to_file(request.text, plan, wav)
            if request.format == "wav":
                audio = await asyncio.to_thread(wav.read_bytes)
                return SynthesisResult(audio, "wav", round(duration, 3))
            mp3 = Path(tmp) / "speech.mp3"
            await self.encode(wav, mp3, "mp3")
            audio = await asyncio.to_thread(mp3.read_bytes)
            return SynthesisResult(audio, "mp3", round(duration, 3))


def build(deps: EngineDeps) -> EspeakEngine:
    offload = deps.run_cpu if deps.settings.workers_mode == "queue" else None
    return EspeakEngine(ToolRunner(deps.settings.cpu_job_time_limit_s), espeak_languages(), offload)
