"""Card renderer and font fallback: determinism, output format, layout, Unicode, limits."""

from __future__ import annotations

import io
import itertools
import multiprocessing
import os
import pickle
import shutil
import struct
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor

import pytest
from PIL import Image

from satsgate.engines.local import fonts
from satsgate.engines.local.cards import (
    DEFAULT_HEIGHT,
    DEFAULT_WIDTH,
    FIELD_MAX_LENGTHS,
    MAX_ITEM_LENGTH,
    MAX_LIST_ITEMS,
    MAX_SIZE,
    MIN_SIZE,
    CardRequest,
    CardTextOverflow,
    CardTextUnsupported,
    RenderedImage,
    check_fits,
    render_card,
)
from satsgate.engines.local.fonts import FontsMissing, font_chain, missing_glyphs, split_runs
from tests.conftest import skip_unless_ci

EXAMPLES: Mapping[str, dict[str, str | list[str]]] = {
    "headline": {"title": "Lightning pays per call", "subtitle": "No accounts, no keys."},
    "versus": {"left": "On-chain", "right": "Lightning", "title": "Settlement"},
    "list": {"title": "Why", "items": ["Instant", "Cheap", "Private"]},
    "stat": {"value": "21M", "label": "bitcoin, ever"},
    "quote": {"text": "Running bitcoin.", "author": "Hal Finney"},
}

SCRIPT_PAIRS = {
    # Two different strings of equal length per script: real glyphs draw them differently,
    # while missing glyphs would draw identical .notdef boxes.
    "greek": ("ΑΒΓΔΕ", "ΖΗΘΙΚ"),
    "cyrillic": ("АБВГД", "ЖЗИЙК"),
    "arabic": ("ابتثج", "حخدذر"),
    "hebrew": ("אבגדה", "וזחטי"),
    "devanagari": ("कखगघङ", "चछजझञ"),
}
CJK_PAIR = ("中文字体测", "日本語漢字")


def _image(card: RenderedImage) -> Image.Image:
    image = Image.open(io.BytesIO(card.data))
    image.load()
    return image


def _ink(card: RenderedImage) -> Image.Image:
    """Mask of the light (text) pixels; the background and the orange accent stay dark."""
    return _image(card).convert("L").point(lambda value: 255 if value > 180 else 0)


def _has_cjk_font() -> bool:
    return not missing_glyphs("".join(CJK_PAIR), font_chain())


def _headline(title: str, width: int = 600, height: int = 315) -> RenderedImage:
    return render_card(CardRequest("headline", "png", width, height, {"title": title}))


# ---------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("template", sorted(EXAMPLES))
def test_same_request_gives_same_png_bytes(template: str) -> None:
    request = CardRequest(template, "png", fields=EXAMPLES[template])  # type: ignore[arg-type]
    assert render_card(request).data == render_card(request).data


def test_same_request_gives_same_jpeg_bytes() -> None:
    request = CardRequest("quote", "jpeg", fields=EXAMPLES["quote"])
    assert render_card(request).data == render_card(request).data


def _render_in_child(request: CardRequest) -> RenderedImage:
    return render_card(request)


def test_fresh_process_renders_identical_bytes() -> None:
    request = CardRequest("headline", "png", fields={"title": "Déjà vu Ελλάδα مرحبا"})
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        remote = pool.submit(_render_in_child, request).result(timeout=60)
    assert remote == render_card(request)


# ---------------------------------------------------------------------------- output format


