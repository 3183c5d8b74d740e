"""Apertium: rule-based machine translation from Debian's ``apertium`` and its pair
packages (``apertium-eng-spa``, ``apertium-es-pt`` ...), for the ``translation`` engine
name when no provider is configured for it. The engine is GPL-2.0-or-later and the pair
data GPL-2.0 or GPL-3.0; satsgate runs it as a separate program and links none of it.

The language pairs whose modes are installed are served (``apertium -l`` lists them: one
file per mode under ``$APERTIUM_DATADIR/modes``), and a pair none translates directly
through one pivot language two installed pairs share (en->fr as en->es, es->fr; the answer
names the pivot); :meth:`unsupported` refuses any other pair before any invoice
(satsgate.engines.registry.Binding.unsupported). A missing source language is identified
with :mod:`.language_id` among all the languages it knows, and served only when it is one
the target can be translated from here; a text too short to tell (a few words) is read as
the likeliest of those.

Each translation is one run of the ``apertium`` pipeline (a shell script chaining
lttoolbox and transfer tools, no Python), as an asyncio subprocess in its own process
group, killed whole when the time limit passes. Text goes through ``-f txt``; (X)HTML
through ``-f html-noent``, which translates text nodes and keeps tags and attributes as
they are and writes characters, not named entities, so XHTML stays well-formed (it
misreads named references in its input: translate-epub turns them into characters
first). ``-u``: unknown words come back as written, without Apertium's ``*`` mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from satsgate.domain.languages import (
    RARE_LANGUAGES,
    TRANSLATION_LANGUAGES,
    UnknownLanguage,
    language_name,
    resolve_rare_language,
)
from satsgate.engines.errors import EngineError
from satsgate.engines.local import language_id
from satsgate.engines.local.tools import start_tool
from satsgate.engines.registry import EngineDeps, LocalEngine
from satsgate.engines.translation import TranslationRequest, TranslationResult
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

LABEL = "Apertium rule-based translation"
DEFAULT_DATADIR = "/usr/share/apertium"

# Apertium's language codes (ISO 639-3 or 639-1) -> satsgate's (639-1 where one exists).
_CODES: Mapping[str, str] = {
    "eng": "en", "spa": "es", "cat": "ca", "por": "pt", "fra": "fr", "ita": "it",
    "glg": "gl", "ron": "ro", "eus": "eu", "isl": "is", "mkd": "mk", "epo": "eo",
    "bul": "bg", "rus": "ru", "ukr": "uk", "bel": "be", "dan": "da", "nob": "no",
    "swe": "sv", "nld": "nl", "afr": "af", "ind": "id", "zlm": "ms", "msa": "ms",
    "hin": "hi", "urd": "ur", "slv": "sl", "pol": "pl", "deu": "de", "oci": "oc",
}  # fmt: skip
# Serbo-Croatian: as a source it reads all three standards; as a target a variant picks one.
_HBS = "hbs"
_HBS_STANDARDS: Mapping[str, str] = {"SR": "sr", "HR": "hr", "BS": "bs"}
_MODE = re.compile(r"^([a-z]{2,3})-([a-z]{2,3})(?:_([A-Za-z0-9]+))?$")


def datadir() -> Path:
    return Path(os.environ.get("APERTIUM_DATADIR", DEFAULT_DATADIR))


def _code(apertium_code: str) -> str | None:
    code = _CODES.get(apertium_code, apertium_code)
    return code if code in TRANSLATION_LANGUAGES else None


def rare_code(apertium_code: str) -> str | None:
    """An Apertium language code -> its code in translate-rare-language's table ("oc" ->
    "oci"), or None where the table does not list it."""
    try:
        code = resolve_rare_language(apertium_code)
    except UnknownLanguage:
        return None
    return code if code in RARE_LANGUAGES else None


def find_pairs(
    mode_names: Iterable[str], target_code: Callable[[str], str | None] = _code
) -> dict[tuple[str, str], str]:
    """Installed mode names -> {(source, target) in satsgate's codes: the mode to run}.

    Sources are always one of the 119 (``_code``); targets are named by ``target_code``
    (None: not served): the 119 for translate-text, :func:`rare_code` for the rare ones.

    A plain mode ("spa-eng") serves its pair; a variant ("spa-eng_US", "eng-cat_valencia",
    "es-pt_BR") only where it names the target language itself ("eng-hbs_SR": Serbian).
    Modes of other shapes (debugging, "eco-es-fr", "Cyrl-Latn") are not pairs.
    """
    pairs: dict[tuple[str, str], str] = {}
    for name in sorted(mode_names, key=lambda n: ("_" in n, n)):  # plain modes first
        match = _MODE.match(name)
        if match is None:
            continue
        source, target, variant = match.groups()
        sources = tuple(_HBS_STANDARDS.values()) if source == _HBS else (_code(source),)
        if target == _HBS:
            standard = _HBS_STANDARDS.get(variant or "")
            targets: tuple[str | None, ...] = (standard and target_code(standard),)
        elif variant is None:
            targets = (target_code(target),)
        else:
            continue
        for src in sources:
            for tgt in targets:
                if src and tgt and src != tgt:
                    pairs.setdefault((src, tgt), name)
    return pairs


def installed_pairs(
    root: Path | None = None, target_code: Callable[[str], str | None] = _code
) -> dict[tuple[str, str], str]:
    modes = (root or datadir()) / "modes"
    try:
        names = [p.name[: -len(".mode")] for p in modes.iterdir() if p.name.endswith(".mode")]
    except OSError:
        return {}
    return find_pairs(names, target_code)


def probe() -> str:
    if shutil.which("apertium") is None:
        return "apertium not installed"
    if not installed_pairs():
        return "no Apertium language pair installed"
    return ""


def probe_rare() -> str:
    if shutil.which("apertium") is None:
        return "apertium not installed"
    if not installed_pairs(target_code=rare_code):
        return "no Apertium language pair into a rare language installed"
    return ""


def _name(code: str) -> str:
    return language_name(code)


# Pivot languages, most preferred first: Apertium's pairs are built around Spanish, then
# English; a pair through a pivot loses more than an installed one, so one step only.
PIVOT_PREFERENCE = ("es", "en", "ca", "fr", "pt", "it", "gl")


def _pivot_order(item: tuple[tuple[str, str], str]) -> tuple[int, str, str]:
    (source, pivot), _mode = item
    rank = PIVOT_PREFERENCE.index(pivot) if pivot in PIVOT_PREFERENCE else len(PIVOT_PREFERENCE)
    return rank, pivot, source


class ApertiumTranslator:
    """TranslationEngine (satsgate.engines.translation) over the installed Apertium pairs."""

    def __init__(
        self, pairs: Mapping[tuple[str, str], str], *, timeout_s: float, parallel: int
    ) -> None:
        self._pairs = dict(pairs)
        # Every pair served, with the modes run one after the other: an installed pair's
        # own mode, else two through a pivot language (its first installed pair by
        # PIVOT_PREFERENCE), e.g. en->fr as en->es then es->fr.
        self._routes: dict[tuple[str, str], tuple[str, ...]] = {
            pair: (mode,) for pair, mode in self._pairs.items()
        }
        self._pivots: dict[tuple[str, str], str] = {}
        for (source, pivot), first in sorted(self._pairs.items(), key=_pivot_order):
            for (middle, target), second in self._pairs.items():
                if middle == pivot and target != source and (source, target) not in self._routes:
                    self._routes[(source, target)] = (first, second)
                    self._pivots[(source, target)] = pivot
        self._timeout_s = timeout_s
        self._parallel = max(1, parallel)
        self._slots: asyncio.Semaphore | None = None

    # -- what it serves ---------------------------------------------------------------------

    def language_pairs(self) -> tuple[tuple[str, str], ...]:
        """(source, target) codes served here, sorted: installed pairs and pivoted ones."""
        return tuple(sorted(self._routes))

    def pivot(self, source: str, target: str) -> str | None:
        """The language a translation from ``source`` into ``target`` goes through, or None
        where an installed pair translates it directly."""
        return self._pivots.get((source, target))

    def sources_for(self, target: str) -> tuple[str, ...]:
        return tuple(sorted(s for s, t in self._routes if t == target))

    def _pair_list(self) -> str:
        installed = ", ".join(f"{s}->{t}" for s, t in sorted(self._pairs))
        return f"{installed}, and pairs through one of them (GET /api/languages lists every pair)"

    def _source(self, request: TranslationRequest) -> tuple[str | None, str | None]:
        """(the source language to translate from, or why the request cannot be served).

        (None, None): no source given and no text to identify it by (a check before the
        text is at hand); the translation itself identifies it again.
        """
        target, source = request.target_language, request.source_language
        sources = self.sources_for(target)
        if not sources and source != target:
            targets = sorted({t for _, t in self._pairs})
            return None, (
                f"this node translates locally into {', '.join(targets)} only, not into "
                f"{_name(target)}; language pairs installed here: {self._pair_list()}"
            )
        if source is not None:
            if source == target or source in sources:
                return source, None
            return None, (
                f"this node translates into {_name(target)} only from "
                f"{', '.join(sources)}, not from {_name(source)}; language pairs installed here: "
                f"{self._pair_list()}"
            )
        text = request.text
        if request.format == "html":
            text = language_id.plain_text(text)
        try:
            detected = language_id.detect(text, sources, target)
        except RuntimeError:
            return None, (
                "sourceLanguage is needed: language identification is not installed on this node"
            )
        if detected is None:
            if not text.strip():
                return None, None
            # Nothing to translate (digits, symbols): pass it through from any source.
            return target, None
        if detected.code == target or detected.code in sources:
            return detected.code, None
        return None, (
            f"the text reads as {_name(detected.code)} ({detected.code}); this node "
            f"translates into {_name(target)} only from {', '.join(sources)}; give "
            "sourceLanguage if that is wrong"
        )

    def unsupported(self, request: object) -> str | None:
        """Why ``request`` cannot be translated here (checked before any invoice)."""
        if not isinstance(request, TranslationRequest):
            return None
        return self._source(request)[1]

    # -- translating ------------------------------------------------------------------------

    async def translate(self, request: TranslationRequest) -> TranslationResult:
        source, reason = self._source(request)
        if reason is not None:
            # The next binding of a chain may know the pair.
            raise EngineError(
                ErrorCode.INVALID_INPUT, f"Cannot translate: {reason}.", may_fall_back=True
            )
        if source is None:  # an empty text
            return TranslationResult(request.text, None)
        if source == request.target_language:
            return TranslationResult(request.text, source)
        pair = (source, request.target_language)
        fmt = "html-noent" if request.format == "html" else "txt"
        text = request.text
        for mode in self._routes[pair]:
            text = await self._run(mode, fmt, text)
        return TranslationResult(text, source, pivot_language=self._pivots.get(pair))

    async def _run(self, mode: str, fmt: str, text: str) -> str:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._parallel)
        async with self._slots:
            try:
                proc = await start_tool(
                    ["apertium", "-u", "-f", fmt, mode],
                    text.encode("utf-8"),
                    start_new_session=True,  # its own process group: the pipeline dies whole
                )
            except OSError as exc:
                log.error("apertium could not start: %s", exc)
                raise EngineError(
                    ErrorCode.SERVICE_ERROR, "The translation engine could not start."
                ) from None
            try:
                out, err = await asyncio.wait_for(proc.communicate(), self._timeout_s)
            except TimeoutError:
                raise EngineError(
                    ErrorCode.TIMEOUT,
                    f"The translation did not finish within {self._timeout_s:g} s and was stopped.",
                ) from None
            finally:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
        if proc.returncode != 0:
            log.error("apertium %s exited %s: %s", mode, proc.returncode, err[-2000:])
            raise EngineError(ErrorCode.SERVICE_ERROR, "The translation engine failed.")
        return out.decode("utf-8", errors="replace")


def _build(deps: EngineDeps, target_code: Callable[[str], str | None]) -> ApertiumTranslator:
    language_id.warm_up()
    return ApertiumTranslator(
        installed_pairs(target_code=target_code),
        timeout_s=deps.settings.cpu_job_time_limit_s,
        parallel=os.cpu_count() or 2,
    )


def build(deps: EngineDeps) -> ApertiumTranslator:
    return _build(deps, _code)


def build_rare(deps: EngineDeps) -> ApertiumTranslator:
    return _build(deps, rare_code)


APERTIUM = LocalEngine(
    engine="translation", label=LABEL, probe=probe, build=build, models=frozenset()
)
# translate-rare-language: the installed pairs into a language of its table (Occitan,
# Sardinian, Asturian ... from Catalan, Spanish, French, Italian).
RARE_LABEL = "Apertium rule-based translation into rare languages"
APERTIUM_RARE = LocalEngine(
    engine="rare_translation", label=RARE_LABEL, probe=probe_rare, build=build_rare
)
