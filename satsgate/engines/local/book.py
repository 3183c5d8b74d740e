"""Books for epub-audiobook: chapters read out of an EPUB, PDF or TXT file, the chapters
to narrate, the sanity checks the spec names, and the annexe of what is not read aloud.

Chapters are numbered exactly as the price counts them (``domain.media.measure_book``):
an EPUB's spine items, a PDF's pages, a TXT file's parts between runs of two blank lines;
``selectedChapterIndices`` and the charge refer to those numbers.

What is not read aloud goes into the annexe, numbered, and the narration says where:
tables, equations (MathML), preformatted blocks (code), web and e-mail addresses, and
long keys or hashes (a run of 24 or more letters and digits with both in it). The
annexe is a PDF (WeasyPrint), built only when there is an entry.

All of it is synchronous CPU work on untrusted input: the service runs it in the
process pool (``ctx.run_cpu``).
"""

from __future__ import annotations

import html
import html.parser
import io
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field

from pypdf import PdfReader

from satsgate.domain.media import MediaError, html_visible_chars, read_epub, visible_chars
from satsgate.engines.local.pdf import RenderedPdf, html_to_pdf

# -- what a book is made of --------------------------------------------------------------------


@dataclass(frozen=True)
class AnnexeItem:
    kind: str  # table, equation, code, address, key or hash
    text: str  # plain text (a table: its rows, cells separated by " | ")
    rows: tuple[tuple[str, ...], ...] = ()  # a table's cells


@dataclass
class BookChapter:
    index: int  # as priced: spine item, PDF page, TXT part
    title: str
    has_heading: bool  # the title came from the chapter itself
    # Narrated text with annexe markers "\ue000k\ue001" (k: the index into ``items``).
    paragraphs: list[str]
    items: list[AnnexeItem] = field(default_factory=list)
    # Why auto-selection passes it over ("table of contents", ...); "" for content.
    front_matter: str = ""
    priced_chars: int = 0  # visible characters as the price counts them

    @property
    def words(self) -> int:
        return sum(len(_MARK.sub(" ", p).split()) for p in self.paragraphs)

    @property
    def plain(self) -> str:
        return "\n\n".join(_MARK.sub(" ", p) for p in self.paragraphs)


@dataclass
class Book:
    format: str
    title: str | None
    chapters: list[BookChapter]
    # A PDF's outline: page index -> title of the section that starts there.
    sections: dict[int, str] = field(default_factory=dict)


_MARK = re.compile("\ue000(\\d+)\ue001")
_SKIP = frozenset({"script", "style", "head", "svg", "template", "noscript"})
_BLOCK = frozenset({
    "p", "div", "li", "ul", "ol", "dl", "dt", "dd", "blockquote", "section", "article",
    "aside", "header", "footer", "nav", "figure", "figcaption", "br", "hr", "h1", "h2",
    "h3", "h4", "h5", "h6", "tr", "body", "caption",
})  # fmt: skip
_HEADINGS = frozenset({"h1", "h2", "h3"})
_CAPTURED = {"table": "table", "math": "equation", "pre": "code"}
_FRONT_TYPES = {
    "toc": "table of contents", "cover": "cover", "titlepage": "title page",
    "copyright-page": "copyright page", "index": "index", "landmarks": "table of contents",
    "loi": "list of illustrations", "lot": "list of tables",
}  # fmt: skip
_FRONT_TITLES = re.compile(
    r"^\s*(table of contents|contents|copyright|index|cover|title page|list of "
    r"(illustrations|figures|tables))\s*$",
    re.IGNORECASE,
)
# Inline material that is read badly: addresses, keys and hashes.
_INLINE = re.compile(
    r"(?P<address>\bhttps?://[^\s<>\"]+|\bwww\.[^\s<>\"]+\.[a-z]{2,}[^\s<>\"]*"
    r"|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b)"
    r"|(?P<key>\b(?=[A-Za-z0-9+/=_-]*\d)(?=[A-Za-z0-9+/=_-]*[A-Za-z])[A-Za-z0-9+/=_-]{24,})",
)


