"""Deterministic social cards (headline, versus, list, stat, quote) as PNG or JPEG, no AI.

The text sent is the text shown: each field is auto-sized to the largest type that fits
its box, wrapped at spaces (and between CJK characters), words are broken only when no
size fits them whole, and text that fits nowhere raises CardTextOverflow naming the field
instead of being cut. A character no installed font can draw raises CardTextUnsupported.
``check_fits`` runs the same layout without painting, so callers can refuse before payment.
The same request always gives the same bytes: no timestamps, fixed encoder options.
Decorations (accent bars, the quote mark, the "VS" badge) belong to the template, not to
any field.
"""

from __future__ import annotations

import functools
import io
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from PIL import Image, ImageChops, ImageDraw

from satsgate.engines.local.card_text import RAQM, face, is_rtl, line_width, shape_line, wrap
from satsgate.engines.local.fonts import (
    FontFile,
    find_font,
    font_chain,
    missing_glyphs,
)

Template = Literal["headline", "versus", "list", "stat", "quote"]
ImageFormat = Literal["png", "jpeg"]

MIN_SIZE = 200
MAX_SIZE = 4096
DEFAULT_WIDTH = 1200
DEFAULT_HEIGHT = 630
JPEG_QUALITY = 90

FIELD_MAX_LENGTHS: Mapping[str, int] = {
    "title": 200,
    "subtitle": 300,
    "left": 120,
    "right": 120,
    "value": 40,
    "label": 200,
    "text": 1000,
    "author": 120,
}
MAX_LIST_ITEMS = 12
MAX_ITEM_LENGTH = 160

# template -> (required fields, optional fields)
TEMPLATE_FIELDS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "headline": (("title",), ("subtitle",)),
    "versus": (("left", "right"), ("title",)),
    "list": (("title", "items"), ()),
    "stat": (("value", "label"), ()),
    "quote": (("text",), ("author",)),
}
CONTENT_TYPES: Mapping[str, str] = {"png": "image/png", "jpeg": "image/jpeg"}

RGB = tuple[int, int, int]
_BG_TOP: RGB = (17, 24, 39)
_BG_BOTTOM: RGB = (3, 7, 18)
_PANEL: RGB = (30, 41, 59)
_ACCENT: RGB = (247, 147, 26)
_ACCENT_2: RGB = (56, 189, 248)
_TEXT: RGB = (248, 250, 252)
_SOFT: RGB = (203, 213, 225)


class CardTextError(ValueError):
    """A field's text cannot be shown as sent; ``field`` names it. Raised before any bytes."""

    field: str


class CardTextOverflow(CardTextError):
    """The field does not fit its box even at the minimum type size, wrapped."""

    def __init__(self, field: str, min_px: int) -> None:
        super().__init__(field, min_px)
        self.field = field
        self.min_px = min_px

    def __str__(self) -> str:
        return (
            f"text of field '{self.field}' does not fit the card even at {self.min_px}px "
            "type; shorten it or use a larger card"
        )


class CardTextUnsupported(CardTextError):
    """The field has characters no installed font can draw (they would show as boxes)."""

    def __init__(self, field: str, chars: str) -> None:
        super().__init__(field, chars)
        self.field = field
        self.chars = chars

    def __str__(self) -> str:
        listed = ", ".join(f"U+{ord(char):04X}" for char in self.chars)
        return f"field '{self.field}' has characters no card font can draw: {listed}"


def validate_size(width: int, height: int) -> None:
    """Raise ValueError unless both sides are within MIN_SIZE..MAX_SIZE pixels."""
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer")
        if not MIN_SIZE <= value <= MAX_SIZE:
            raise ValueError(f"{name} must be between {MIN_SIZE} and {MAX_SIZE}, got {value}")


def _check_text(name: str, value: object, limit: int) -> None:
    if not isinstance(value, str):
        raise ValueError(f"field '{name}' must be a string")
    if not value.strip():
        raise ValueError(f"field '{name}' must not be empty")
    if len(value) > limit:
        raise ValueError(f"field '{name}' is longer than {limit} characters")


