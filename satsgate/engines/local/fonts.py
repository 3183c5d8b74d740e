"""Font files by path, an ordered fallback chain, and text split into per-font runs.

Fonts are found once per process under the Debian font folders and cached; ``fc-match``
is asked only when that scan finds no DejaVu Sans. Glyph coverage comes from each font's
cmap, read lazily with fontTools and cached, so plain Latin text never opens the Noto files.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fontTools.ttLib import TTFont

FONT_ROOTS: tuple[Path, ...] = (
    Path(__file__).resolve().parent.parent / "fonts",
    Path("/usr/share/fonts"),
    Path("/usr/local/share/fonts"),
)
_FONT_SUFFIXES = (".ttf", ".otf", ".ttc")

# Noto families for scripts DejaVu Sans lacks, most widely used first; the remaining
# NotoSans*-Regular files follow in name order so rarer scripts still get glyphs.
_NOTO_PREFERRED = (
    "NotoSans",
    "NotoSansArabic",
    "NotoSansHebrew",
    "NotoSansDevanagari",
    "NotoSansBengali",
    "NotoSansThai",
    "NotoSansTamil",
    "NotoSansTelugu",
    "NotoSansGujarati",
    "NotoSansGurmukhi",
    "NotoSansKannada",
    "NotoSansMalayalam",
    "NotoSansSinhala",
    "NotoSansKhmer",
    "NotoSansLao",
    "NotoSansMyanmar",
    "NotoSansEthiopic",
    "NotoSansGeorgian",
    "NotoSansArmenian",
    "NotoSansThaana",
    "NotoSansSyriac",
    "NotoSansMath",
    "NotoSansSymbols",
    "NotoSansSymbols2",
)
# (regular file, bold file, face index in the collection); the first one present is used.
_CJK_CANDIDATES: tuple[tuple[str, str, int], ...] = (
    ("NotoSansCJK-Regular.ttc", "NotoSansCJK-Bold.ttc", 0),
    ("wqy-microhei.ttc", "wqy-microhei.ttc", 0),
    ("wqy-zenhei.ttc", "wqy-zenhei.ttc", 0),
    ("DroidSansFallbackFull.ttf", "DroidSansFallbackFull.ttf", 0),
)


class FontsMissing(RuntimeError):
    """No usable font was found: install the Debian package fonts-dejavu-core."""

    def __init__(self, detail: str = "no TrueType font found") -> None:
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.detail}; install the Debian package fonts-dejavu-core"


@dataclass(frozen=True, order=True)
class FontFile:
    """One face: a font file and, for a .ttc collection, the face index in it."""

    path: str
    index: int = 0


@dataclass(frozen=True)
class TextRun:
    """A piece of text drawn with one font; runs of a string concatenate back to it."""

    text: str
    font: FontFile


@functools.cache
def _font_index() -> dict[str, str]:
    """File name -> path of every font file under FONT_ROOTS; the first root wins."""
    found: dict[str, str] = {}
    for root in FONT_ROOTS:
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.lower().endswith(_FONT_SUFFIXES):
                    found.setdefault(name, os.path.join(dirpath, name))
    return found


@functools.cache
def _fc_match(pattern: str) -> str | None:
    """Path of the file fontconfig picks for ``pattern``, or None."""
    exe = shutil.which("fc-match")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--format=%{file}", pattern],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if out.lower().endswith(_FONT_SUFFIXES) and os.path.isfile(out):
        return out
    return None


def find_font(file_name: str) -> FontFile | None:
    """The font file with this exact name under the Debian font folders, if any."""
    path = _font_index().get(file_name)
    return FontFile(path) if path is not None else None


def _primary(bold: bool) -> FontFile | None:
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    face = find_font(name)
    if face is not None:
        return face
    matched = _fc_match("DejaVu Sans:bold" if bold else "DejaVu Sans") or _fc_match(
        "sans-serif:bold" if bold else "sans-serif"
    )
    return FontFile(matched) if matched is not None else None


def _noto_faces(bold: bool) -> list[FontFile]:
    index = _font_index()
    families = list(_NOTO_PREFERRED)
    rest = sorted(
        name.removesuffix("-Regular.ttf")
        for name in index
        if name.startswith("NotoSans") and name.endswith("-Regular.ttf")
    )
    families += [family for family in rest if family not in families]
    faces: list[FontFile] = []
    for family in families:
        regular = index.get(f"{family}-Regular.ttf")
        chosen = index.get(f"{family}-Bold.ttf", regular) if bold else regular
        if chosen is not None:
            faces.append(FontFile(chosen))
    return faces


def _cjk_face(bold: bool) -> FontFile | None:
    index = _font_index()
    for regular, bold_name, face_index in _CJK_CANDIDATES:
        path = index.get(bold_name if bold else regular) or index.get(regular)
        if path is not None:
            return FontFile(path, face_index)
    return None


@functools.cache
def font_chain(bold: bool = False) -> tuple[FontFile, ...]:
    """Fallback order: DejaVu Sans (Bold), Noto Sans per script, then a CJK font if present.

    Raises FontsMissing when not even a primary font exists.
    """
    primary = _primary(bold)
    faces = [primary] if primary is not None else []
    faces += _noto_faces(bold)
    cjk = _cjk_face(bold)
    if cjk is not None:
        faces.append(cjk)
    if not faces:
        raise FontsMissing("no TrueType font found under " + ", ".join(map(str, FONT_ROOTS)))
    unique: list[FontFile] = []
    for face in faces:
        if face not in unique:
            unique.append(face)
    return tuple(unique)


@functools.cache
def font_codepoints(font: FontFile) -> frozenset[int]:
    """Code points this face maps to a glyph (its best Unicode cmap)."""
    with TTFont(font.path, fontNumber=font.index, lazy=True) as tt:
        cmap = tt.getBestCmap() or {}
        return frozenset(cmap)


def is_invisible(char: str) -> bool:
    """True for characters that need no glyph of their own (format controls, selectors)."""
    code = ord(char)
    return (
        unicodedata.category(char) == "Cf" or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF
    )


def _attaches(char: str) -> bool:
    """Marks and punctuation stay with the run before them when that font has them."""
    category = unicodedata.category(char)
    return not (category.startswith("L") or category.startswith("N"))


class _Coverage:
    """Per-chain memo of which face (by position in the chain) draws each character."""

    def __init__(self, chain: tuple[FontFile, ...]) -> None:
        self.chain = chain
        self._sets: list[frozenset[int] | None] = [None] * len(chain)
        self._first: dict[str, int] = {}

    def has(self, position: int, char: str) -> bool:
        codepoints = self._sets[position]
        if codepoints is None:
            codepoints = self._sets[position] = font_codepoints(self.chain[position])
        return ord(char) in codepoints

    def first(self, char: str) -> int:
        """Position of the first face having ``char``, or -1."""
        found = self._first.get(char)
        if found is None:
            found = next((i for i in range(len(self.chain)) if self.has(i, char)), -1)
            self._first[char] = found
        return found


class _CoverageCache:
    """Each font chain's glyph coverage, for the chains this process draws with.

    Process-scoped on purpose: cards render in the CPU pool's worker processes (and the
    layout check in a thread of the server), each of which builds its own font chains
    once (``font_chain`` is cached), so a coverage table lives as long as its chain in
    that process and nothing is shared between apps or processes. Keyed by ``id()`` with
    the chain kept alive in the value, so an id is never reused while cached (hashing a
    long chain of faces on every call would cost more than the lookups it saves); at most
    ``size`` chains, then it starts over.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: dict[int, tuple[Sequence[FontFile], _Coverage]] = {}

    def of(self, chain: Sequence[FontFile]) -> _Coverage:
        entry = self._entries.get(id(chain))
        if entry is None or entry[0] is not chain:
            if len(self._entries) >= self._size:
                self._entries.clear()
            entry = (chain, _Coverage(tuple(chain)))
            self._entries[id(chain)] = entry
        return entry[1]


