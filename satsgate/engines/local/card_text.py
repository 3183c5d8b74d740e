"""The text of a card: faces at a size, bidirectional runs shaped with Raqm where it is
installed, and line breaking (at spaces, between CJK characters, inside a word only
when nothing else fits). Measured exactly as it is painted (satsgate.engines.local.cards).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PIL import ImageFont, features

from satsgate.engines.local.fonts import (
    FontFile,
    font_chain,
    is_invisible,
    split_runs,
)

RAQM = features.check("raqm")  # Pillow with libraqm: bidirectional text shaped
_LAYOUT = ImageFont.Layout.RAQM if RAQM else ImageFont.Layout.BASIC


@functools.lru_cache(maxsize=512)
def face(font: FontFile, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(font.path, size, index=font.index, layout_engine=_LAYOUT)


def _bidi_class(char: str) -> str:
    kind = unicodedata.bidirectional(char)
    if kind == "L":
        return "L"
    if kind in ("R", "AL"):
        return "R"
    if kind in ("EN", "AN", "NSM"):
        return kind
    return "N"


def is_rtl(text: str) -> bool:
    """Paragraph direction from its first strong character (LTR when there is none)."""
    for char in text:
        kind = _bidi_class(char)
        if kind in ("L", "R"):
            return kind == "R"
    return False


def _levels(text: str, rtl: bool) -> list[int]:
    """Embedding levels of a simplified Unicode bidi algorithm (no explicit embeddings)."""
    base = "R" if rtl else "L"
    kinds: list[str] = []
    previous_strong = base
    for char in text:
        kind = _bidi_class(char)
        if kind == "NSM":
            kind = kinds[-1] if kinds else base
        if kind == "EN" and previous_strong == "L":
            kind = "L"
        if kind in ("L", "R"):
            previous_strong = kind
        kinds.append(kind)
    # Neutrals between two same-direction neighbours take it; numbers count as R here.
    resolved = list(kinds)
    position = 0
    while position < len(kinds):
        if kinds[position] != "N":
            position += 1
            continue
        end = position
        while end < len(kinds) and kinds[end] == "N":
            end += 1
        before = _strength(kinds[position - 1]) if position > 0 else base
        after = _strength(kinds[end]) if end < len(kinds) else base
        direction = before if before == after else base
        resolved[position:end] = [direction] * (end - position)
        position = end
    if rtl:
        return [1 if kind == "R" else 2 for kind in resolved]
    return [0 if kind == "L" else 1 if kind == "R" else 2 for kind in resolved]


def _strength(kind: str) -> str:
    return "L" if kind == "L" else "R"


@dataclass(frozen=True)
class Run:
    text: str
    font: FontFile
    rtl: bool
    width: float


@functools.lru_cache(maxsize=8192)
def shape_line(line: str, bold: bool, size: int, rtl: bool) -> tuple[Run, ...]:
    """The runs of one line in visual (left to right) order, each with its advance width."""
    if not line:
        return ()
    levels = _levels(line, rtl)
    pieces: list[tuple[str, FontFile, int]] = []
    offset = 0
    for run in split_runs(line, font_chain(bold)):
        start = offset
        offset += len(run.text)
        for index in range(start, offset):
            level = levels[index]
            if pieces and pieces[-1][1] == run.font and pieces[-1][2] == level:
                text, font, _ = pieces[-1]
                pieces[-1] = (text + line[index], font, level)
            else:
                pieces.append((line[index], run.font, level))
    # Rule L2: from the highest level down to the lowest odd one, reverse each stretch.
    highest = max(level for _, _, level in pieces)
    lowest_odd = min((level for _, _, level in pieces if level % 2), default=highest + 1)
    for level in range(highest, lowest_odd - 1, -1):
        index = 0
        while index < len(pieces):
            if pieces[index][2] < level:
                index += 1
                continue
            end = index
            while end < len(pieces) and pieces[end][2] >= level:
                end += 1
            pieces[index:end] = pieces[index:end][::-1]
            index = end
    runs: list[Run] = []
    for text, font, level in pieces:
        run_rtl = level % 2 == 1
        if not RAQM and run_rtl:
            text = text[::-1]
        typeface = face(font, size)
        width = typeface.getlength(text, direction=("rtl" if run_rtl else "ltr") if RAQM else None)
        runs.append(Run(text, font, run_rtl, width))
    return tuple(runs)


def line_width(line: str, bold: bool, size: int, rtl: bool) -> float:
    return sum(run.width for run in shape_line(line, bold, size, rtl))


# ------------------------------------------------------------------------------ line breaking

_BREAK_AFTER = frozenset("-‐–—/")
# Closing punctuation that must not start a line.
_NO_BREAK_BEFORE = frozenset("、。，．！？：；）」』】〕〉》’”…ー・)]}.,!?:;%")


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x2E80 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
        or 0x20000 <= code <= 0x3FFFF
    )


def _joins_previous(char: str) -> bool:
    return unicodedata.category(char).startswith("M") or is_invisible(char)


def _tokens(paragraph: str) -> list[tuple[str, str]]:
    """(spaces before, token) pairs; a line may break before any token, dropping its spaces."""
    tokens: list[tuple[str, str]] = []
    spaces = ""
    current = ""
    break_after = False  # may the line break after the last character of ``current``?
    for char in paragraph:
        if char == " ":
            if current:
                tokens.append((spaces, current))
                current, spaces = "", ""
            spaces += char
            break_after = False
            continue
        breakable = (break_after or _is_cjk(char)) and char not in _NO_BREAK_BEFORE
        if current and breakable and not _joins_previous(char):
            tokens.append((spaces, current))
            current, spaces = "", ""
        # A hyphen or slash inside a word ("pay-per-call", "a/b") is a break opportunity.
        hyphen = char in _BREAK_AFTER and bool(current) and current[-1].isalnum()
        current += char
        if not _joins_previous(char):
            break_after = _is_cjk(char) or hyphen
    if current:
        tokens.append((spaces, current))
    return tokens


def _last_fitting(low: int, high: int, fits_at: Callable[[int], bool]) -> int:
    """Largest n in [low, high] with ``fits_at(n)``, given that ``low`` fits and widths grow with n.

    Gallops up from ``low`` then bisects, so probes stay near the answer: cheap for long text.
    """
    good, bad, step = low, high + 1, 1
    while good + 1 < bad:
        probe = min(good + step, bad - 1) if bad > high else (good + bad) // 2
        if fits_at(probe):
            good, step = probe, step * 2
        else:
            bad = probe
    return good


def _break_word(word: str, fits: Callable[[str], bool]) -> list[str] | None:
    """Split an overlong word into pieces that each fit, never splitting off a mark."""
    pieces: list[str] = []
    rest = word
    while True:
        cuts = [i for i in range(1, len(rest)) if not _joins_previous(rest[i])] + [len(rest)]
        if not fits(rest[: cuts[0]]):
            return None

        def fits_cut(n: int, rest: str = rest, cuts: list[int] = cuts) -> bool:
            return fits(rest[: cuts[n]])

        best = _last_fitting(0, len(cuts) - 1, fits_cut)
        if cuts[best] == len(rest):
            pieces.append(rest)
            return pieces
        pieces.append(rest[: cuts[best]])
        rest = rest[cuts[best] :]


def _join(first: str, tokens: Sequence[tuple[str, str]]) -> str:
    return first + "".join(spaces + token for spaces, token in tokens)


def wrap(
    text: str, fits: Callable[[str], bool], max_lines: int, break_words: bool
) -> list[str] | None:
    """Greedy wrap of ``text`` into at most ``max_lines`` lines that fit, or None.

    Each line takes as many tokens as fit, found with O(log n) measurements.
    """
    lines: list[str] = []
    for paragraph in text.split("\n"):
        tokens = _tokens(paragraph)
        if not tokens:
            lines.append("")
        elif fits(tokens[0][0] + tokens[0][1]):
            # Leading spaces are kept at the start of a paragraph, dropped at a wrap.
            tokens[0] = ("", tokens[0][0] + tokens[0][1])
        start = 0
        while start < len(tokens):
            first = tokens[start][1]
            if not fits(first):
                pieces = _break_word(first, fits) if break_words else None
                if pieces is None:
                    return None
                lines.extend(pieces[:-1])
                tokens[start] = ("", pieces[-1])
                first = pieces[-1]

            following = tokens[start + 1 :]

            def fits_tokens(
                n: int, head: str = first, more: list[tuple[str, str]] = following
            ) -> bool:
                return fits(_join(head, more[:n]))

            count = _last_fitting(0, len(following), fits_tokens)
            lines.append(_join(first, following[:count]))
            if len(lines) > max_lines:
                return None
            start += 1 + count
    return lines