class _ChapterParser(html.parser.HTMLParser):
    """One XHTML document -> paragraphs with annexe markers, headings, front-matter hints."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.items: list[AnnexeItem] = []
        self.headings: list[str] = []
        self.doc_title = ""
        self.front = ""
        self._line: list[str] = []
        self._skip = 0
        self._in_title = False
        self._heading: list[str] | None = None
        self._capture: str | None = None  # the tag being captured (table, math, pre)
        self._capture_depth = 0
        self._capture_text: list[str] = []
        self._rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._alttext = ""

    def _flush(self) -> None:
        text = " ".join("".join(self._line).split())
        if text:
            self.paragraphs.append(text)
        self._line = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k.lower(): v or "" for k, v in attrs}
        kind = attributes.get("epub:type", "") or attributes.get("role", "")
        for word in kind.replace("doc-", "").split():
            if word in _FRONT_TYPES and not self.front:
                self.front = _FRONT_TYPES[word]
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP:
            self._skip += 1
            return
        if self._capture is not None:
            if tag == self._capture:
                self._capture_depth += 1
            if self._capture == "table":
                if tag == "tr":
                    self._rows.append([])
                elif tag in ("td", "th"):
                    self._cell = []
            return
        if tag in _CAPTURED:
            self._flush()
            self._capture, self._capture_depth = tag, 1
            self._capture_text, self._rows, self._cell = [], [], None
            self._alttext = attributes.get("alttext", "")
            return
        if tag in _BLOCK:
            self._flush()
        if tag in _HEADINGS and self._heading is None:
            self._heading = []
        if tag == "img":
            return

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if self._capture is not None:
            if self._capture == "table" and tag in ("td", "th") and self._cell is not None:
                if self._rows:
                    self._rows[-1].append(" ".join("".join(self._cell).split()))
                self._cell = None
            if tag == self._capture:
                self._capture_depth -= 1
                if self._capture_depth == 0:
                    self._end_capture()
            return
        if tag in _HEADINGS and self._heading is not None:
            heading = " ".join("".join(self._heading).split())
            if heading:
                self.headings.append(heading)
            self._heading = None
        if tag in _BLOCK:
            self._flush()

    def _end_capture(self) -> None:
        kind = _CAPTURED[self._capture or ""]
        self._capture = None
        if kind == "table":
            rows = tuple(tuple(r) for r in self._rows if any(c for c in r))
            text = "\n".join(" | ".join(r) for r in rows)
            item = AnnexeItem("table", text, rows)
        elif kind == "equation":
            text = self._alttext or " ".join("".join(self._capture_text).split())
            item = AnnexeItem("equation", text)
        else:
            item = AnnexeItem("code", "".join(self._capture_text).strip("\n"))
        if not item.text.strip():
            return
        self.items.append(item)
        self.paragraphs.append(f"\ue000{len(self.items) - 1}\ue001")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.doc_title += data
            return
        if self._skip:
            return
        if self._capture is not None:
            self._capture_text.append(data)
            if self._cell is not None:
                self._cell.append(data)
            return
        self._line.append(data)
        if self._heading is not None:
            self._heading.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def _inline_items(paragraphs: list[str], items: list[AnnexeItem]) -> list[str]:
    """Addresses, keys and hashes of the text moved to the annexe, a marker in their place."""

    def move(match: re.Match[str]) -> str:
        token = match.group(0).rstrip(".,;:)")
        tail = match.group(0)[len(token) :]
        kind = "address" if match.group("address") else "key or hash"
        items.append(AnnexeItem(kind, token))
        return f"\ue000{len(items) - 1}\ue001{tail}"

    return [_INLINE.sub(move, p) if _MARK.fullmatch(p) is None else p for p in paragraphs]


def _chapter_from_markup(index: int, markup: str, front: str = "") -> BookChapter:
    parser = _ChapterParser()
    parser.feed(markup)
    parser.close()
    items = list(parser.items)
    paragraphs = _inline_items(parser.paragraphs, items)
    title = parser.headings[0] if parser.headings else " ".join(parser.doc_title.split())
    chapter = BookChapter(
        index, title or f"Section {index + 1}", bool(parser.headings), paragraphs, items,
        front or parser.front, html_visible_chars(markup),
    )  # fmt: skip
    if not chapter.front_matter and _FRONT_TITLES.match(chapter.title):
        chapter.front_matter = chapter.title.strip().lower()
    return chapter


def _read_epub(data: bytes) -> Book:
    title, documents = read_epub(data)
    chapters: list[BookChapter] = []
    for document in documents:
        front = ""
        if "nav" in document.item.get("properties", "").split():
            front = "table of contents"
        elif document.itemref.get("linear", "yes") == "no":
            front = "outside the reading order"
        chapters.append(_chapter_from_markup(len(chapters), document.markup, front))
    if not chapters:
        raise MediaError("EPUB with an empty spine")
    return Book("epub", title, chapters)


def _pdf_paragraphs(text: str) -> list[str]:
    text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)  # words hyphenated across lines
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _read_pdf(data: bytes) -> Book:
    reader = PdfReader(io.BytesIO(data), strict=False)
    chapters = []
    for index, page in enumerate(reader.pages):
        try:
            text = page.extract_text() or ""
        except Exception:  # a page whose text cannot be extracted has none to narrate
            text = ""
        items: list[AnnexeItem] = []
        paragraphs = _inline_items(_pdf_paragraphs(text), items)
        chapters.append(
            BookChapter(index, f"Page {index + 1}", False, paragraphs, items, "",
                        visible_chars(text))
        )  # fmt: skip
    sections: dict[int, str] = {}
    try:
        for entry in reader.outline:
            if isinstance(entry, list):
                continue  # sub-sections: the top level makes the chapters
            start = reader.get_destination_page_number(entry)
            if start is not None and 0 <= start < len(chapters):
                sections.setdefault(start, " ".join(str(entry.title).split()))
    except Exception:  # a broken outline: pages are grouped by tens instead
        sections = {}
    title = None
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:
        title = None
    return Book("pdf", title or None, chapters, sections)


def _read_txt(data: bytes) -> Book:
    text = data.decode("utf-8", errors="replace")
    parts = [p for p in text.split("\n\n\n") if p.strip()] or [""]
    chapters = []
    for index, part in enumerate(parts):
        lines = [line.strip() for line in part.strip().splitlines()]
        first = lines[0] if lines else ""
        heading = 0 < len(first) <= 80 and not first.endswith((".", ",", ";"))
        body = "\n".join(lines[1:] if heading and len(lines) > 1 else lines)
        items: list[AnnexeItem] = []
        paragraphs = _inline_items(
            [" ".join(p.split()) for p in re.split(r"\n\s*\n", body) if p.strip()], items
        )
        chapters.append(
            BookChapter(index, first if heading else f"Part {index + 1}", heading, paragraphs,
                        items, "", visible_chars(part))
        )  # fmt: skip
    return Book("txt", None, chapters)


def read_book(data: bytes, file_name: str) -> Book:
    """The book's chapters (numbered as the price counts them); MediaError if unreadable."""
    ext = posixpath.splitext(file_name.lower())[1]
    try:
        if ext == ".epub":
            return _read_epub(data)
        if ext == ".pdf":
            return _read_pdf(data)
        if ext == ".txt":
            return _read_txt(data)
    except MediaError:
        raise
    except Exception as exc:  # corrupt members, broken PDF objects, ...
        raise MediaError(f"the book cannot be read: {type(exc).__name__}") from None
    raise MediaError("fileName must end in .epub, .pdf or .txt")