def _png_chunk_types(data: bytes) -> list[bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    types, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        types.append(data[offset + 4 : offset + 8])
        offset += 12 + length
    return types


def test_png_default_size_and_no_metadata_chunks() -> None:
    card = render_card(CardRequest("stat", fields=EXAMPLES["stat"]))
    image = _image(card)
    assert (card.fmt, card.content_type) == ("png", "image/png")
    assert image.format == "PNG"
    assert image.size == (DEFAULT_WIDTH, DEFAULT_HEIGHT) == (card.width, card.height)
    assert image.mode == "RGB"
    assert set(_png_chunk_types(card.data)) == {b"IHDR", b"IDAT", b"IEND"}


def test_jpeg_size_quality_90_and_no_exif() -> None:
    card = render_card(CardRequest("list", "jpeg", 800, 800, EXAMPLES["list"]))
    image = _image(card)
    assert (card.fmt, card.content_type) == ("jpeg", "image/jpeg")
    assert image.format == "JPEG"
    assert image.size == (800, 800)
    assert not image.getexif()
    assert b"Exif" not in card.data
    reference = io.BytesIO()
    Image.new("RGB", (8, 8)).save(reference, "JPEG", quality=90, subsampling=0)
    assert image.quantization == Image.open(reference).quantization  # type: ignore[attr-defined]


@pytest.mark.parametrize(("width", "height"), [(MIN_SIZE, MIN_SIZE), (MAX_SIZE, MIN_SIZE)])
def test_extreme_sizes_render_at_requested_size(width: int, height: int) -> None:
    card = render_card(CardRequest("headline", "png", width, height, {"title": "Edge"}))
    assert _image(card).size == (width, height)


# ---------------------------------------------------------------------------- text and layout


def test_different_text_gives_different_bytes() -> None:
    assert _headline("Hello").data != _headline("Hellp").data


def test_newline_is_a_line_break() -> None:
    one_line = _ink(_headline("Top Bottom")).getbbox()
    two_lines = _ink(_headline("Top\nBottom")).getbbox()
    assert one_line is not None and two_lines is not None
    assert two_lines[3] - two_lines[1] > 1.5 * (one_line[3] - one_line[1])


@pytest.mark.parametrize(
    "title",
    [" ".join(["wrapping"] * 22)[:200], "W" * 200],
    ids=["many-words", "one-overlong-word"],
)
def test_long_title_wraps_inside_the_margins(title: str) -> None:
    card = _headline(title, DEFAULT_WIDTH, DEFAULT_HEIGHT)
    assert _image(card).size == (DEFAULT_WIDTH, DEFAULT_HEIGHT)
    box = _ink(card).getbbox()
    assert box is not None
    left, top, right, bottom = box
    margin = 78  # horizontal margin of a 1200x630 card
    assert margin - 4 <= left and right <= DEFAULT_WIDTH - margin + 4
    assert bottom - top > 200  # several lines, not one shrunk line


def test_rtl_title_is_right_aligned_and_ltr_left_aligned() -> None:
    ltr = _ink(_headline("hello", DEFAULT_WIDTH, DEFAULT_HEIGHT)).getbbox()
    rtl = _ink(_headline("שלום", DEFAULT_WIDTH, DEFAULT_HEIGHT)).getbbox()
    assert ltr is not None and rtl is not None
    assert ltr[0] < 100 and ltr[2] < DEFAULT_WIDTH / 2
    assert rtl[0] > DEFAULT_WIDTH / 2 and rtl[2] > DEFAULT_WIDTH - 100


@pytest.mark.parametrize("script", sorted(SCRIPT_PAIRS))
def test_non_latin_scripts_draw_real_glyphs(script: str) -> None:
    first, second = SCRIPT_PAIRS[script]
    assert missing_glyphs(first + second, font_chain()) == ""
    assert missing_glyphs(first + second, font_chain(bold=True)) == ""
    drawn = _headline(first)
    assert drawn.data != _headline(second).data
    assert _ink(drawn).histogram()[255] > 4 * _ink(_headline(".")).histogram()[255]


def test_cjk_draws_real_glyphs_when_a_cjk_font_is_installed() -> None:
    if not _has_cjk_font():
        skip_unless_ci("no CJK font installed (apt-get install fonts-wqy-microhei)")
    first, second = CJK_PAIR
    assert _headline(first).data != _headline(second).data


def test_undrawable_characters_are_refused_naming_the_field() -> None:
    request = CardRequest("quote", fields={"text": "ok", "author": "private \ue000 use"})
    with pytest.raises(CardTextUnsupported) as caught:
        check_fits(request)
    assert caught.value.field == "author"
    assert "U+E000" in str(caught.value)
    with pytest.raises(CardTextUnsupported):
        render_card(CardRequest("headline", fields={"title": "bell \x07"}))


# ---------------------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    ("template", "fields", "field"),
    [
        (
            "list",
            {"title": "T", "items": ["word " * 31 + "end"] * MAX_LIST_ITEMS},
            "items",
        ),
        ("quote", {"text": "lorem ipsum " * 83}, "text"),
        ("versus", {"left": "x" * 120, "right": "y"}, "left"),
    ],
)
def test_text_that_cannot_fit_raises_overflow_naming_the_field(
    template: str, fields: dict[str, str | list[str]], field: str
) -> None:
    request = CardRequest(template, "png", MIN_SIZE, MIN_SIZE, fields)  # type: ignore[arg-type]
    with pytest.raises(CardTextOverflow) as caught:
        check_fits(request)
    assert caught.value.field == field
    assert f"'{field}'" in str(caught.value)
    with pytest.raises(CardTextOverflow):
        render_card(request)


def test_maximum_lengths_fit_the_default_card() -> None:
    item = ("satoshi " * 20)[:MAX_ITEM_LENGTH]
    check_fits(CardRequest("list", fields={"title": "t " * 100, "items": [item] * 12}))
    check_fits(CardRequest("quote", fields={"text": "words " * 166, "author": "a" * 120}))
    check_fits(CardRequest("headline", fields={"title": "t" * 200, "subtitle": "s " * 150}))
    check_fits(CardRequest("versus", fields={"title": "v " * 100, "left": "l" * 120, "right": "r"}))


