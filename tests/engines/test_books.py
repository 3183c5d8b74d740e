"""Books for epub-audiobook: chapters numbered as the price counts them, auto-selection,
the annexe of what is not read aloud, and each sanity check failing on its own defect."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader

from satsgate.domain.media import measure_book
from satsgate.engines.audiobook import ChapterMark
from satsgate.engines.local import book as books
from satsgate.engines.local.narration import ffmetadata, metadata_value, split_text
from tests.epub_maker import Doc, chapter, make_epub, nav_doc, prose

HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def sample_epub() -> bytes:
    table = "<table><tr><th>Year</th><th>Wheat</th></tr><tr><td>1901</td><td>12 t</td></tr></table>"
    return make_epub(
        "The Mill",
        [
            Doc("cover.xhtml", "<img src='cover.jpg' alt='cover'/>", "Cover", epub_type="cover"),
            nav_doc(["One", "Two"]),
            chapter(0, "Chapter One", prose(120, 1), table),
            chapter(1, "Chapter Two", [*prose(80, 2), f"The checksum was {HASH} on the day."]),
            Doc("notes.xhtml", "<h1>Notes</h1><p>Aside.</p>", "Notes", linear=False),
            Doc("c9.xhtml", "<p>The end.</p>", "End"),
        ],
    )


def test_epub_chapters_are_numbered_as_the_price_counts_them() -> None:
    data = sample_epub()
    book = books.read_book(data, "mill.epub")
    measured = measure_book(data, "mill.epub")
    assert [c.priced_chars for c in book.chapters] == list(measured.chapters)
    assert book.title == "The Mill"
    assert [c.title for c in book.chapters][2:4] == ["Chapter One", "Chapter Two"]


def test_auto_selection_skips_front_matter_and_short_pieces() -> None:
    book = books.read_book(sample_epub(), "mill.epub")
    selection = books.select_chapters(book, None)
    assert selection.chosen == (2, 3)
    reasons = dict(selection.skipped)
    assert reasons[0] == "cover" and reasons[1] == "table of contents"
    assert reasons[4] == "outside the reading order" and reasons[5] == "too short"
    explicit = books.select_chapters(book, [5, 3, 3])
    assert explicit.chosen == (3, 5) and explicit.explicit


def test_tables_and_hashes_go_to_the_numbered_annexe() -> None:
    book = books.read_book(sample_epub(), "mill.epub")
    told = books.narration(book, books.select_chapters(book, None))
    assert [(e.number, e.item.kind) for e in told.annexe] == [(1, "table"), (2, "key or hash")]
    assert told.annexe[0].item.rows == (("Year", "Wheat"), ("1901", "12 t"))
    assert told.annexe[1].item.text == HASH
    one, two = (text for _title, text in told.chapters)
    assert "A table: see annexe entry 1." in one and "1901" not in one
    assert "a key, annexe entry 2," in two and HASH not in two
    pdf = books.annexe_pdf(book.title, told.annexe)
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf.data)).pages)
    assert "1. Table (Chapter One)" in text and "1901" in text
    assert HASH[:20] in text.replace("\n", "")


@pytest.mark.parametrize(
    ("paragraph", "check"),
    [
        ("The caf&amp;eacute; &amp; the bar &amp;mdash; and &amp;nbsp; more " * 3, "html_entities"),
        ("Ã©tÃ© Ã  la plage, câ€™est lâ€™Ã©tÃ© " * 3, "mojibake"),
        (" ".join(["der Hund und die Katze sind in dem Haus mit der Frau"] * 20), "wrong_language"),
    ],
)
def test_each_sanity_check_fails_on_its_own_defect(paragraph: str, check: str) -> None:
    good = chapter(0, "Fine", prose(200, 3))
    bad = chapter(1, "Broken", [*prose(30, 4), paragraph])
    book = books.read_book(make_epub("B", [good, bad]), "b.epub")
    failures = books.quality_failures(book, books.select_chapters(book, None), "en")
    assert [(f["chapter"], f["check"]) for f in failures] == [(1, check)], failures
    clean = books.read_book(make_epub("B", [good]), "b.epub")
    assert books.quality_failures(clean, books.select_chapters(clean, None), "en") == []


def test_overlap_and_empty_selected_chapters_fail() -> None:
    text = prose(150, 5)
    book = books.read_book(
        make_epub("B", [chapter(0, "A", text), chapter(1, "B", text), Doc("e.xhtml", "", "E")]),
        "b.epub",
    )
    failures = books.quality_failures(book, books.select_chapters(book, [0, 1, 2]), "en")
    assert [(f["chapter"], f["check"]) for f in failures] == [(1, "parser_overlap"), (2, "empty")]


def test_txt_and_pdf_books() -> None:
    txt = ("Part One\n" + "\n\n".join(prose(60, 6)) + "\n\n\n" + "\n\n".join(prose(60, 7))).encode()
    book = books.read_book(txt, "b.txt")
    assert [c.priced_chars for c in book.chapters] == list(measure_book(txt, "b.txt").chapters)
    assert book.chapters[0].title == "Part One" and book.chapters[1].title == "Part 2"
    from satsgate.engines.local.pdf import markdown_to_pdf

    pdf = markdown_to_pdf("\n\n".join(prose(100, 8)) + "\n\nSee https://example.org/x for more.")
    book = books.read_book(pdf.data, "b.pdf")
    assert len(book.chapters) == len(measure_book(pdf.data, "b.pdf").chapters)
    told = books.narration(book, books.select_chapters(book, None))
    assert told.chapters[0][0] == "Pages 1 to 1"
    assert [e.item.text for e in told.annexe] == ["https://example.org/x"]


def test_narration_parts_and_chapter_metadata() -> None:
    text = "\n\n".join(prose(3000, 9))
    parts = split_text(text, 2000)
    assert all(len(p) <= 2000 for p in parts) and len(parts) > 5
    assert " ".join(" ".join(p.split()) for p in parts) == " ".join(text.split())
    assert metadata_value("a=b;c#d\\e\nf") == "a\\=b\\;c\\#d\\\\e\\\nf"
    meta = ffmetadata("T", [ChapterMark("One", 0, 1.5), ChapterMark("Two", 1.5, 3.25)])
    assert meta.splitlines()[:2] == [";FFMETADATA1", "title=T"]
    assert "START=1500\nEND=3250\ntitle=Two" in meta