# -- which chapters ------------------------------------------------------------------------

MIN_AUTO_WORDS = 20  # shorter chapters (title pages, dedications, "Part One") are skipped


@dataclass(frozen=True)
class Selection:
    chosen: tuple[int, ...]  # chapter indices to narrate, in book order
    skipped: tuple[tuple[int, str], ...]  # auto-selection: (index, why)
    explicit: bool


def select_chapters(book: Book, indices: list[int] | None) -> Selection:
    """The caller's chapters, or the content chapters: front matter (table of contents,
    cover, title and copyright pages, index, what the spine marks non-linear) and chapters
    under MIN_AUTO_WORDS words are left out, unless that leaves nothing."""
    if indices is not None:
        return Selection(tuple(sorted(set(indices))), (), True)
    chosen, skipped = [], []
    for chapter in book.chapters:
        if chapter.front_matter:
            skipped.append((chapter.index, chapter.front_matter))
        elif chapter.words < MIN_AUTO_WORDS and not chapter.items:
            skipped.append((chapter.index, "empty" if not chapter.words else "too short"))
        else:
            chosen.append(chapter.index)
    if not chosen:  # a book of short pieces: read every one that has words
        chosen = [c.index for c in book.chapters if c.words]
        skipped = [(c.index, "empty") for c in book.chapters if not c.words]
    return Selection(tuple(chosen), tuple(skipped), False)


# -- sanity checks (BOOK_QUALITY_CHECK_FAILED) -----------------------------------------------