def test_errors_survive_pickling_for_the_process_pool() -> None:
    overflow = pickle.loads(pickle.dumps(CardTextOverflow("title", 14)))
    unsupported = pickle.loads(pickle.dumps(CardTextUnsupported("text", "\ue000")))
    missing = pickle.loads(pickle.dumps(FontsMissing("none")))
    assert (overflow.field, overflow.min_px) == ("title", 14)
    assert (unsupported.field, unsupported.chars) == ("text", "\ue000")
    assert "fonts-dejavu-core" in str(missing)


# ---------------------------------------------------------------------------- validation


def test_exported_limits() -> None:
    assert (MIN_SIZE, MAX_SIZE, DEFAULT_WIDTH, DEFAULT_HEIGHT) == (200, 4096, 1200, 630)
    assert dict(FIELD_MAX_LENGTHS) == {
        "title": 200,
        "subtitle": 300,
        "left": 120,
        "right": 120,
        "value": 40,
        "label": 200,
        "text": 1000,
        "author": 120,
    }
    assert (MAX_LIST_ITEMS, MAX_ITEM_LENGTH) == (12, 160)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"width": MIN_SIZE - 1}, "width"),
        ({"height": MAX_SIZE + 1}, "height"),
        ({"width": True}, "width"),
        ({"fmt": "gif"}, "format"),
        ({"template": "poster"}, "template"),
        ({"fields": {}}, "needs field 'title'"),
        ({"fields": {"title": "x", "colour": "red"}}, "no field 'colour'"),
        ({"fields": {"title": "   "}}, "empty"),
        ({"fields": {"title": "x" * 201}}, "longer than 200"),
        ({"fields": {"title": ["x"]}}, "string"),
    ],
)
def test_invalid_requests_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"template": "headline", "fields": {"title": "ok"}, **kwargs}
    with pytest.raises(ValueError, match=message):
        CardRequest(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "non-empty"),
        (["x"] * (MAX_LIST_ITEMS + 1), "more than 12"),
        (["x" * (MAX_ITEM_LENGTH + 1)], r"items\[0\]"),
    ],
)
def test_invalid_list_items(items: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CardRequest("list", fields={"title": "t", "items": items})


def test_requests_and_results_pickle() -> None:
    request = CardRequest("list", "jpeg", 640, 480, {"title": "t", "items": ["a", "b"]})
    assert pickle.loads(pickle.dumps(request)) == request
    card = RenderedImage(b"x", "png", 1, 1, "image/png")
    assert pickle.loads(pickle.dumps(card)) == card


# ---------------------------------------------------------------------------- fonts


def test_chain_starts_with_dejavu_then_noto() -> None:
    regular, bold = font_chain(), font_chain(bold=True)
    assert os.path.basename(regular[0].path) == "DejaVuSans.ttf"
    assert os.path.basename(bold[0].path) == "DejaVuSans-Bold.ttf"
    assert any("NotoSans" in os.path.basename(face.path) for face in regular[1:])
    assert all(os.path.isfile(face.path) for face in regular)


def test_runs_rejoin_to_the_text_and_use_fonts_having_the_glyphs() -> None:
    text = "Price: 5 sats — Ελλάδα कखग שלום!"
    chain = font_chain()
    runs = split_runs(text, chain)
    assert "".join(run.text for run in runs) == text
    assert all(first.font != second.font for first, second in itertools.pairwise(runs))
    for run in runs:
        assert all(ord(char) in fonts.font_codepoints(run.font) for char in run.text)
    devanagari = next(run for run in runs if "क" in run.text)
    assert "Devanagari" in devanagari.font.path


def test_cjk_font_comes_last_in_the_chain() -> None:
    if not _has_cjk_font():
        skip_unless_ci("no CJK font installed (apt-get install fonts-wqy-microhei)")
    assert fonts.font_for_char("中", font_chain()) == font_chain()[-1]


@pytest.fixture
def empty_font_cache() -> Iterator[None]:
    cached = (fonts._font_index, fonts._fc_match, fonts.font_chain)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


@pytest.mark.usefixtures("empty_font_cache")
def test_no_font_anywhere_raises_fonts_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setattr(fonts, "FONT_ROOTS", (tmp_path,))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(FontsMissing, match="fonts-dejavu-core"):
        font_chain()


@pytest.mark.usefixtures("empty_font_cache")
def test_fc_match_is_the_fallback_when_the_scan_finds_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    if shutil.which("fc-match") is None:
        pytest.skip("fontconfig's fc-match is not installed")
    monkeypatch.setattr(fonts, "FONT_ROOTS", (tmp_path,))
    chain = font_chain()
    assert len(chain) == 1
    assert os.path.isfile(chain[0].path)