_COVERAGE = _CoverageCache()


def _coverage(chain: Sequence[FontFile]) -> _Coverage:
    return _COVERAGE.of(chain)


def font_for_char(char: str, chain: Sequence[FontFile]) -> FontFile | None:
    """The first face of ``chain`` that has a glyph for ``char``, or None."""
    position = _coverage(chain).first(char)
    return chain[position] if position >= 0 else None


def missing_glyphs(text: str, chain: Sequence[FontFile]) -> str:
    """The distinct visible characters of ``text`` that no face of ``chain`` can draw."""
    coverage = _coverage(chain)
    missing: list[str] = []
    for char in dict.fromkeys(text):
        if char != "\n" and not is_invisible(char) and coverage.first(char) < 0:
            missing.append(char)
    return "".join(missing)


def split_runs(text: str, chain: Sequence[FontFile]) -> list[TextRun]:
    """Split ``text`` into runs, each drawn with the first face of ``chain`` having its glyphs.

    Spaces, punctuation, marks and invisible controls stay in the current run when its face
    has them (so a word of Arabic keeps its spaces for shaping); a character no face has
    goes to the primary face. Joining the runs' text gives back ``text`` exactly.
    """
    if not chain:
        raise FontsMissing("empty font chain")
    coverage = _coverage(chain)
    runs: list[TextRun] = []
    current = -1
    buffer: list[str] = []
    for char in text:
        if current >= 0 and (
            is_invisible(char) or (_attaches(char) and coverage.has(current, char))
        ):
            position = current
        else:
            position = max(coverage.first(char), 0)
        if position != current and buffer:
            runs.append(TextRun("".join(buffer), chain[current]))
            buffer = []
        current = position
        buffer.append(char)
    if buffer:
        runs.append(TextRun("".join(buffer), chain[current]))
    return runs