_ENTITY = re.compile(r"&(?:[A-Za-z]{2,8}|#\d{2,7}|#[xX][0-9A-Fa-f]{2,6});")
_MOJIBAKE = re.compile("Ã[\u0080-\u00bf]|â€[\u0080-\u00bf\u2018-\u203a]|Â[\u00a0-\u00bf]|\ufffd")
_STOPWORDS = {
    "en": "the and of to a in is that it was he for on with as his they at be this from "
    "have not by but had she you are her which",
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als "
    "auch es an er hat aus bei sie",
    "fr": "le la les de des et en un une du est que qui dans pour pas sur il au avec ne se "
    "par plus elle sont ce",
    "es": "el la de que y en los se del las un por con no una su para es al lo como más "
    "pero sus le ya",
    "it": "il di che e la per un in non una del è le si da con sono gli della al come ma "
    "lo alla dei nel",
    "pt": "de que e o a do da em um para é com não uma os no se na por mais as dos como mas "
    "foi ao ele",
    "nl": "de en van het een in is dat op te zijn met voor niet aan er die ook als bij "
    "door maar om dan",
}
_STOPWORD_SETS = {code: frozenset(words.split()) for code, words in _STOPWORDS.items()}
MIN_LANGUAGE_WORDS = 150


def stopword_shares(text: str) -> dict[str, float]:
    words = re.findall(r"[^\W\d_]+", text.lower())
    if not words:
        return {}
    counts = Counter(words)
    return {
        code: sum(n for w, n in counts.items() if w in stop) / len(words)
        for code, stop in _STOPWORD_SETS.items()
    }