def validate_fields(template: str, fields: Mapping[str, str | list[str]]) -> None:
    """Raise ValueError for an unknown template, missing, unknown, empty or too long fields."""
    if template not in TEMPLATE_FIELDS:
        raise ValueError(f"unknown template '{template}'")
    required, optional = TEMPLATE_FIELDS[template]
    for name in fields:
        if name not in required and name not in optional:
            raise ValueError(f"template '{template}' has no field '{name}'")
    for name in required:
        if name not in fields:
            raise ValueError(f"template '{template}' needs field '{name}'")
    for name, value in fields.items():
        if name == "items":
            if not isinstance(value, list) or not value:
                raise ValueError("field 'items' must be a non-empty list of strings")
            if len(value) > MAX_LIST_ITEMS:
                raise ValueError(f"field 'items' has more than {MAX_LIST_ITEMS} entries")
            for position, item in enumerate(value):
                _check_text(f"items[{position}]", item, MAX_ITEM_LENGTH)
        elif name in optional and value == "":
            continue
        else:
            _check_text(name, value, FIELD_MAX_LENGTHS[name])


@dataclass(frozen=True)
class CardRequest:
    """A validated card order; construction raises ValueError for anything out of bounds."""

    template: Template
    fmt: ImageFormat = "png"
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    fields: Mapping[str, str | list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fmt not in get_args(ImageFormat):
            raise ValueError(f"format must be png or jpeg, got '{self.fmt}'")
        validate_size(self.width, self.height)
        validate_fields(self.template, self.fields)

    def text(self, name: str) -> str:
        """A text field, with "" for an absent optional one."""
        value = self.fields.get(name, "")
        return value if isinstance(value, str) else ""

    def items(self) -> list[str]:
        value = self.fields.get("items", [])
        return list(value) if isinstance(value, list) else []


@dataclass(frozen=True)
class RenderedImage:
    """Encoded card bytes and what they are."""

    data: bytes
    fmt: ImageFormat
    width: int
    height: int
    content_type: str


# ---------------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class _Style:
    bold: bool
    max_ratio: float  # largest type size as a share of the card's shorter side
    leading: float  # line height as a multiple of the type size
    color: RGB
    align: Literal["start", "center"]


@dataclass(frozen=True)
class _Block:
    lines: tuple[str, ...]
    size: int
    line_px: int
    rtl: bool
    style: _Style

    @property
    def height(self) -> int:
        return self.line_px * len(self.lines)


def _min_px(unit: int) -> int:
    """Smallest type size, scaled with the card: still readable at 1:1, and small enough that
    every field at its maximum length fits a default 1200x630 card."""
    return max(10, round(unit * 0.018))


def _line_px(style: _Style, size: int) -> int:
    return max(1, round(size * style.leading))


def _fit_group(
    name: str,
    texts: Sequence[str],
    style: _Style,
    box: tuple[float, float],
    unit: int,
    gap_lines: float = 0.0,
    cap_px: int | None = None,
) -> list[_Block]:
    """Largest common type size at which every text wraps into ``box`` (stacked, with gaps).

    Whole words are preferred: words are broken only when no size fits them unbroken.
    ``cap_px`` keeps secondary text from outgrowing the main text it accompanies.
    """
    chain = font_chain(style.bold)
    for text in texts:
        controls = "".join(
            char for char in dict.fromkeys(text) if unicodedata.category(char) == "Cc"
        ).replace("\n", "")
        bad = controls + missing_glyphs(text, chain).replace(controls, "")
        if bad:
            raise CardTextUnsupported(name, bad)
    box_w, box_h = box
    directions = [is_rtl(text) for text in texts]
    min_px = _min_px(unit)
    max_px = round(unit * style.max_ratio)
    max_px = max(min_px, max_px if cap_px is None else min(max_px, cap_px))

    def attempt(size: int, break_words: bool) -> list[_Block] | None:
        line_px = _line_px(style, size)
        gap = round(line_px * gap_lines)
        budget = box_h - gap * (len(texts) - 1)
        blocks: list[_Block] = []
        for text, rtl in zip(texts, directions, strict=True):

            def fits(line: str, rtl: bool = rtl) -> bool:
                return line_width(line, style.bold, size, rtl) <= box_w

            lines = wrap(text, fits, int(budget // line_px), break_words)
            if lines is None:
                return None
            budget -= line_px * len(lines)
            blocks.append(_Block(tuple(lines), size, line_px, rtl, style))
        return blocks if budget >= 0 else None

    for break_words in (False, True):
        best = attempt(min_px, break_words)
        if best is None:
            continue
        low, high = min_px + 1, max_px
        while low <= high:
            middle = (low + high) // 2
            found = attempt(middle, break_words)
            if found is None:
                high = middle - 1
            else:
                best, low = found, middle + 1
        return best
    raise CardTextOverflow(name, min_px)


def _fit(
    name: str,
    text: str,
    style: _Style,
    box: tuple[float, float],
    unit: int,
    cap_px: int | None = None,
) -> _Block:
    return _fit_group(name, [text], style, box, unit, cap_px=cap_px)[0]


# ----------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class _PlacedText:
    block: _Block
    left: float
    right: float
    top: float


@dataclass(frozen=True)
class _Shape:
    kind: Literal["rect", "round", "disc", "glyph"]
    box: tuple[float, float, float, float]
    color: RGB
    radius: float = 0.0
    glyph: str = ""  # decoration drawn to fill ``box`` exactly (kind "glyph")


@dataclass
class _Layout:
    width: int
    height: int
    shapes: list[_Shape] = field(default_factory=list)
    texts: list[_PlacedText] = field(default_factory=list)


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _Frame:
    """Card geometry shared by the templates: margins and the content box."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.unit = min(width, height)
        self.margin_x = round(max(self.unit * 0.1, width * 0.065))
        self.margin_y = round(self.unit * 0.1)
        self.left, self.top = self.margin_x, self.margin_y
        self.right, self.bottom = width - self.margin_x, height - self.margin_y
        self.content_w = self.right - self.left
        self.content_h = self.bottom - self.top
        self.bar_w = round(self.unit * 0.12)
        self.bar_h = max(3, round(self.unit * 0.012))


def _accent_bar(frame: _Frame, top: float, rtl: bool, color: RGB = _ACCENT) -> _Shape:
    left = frame.right - frame.bar_w if rtl else frame.left
    return _Shape("rect", (left, top, left + frame.bar_w, top + frame.bar_h), color)


def _layout_headline(request: CardRequest, frame: _Frame) -> _Layout:
    layout = _Layout(frame.width, frame.height)
    title = _normalise(request.text("title"))
    subtitle = _normalise(request.text("subtitle"))
    gap = round(frame.unit * 0.05)
    room = frame.content_h - frame.bar_h - gap
    title_style = _Style(True, 0.15, 1.12, _TEXT, "start")
    sub_style = _Style(False, 0.058, 1.35, _SOFT, "start")
    title_h = room * (0.64 if subtitle else 1.0) - (gap if subtitle else 0)
    title_block = _fit("title", title, title_style, (frame.content_w, title_h), frame.unit)
    sub_block = (
        _fit(
            "subtitle",
            subtitle,
            sub_style,
            (frame.content_w, room * 0.36),
            frame.unit,
            cap_px=title_block.size,
        )
        if subtitle
        else None
    )
    total = frame.bar_h + gap + title_block.height
    if sub_block is not None:
        total += gap + sub_block.height
    y = frame.top + (frame.content_h - total) / 2
    layout.shapes.append(_accent_bar(frame, y, title_block.rtl))
    y += frame.bar_h + gap
    layout.texts.append(_PlacedText(title_block, frame.left, frame.right, y))
    if sub_block is not None:
        y += title_block.height + gap
        layout.texts.append(_PlacedText(sub_block, frame.left, frame.right, y))
    return layout


def _layout_stat(request: CardRequest, frame: _Frame) -> _Layout:
    layout = _Layout(frame.width, frame.height)
    gap = round(frame.unit * 0.05)
    room = frame.content_h - frame.bar_h - 2 * gap
    value_style = _Style(True, 0.34, 1.05, _ACCENT, "center")
    label_style = _Style(False, 0.07, 1.3, _TEXT, "center")
    value = _fit(
        "value",
        _normalise(request.text("value")),
        value_style,
        (frame.content_w, room * 0.62),
        frame.unit,
    )
    label = _fit(
        "label",
        _normalise(request.text("label")),
        label_style,
        (frame.content_w, room * 0.38),
        frame.unit,
        cap_px=value.size,
    )
    total = value.height + gap + frame.bar_h + gap + label.height
    y = frame.top + (frame.content_h - total) / 2
    layout.texts.append(_PlacedText(value, frame.left, frame.right, y))
    y += value.height + gap
    middle = frame.width / 2
    layout.shapes.append(
        _Shape(
            "rect",
            (middle - frame.bar_w / 2, y, middle + frame.bar_w / 2, y + frame.bar_h),
            _ACCENT,
        )
    )
    y += frame.bar_h + gap
    layout.texts.append(_PlacedText(label, frame.left, frame.right, y))
    return layout


def _layout_versus(request: CardRequest, frame: _Frame) -> _Layout:
    layout = _Layout(frame.width, frame.height)
    unit = frame.unit
    title = _normalise(request.text("title"))
    top = frame.top
    if title:
        title_style = _Style(True, 0.065, 1.2, _SOFT, "center")
        block = _fit("title", title, title_style, (frame.content_w, frame.content_h * 0.2), unit)
        layout.texts.append(_PlacedText(block, frame.left, frame.right, top))
        top += block.height + round(unit * 0.05)
    gutter = round(unit * 0.16)
    panel_w = (frame.content_w - gutter) / 2
    pad = round(unit * 0.05)
    radius = round(unit * 0.035)
    side_style = _Style(True, 0.11, 1.15, _TEXT, "center")
    inner = (panel_w - 2 * pad, frame.bottom - top - 2 * pad)
    for name, left, color in (
        ("left", frame.left, _ACCENT),
        ("right", frame.right - panel_w, _ACCENT_2),
    ):
        block = _fit(name, _normalise(request.text(name)), side_style, inner, unit)
        border = frame.bar_h / 2
        layout.shapes.append(
            _Shape("round", (left, top, left + panel_w, frame.bottom), color, radius)
        )
        layout.shapes.append(
            _Shape(
                "round",
                (left + border, top + border, left + panel_w - border, frame.bottom - border),
                _PANEL,
                radius - border,
            )
        )
        text_top = top + pad + (inner[1] - block.height) / 2
        layout.texts.append(_PlacedText(block, left + pad, left + panel_w - pad, text_top))
    diameter = gutter * 0.92
    centre_x, centre_y = frame.width / 2, (top + frame.bottom) / 2
    layout.shapes.append(
        _Shape(
            "disc",
            (
                centre_x - diameter / 2,
                centre_y - diameter / 2,
                centre_x + diameter / 2,
                centre_y + diameter / 2,
            ),
            _ACCENT,
        )
    )
    badge_style = _Style(True, 0.06, 1.0, _BG_BOTTOM, "center")
    badge = _Block(("VS",), round(diameter * 0.36), round(diameter * 0.36), False, badge_style)
    layout.texts.append(
        _PlacedText(
            badge, centre_x - diameter / 2, centre_x + diameter / 2, centre_y - badge.height / 2
        )
    )
    return layout


def _layout_list(request: CardRequest, frame: _Frame) -> _Layout:
    layout = _Layout(frame.width, frame.height)
    unit = frame.unit
    gap = round(unit * 0.045)
    title_style = _Style(True, 0.095, 1.12, _TEXT, "start")
    item_style = _Style(False, 0.058, 1.3, _SOFT, "start")
    room = frame.content_h - frame.bar_h - 2 * gap
    title = _fit(
        "title",
        _normalise(request.text("title")),
        title_style,
        (frame.content_w, room * 0.3),
        unit,
    )
    items = [_normalise(item) for item in request.items()]
    indent_ratio = 1.5
    # The bullet indent grows with the type size; bound it by the largest possible size.
    indent = round(unit * item_style.max_ratio * indent_ratio)
    blocks = _fit_group(
        "items",
        items,
        item_style,
        (frame.content_w - indent, room - title.height),
        unit,
        gap_lines=0.35,
    )
    size = blocks[0].size
    indent = round(size * indent_ratio)
    item_gap = round(blocks[0].line_px * 0.35)
    total = (
        frame.bar_h
        + gap
        + title.height
        + gap
        + sum(block.height for block in blocks)
        + item_gap * (len(blocks) - 1)
    )
    y = frame.top + (frame.content_h - total) / 2
    layout.shapes.append(_accent_bar(frame, y, title.rtl))
    y += frame.bar_h + gap
    layout.texts.append(_PlacedText(title, frame.left, frame.right, y))
    y += title.height + gap
    dot = max(4.0, size * 0.34)
    for block in blocks:
        centre_y = y + block.line_px / 2
        centre_x = frame.right - dot if block.rtl else frame.left + dot
        layout.shapes.append(
            _Shape(
                "disc",
                (centre_x - dot / 2, centre_y - dot / 2, centre_x + dot / 2, centre_y + dot / 2),
                _ACCENT,
            )
        )
        left, right = (
            (frame.left, frame.right - indent) if block.rtl else (frame.left + indent, frame.right)
        )
        layout.texts.append(_PlacedText(block, left, right, y))
        y += block.height + item_gap
    return layout


def _layout_quote(request: CardRequest, frame: _Frame) -> _Layout:
    layout = _Layout(frame.width, frame.height)
    unit = frame.unit
    text = _normalise(request.text("text"))
    author = _normalise(request.text("author"))
    rtl = is_rtl(text)
    glyph = "”" if rtl else "“"
    mark_h = round(unit * 0.1)
    mark_w = _glyph_width(glyph, mark_h)
    gap = round(unit * 0.05)
    room = frame.content_h - mark_h - gap
    text_style = _Style(False, 0.085, 1.35, _TEXT, "start")
    author_style = _Style(True, 0.045, 1.3, _ACCENT, "start")
    dash = round(unit * 0.06)
    author_box = (frame.content_w - dash - gap / 2, room * 0.22)
    author_block = _fit("author", author, author_style, author_box, unit) if author else None
    text_h = room - ((author_block.height + gap) if author_block is not None else 0)
    body = _fit("text", text, text_style, (frame.content_w, text_h), unit)
    if author_block is not None and author_block.size > body.size:
        author_block = _fit("author", author, author_style, author_box, unit, cap_px=body.size)
    total = mark_h + gap + body.height
    if author_block is not None:
        total += gap + author_block.height
    y = frame.top + (frame.content_h - total) / 2
    mark_left = frame.right - mark_w if rtl else frame.left
    layout.shapes.append(
        _Shape("glyph", (mark_left, y, mark_left + mark_w, y + mark_h), _ACCENT, glyph=glyph)
    )
    y += mark_h + gap
    layout.texts.append(_PlacedText(body, frame.left, frame.right, y))
    if author_block is not None:
        y += body.height + gap
        middle = y + author_block.line_px / 2 - frame.bar_h / 2
        span: tuple[float, float]
        if author_block.rtl:
            dash_box = (frame.right - dash, middle, frame.right, middle + frame.bar_h)
            span = (frame.left, frame.right - dash - gap / 2)
        else:
            dash_box = (frame.left, middle, frame.left + dash, middle + frame.bar_h)
            span = (frame.left + dash + gap / 2, frame.right)
        layout.shapes.append(_Shape("rect", dash_box, _ACCENT))
        layout.texts.append(_PlacedText(author_block, span[0], span[1], y))
    return layout


_LAYOUTS: Mapping[str, Callable[[CardRequest, _Frame], _Layout]] = {
    "headline": _layout_headline,
    "versus": _layout_versus,
    "list": _layout_list,
    "stat": _layout_stat,
    "quote": _layout_quote,
}


def _layout(request: CardRequest) -> _Layout:
    return _LAYOUTS[request.template](request, _Frame(request.width, request.height))


# ---------------------------------------------------------------------------------- painting


def _background(width: int, height: int) -> Image.Image:
    vertical = Image.linear_gradient("L").resize((width, height), Image.Resampling.BICUBIC)
    image = Image.composite(
        Image.new("RGB", (width, height), _BG_BOTTOM),
        Image.new("RGB", (width, height), _BG_TOP),
        vertical,
    )
    # A soft accent glow centred on the top-right corner.
    radius = round(max(width, height) * 0.55)
    glow = Image.radial_gradient("L").resize((2 * radius, 2 * radius), Image.Resampling.BICUBIC)
    # radial_gradient reaches 181 at the middle of each edge: fade to zero there, no seam.
    glow = glow.point([round(255 * 0.2 * max(0.0, 1 - value / 181) ** 2) for value in range(256)])
    tint = Image.new("RGB", glow.size, _ACCENT)
    image.paste(tint, (width - radius, -radius), glow)
    return image


def _decoration_face() -> FontFile:
    return find_font("DejaVuSerif-Bold.ttf") or font_chain(True)[0]


@functools.lru_cache(maxsize=16)
def _glyph_mask(glyph: str, height: int) -> Image.Image:
    """The ink of ``glyph`` as an "L" mask scaled to ``height`` pixels tall."""
    size = 4 * height
    canvas = Image.new("L", (3 * size, 3 * size), 0)
    ImageDraw.Draw(canvas).text(
        (size, 2 * size), glyph, fill=255, font=face(_decoration_face(), size)
    )
    ink = canvas.crop(canvas.getbbox() or (0, 0, 1, 1))
    width = max(1, round(ink.width * height / ink.height))
    return ink.resize((width, height), Image.Resampling.LANCZOS)


def _glyph_width(glyph: str, height: int) -> int:
    return _glyph_mask(glyph, height).width


def _disc_mask(diameter: int) -> Image.Image:
    scale = 4
    big = Image.new("L", (diameter * scale, diameter * scale), 0)
    ImageDraw.Draw(big).ellipse((0, 0, diameter * scale - 1, diameter * scale - 1), fill=255)
    return big.resize((diameter, diameter), Image.Resampling.LANCZOS)


def _paint_shape(image: Image.Image, shape: _Shape) -> None:
    left, top, right, bottom = (round(value) for value in shape.box)
    width, height = right - left, bottom - top
    if width <= 0 or height <= 0:
        return
    if shape.kind == "rect":
        ImageDraw.Draw(image).rectangle((left, top, right - 1, bottom - 1), fill=shape.color)
        return
    if shape.kind == "glyph":
        mask = _glyph_mask(shape.glyph, height)
        image.paste(shape.color, (left, top, left + mask.width, top + mask.height), mask)
        return
    if shape.kind == "disc":
        diameter = min(width, height)
        image.paste(shape.color, (left, top, left + diameter, top + diameter), _disc_mask(diameter))
        return
    radius = max(1, min(round(shape.radius), width // 2, height // 2))
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    draw.rectangle((radius, 0, width - radius - 1, height - 1), fill=255)
    draw.rectangle((0, radius, width - 1, height - radius - 1), fill=255)
    corner = _disc_mask(2 * radius)
    for x, y in (
        (0, 0),
        (width - 2 * radius, 0),
        (0, height - 2 * radius),
        (width - 2 * radius, height - 2 * radius),
    ):
        region = mask.crop((x, y, x + 2 * radius, y + 2 * radius))
        mask.paste(ImageChops.lighter(region, corner), (x, y))
    image.paste(shape.color, (left, top, right, bottom), mask)


def _paint_text(draw: ImageDraw.ImageDraw, placed: _PlacedText) -> None:
    block = placed.block
    style = block.style
    primary = face(font_chain(style.bold)[0], block.size)
    ascent, descent = primary.getmetrics()
    baseline = placed.top + (block.line_px - ascent - descent) / 2 + ascent
    for line in block.lines:
        runs = shape_line(line, style.bold, block.size, block.rtl)
        width = sum(run.width for run in runs)
        if style.align == "center":
            x = (placed.left + placed.right - width) / 2
        elif block.rtl:
            x = placed.right - width
        else:
            x = placed.left
        for run in runs:
            direction = ("rtl" if run.rtl else "ltr") if RAQM else None
            draw.text(
                (x, baseline),
                run.text,
                fill=style.color,
                font=face(run.font, block.size),
                anchor="ls",
                direction=direction,
            )
            x += run.width
        baseline += block.line_px


def _encode(image: Image.Image, fmt: ImageFormat) -> bytes:
    buffer = io.BytesIO()
    if fmt == "png":
        image.save(buffer, format="PNG", optimize=False, compress_level=6)
    else:
        image.save(
            buffer,
            format="JPEG",
            quality=JPEG_QUALITY,
            subsampling=0,
            optimize=False,
            progressive=False,
        )
    return buffer.getvalue()


def check_fits(request: CardRequest) -> None:
    """Raise CardTextError (overflow or undrawable text) exactly when render_card would."""
    _layout(request)


def render_card(request: CardRequest) -> RenderedImage:
    """Render the card; the same request always gives the same bytes."""
    layout = _layout(request)
    image = _background(layout.width, layout.height)
    for shape in layout.shapes:
        _paint_shape(image, shape)
    draw = ImageDraw.Draw(image)
    for placed in layout.texts:
        _paint_text(draw, placed)
    data = _encode(image, request.fmt)
    return RenderedImage(data, request.fmt, layout.width, layout.height, CONTENT_TYPES[request.fmt])


__all__ = [
    "CONTENT_TYPES",
    "DEFAULT_HEIGHT",
    "DEFAULT_WIDTH",
    "FIELD_MAX_LENGTHS",
    "JPEG_QUALITY",
    "MAX_ITEM_LENGTH",
    "MAX_LIST_ITEMS",
    "MAX_SIZE",
    "MIN_SIZE",
    "TEMPLATE_FIELDS",
    "CardRequest",
    "CardTextError",
    "CardTextOverflow",
    "CardTextUnsupported",
    "ImageFormat",
    "RenderedImage",
    "Template",
    "check_fits",
    "render_card",
    "validate_fields",
    "validate_size",
]