def quality_failures(book: Book, selection: Selection, language: str) -> list[dict[str, object]]:
    """The spec's sanity checks on the chapters to narrate: empty chapters, undecoded HTML
    entities, mojibake, the same text twice (a parser overlap), a language other than the
    narration language. One entry per failing chapter and check (``smoke_failures``)."""
    failures: list[dict[str, object]] = []

    def fail(chapter: BookChapter, check: str, detail: str) -> None:
        failures.append(
            {"chapter": chapter.index, "title": chapter.title, "check": check, "detail": detail}
        )

    by_index = {c.index: c for c in book.chapters}
    seen_paragraphs: dict[str, int] = {}
    for index in selection.chosen:
        chapter = by_index[index]
        text = chapter.plain
        if not chapter.words and not chapter.items:
            fail(chapter, "empty", "the chapter has no text to read")
            continue
        scale = max(1, len(text) // 2000)
        entities = _ENTITY.findall(text)
        if len(entities) >= 3 * scale:
            fail(chapter, "html_entities",
                 f"{len(entities)} undecoded HTML entities, e.g. {entities[0]}")  # fmt: skip
        garbled = _MOJIBAKE.findall(text)
        if len(garbled) >= 3 * scale:
            fail(chapter, "mojibake",
                 f"{len(garbled)} mis-decoded characters, e.g. {garbled[0]!r}")  # fmt: skip
        long_paragraphs = [p for p in chapter.paragraphs if len(p) >= 80]
        repeated = [p for p in long_paragraphs if p in seen_paragraphs]
        if long_paragraphs and len(repeated) * 2 >= len(long_paragraphs):
            fail(chapter, "parser_overlap",
                 f"{len(repeated)} of its {len(long_paragraphs)} paragraphs already appear in "
                 f"chapter {seen_paragraphs[repeated[0]]}")  # fmt: skip
        for p in long_paragraphs:
            seen_paragraphs.setdefault(p, index)
        if language in _STOPWORD_SETS and chapter.words >= MIN_LANGUAGE_WORDS:
            shares = stopword_shares(text)
            other = max((c for c in shares if c != language), key=lambda c: shares[c])
            if shares[other] >= 0.15 and shares[language] < shares[other] / 2:
                fail(chapter, "wrong_language",
                     f"the text reads as {other}, not {language}")  # fmt: skip
    if not selection.chosen:
        failures.append(
            {"chapter": None, "title": None, "check": "empty", "detail": "no chapter has text"}
        )
    return failures


# -- what is read aloud, and the annexe --------------------------------------------------------

_SPOKEN_KIND = {
    "table": "A table", "equation": "An equation", "code": "A listing",
    "address": "an address", "key or hash": "a key",
}  # fmt: skip
PDF_PAGES_PER_CHAPTER = 10


@dataclass(frozen=True)
class AnnexeEntry:
    number: int
    chapter: str
    item: AnnexeItem


@dataclass(frozen=True)
class Narration:
    chapters: tuple[tuple[str, str], ...]  # (title, text read aloud)
    annexe: tuple[AnnexeEntry, ...]
    chars: int  # characters read aloud


def narration(book: Book, selection: Selection) -> Narration:
    """The chapters' text as read aloud (annexe markers spoken as "see annexe entry N"),
    the annexe entries numbered in reading order. A PDF's pages are grouped under their
    outline's sections, else by PDF_PAGES_PER_CHAPTER."""
    by_index = {c.index: c for c in book.chapters}
    annexe: list[AnnexeEntry] = []
    groups: list[tuple[str, list[str]]] = []
    last_group = None
    for index in selection.chosen:
        chapter = by_index[index]
        title, group_key = chapter.title, index
        if book.format == "pdf":
            start = max((p for p in book.sections if p <= index), default=None)
            if start is not None:
                title, group_key = book.sections[start], -1 - start
            else:
                first = index // PDF_PAGES_PER_CHAPTER * PDF_PAGES_PER_CHAPTER
                last = min(first + PDF_PAGES_PER_CHAPTER, len(book.chapters))
                title, group_key = f"Pages {first + 1} to {last}", first
        spoken = []
        for paragraph in chapter.paragraphs:
            spoken.append(_speak_markers(paragraph, chapter, annexe))
        if book.format == "pdf" and last_group == group_key:
            groups[-1][1].extend(spoken)
        else:
            groups.append((title, spoken))
        last_group = group_key
    chapters = tuple((title, "\n\n".join(texts)) for title, texts in groups if texts)
    return Narration(chapters, tuple(annexe), sum(len(t) + len(h) for h, t in chapters))


def _speak_markers(paragraph: str, chapter: BookChapter, annexe: list[AnnexeEntry]) -> str:
    """The paragraph with each annexe marker spoken, the entries numbered as they come."""
    standalone = _MARK.fullmatch(paragraph) is not None

    def refer(match: re.Match[str]) -> str:
        item = chapter.items[int(match.group(1))]
        annexe.append(AnnexeEntry(len(annexe) + 1, chapter.title, item))
        what = _SPOKEN_KIND[item.kind]
        if standalone:
            return f"{what}: see annexe entry {len(annexe)}."
        return f"{what.lower()}, annexe entry {len(annexe)},"

    return _MARK.sub(refer, paragraph)


def annexe_html(title: str | None, entries: tuple[AnnexeEntry, ...]) -> str:
    parts = [
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>'
        "body{font-family:'DejaVu Sans',sans-serif;font-size:10pt}"
        "h1{font-size:16pt}h2{font-size:11pt;margin:1.2em 0 .3em}"
        "pre{white-space:pre-wrap;word-break:break-all;font-size:9pt;background:#f3f4f6;"
        "padding:4pt}table{border-collapse:collapse}td{border:.5pt solid #999;padding:2pt 4pt}"
        "</style></head><body>",
        f"<h1>Annexe{': ' + html.escape(title) if title else ''}</h1>",
        "<p>What the audiobook does not read aloud; the narration refers to these entries "
        "by number.</p>",
    ]
    for entry in entries:
        item = entry.item
        parts.append(
            f"<h2>{entry.number}. {html.escape(item.kind.capitalize())} "
            f"({html.escape(entry.chapter)})</h2>"
        )
        if item.kind == "table" and item.rows:
            rows = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in item.rows
            )
            parts.append(f"<table>{rows}</table>")
        else:
            parts.append(f"<pre>{html.escape(item.text)}</pre>")
    parts.append("</body></html>")
    return "".join(parts)


def annexe_pdf(title: str | None, entries: tuple[AnnexeEntry, ...]) -> RenderedPdf:
    return html_to_pdf(annexe_html(title, entries))


# -- all of it, in one process-pool job ----------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    title: str | None
    selection: Selection
    failures: list[dict[str, object]]
    narration: Narration | None  # None when a sanity check failed
    priced_chars: int  # characters of the chosen chapters as the price counts them


def prepare(data: bytes, file_name: str, indices: list[int] | None, language: str) -> Prepared:
    """Read the book, choose the chapters, run the sanity checks and, when they pass, make
    the text to read aloud and the annexe entries."""
    book = read_book(data, file_name)
    selection = select_chapters(book, indices)
    failures = quality_failures(book, selection, language)
    by_index = {c.index: c for c in book.chapters}
    priced = sum(by_index[i].priced_chars for i in selection.chosen)
    told = None if failures else narration(book, selection)
    return Prepared(book.title, selection, failures, told, priced)
