"""Translation on the local engine (Apertium) through the gate: translate-text and
translate-epub translate for real (the output's words are checked), a pair this node
cannot translate is refused before any invoice, a missing source language is identified,
and a failure after payment is refunded."""

from __future__ import annotations

import asyncio
import base64
import io
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from satsgate.engines.local import apertium
from satsgate.services.ai import epub_translation
from tests.conftest import (
    ThreadedServer,
    http_client,
    make_settings,
    paid_l402_auth,
    skip_unless_ci,
)

NEEDED_PAIRS = {("es", "en"), ("en", "ca"), ("pt", "es"), ("fr", "es")}


@pytest.fixture(autouse=True)
def _apertium() -> None:
    if shutil.which("apertium") is None:
        skip_unless_ci("apertium is not installed")
    missing = NEEDED_PAIRS - set(apertium.installed_pairs())
    if missing:
        skip_unless_ci(f"Apertium pairs missing: {sorted(missing)}")


async def _paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def _translate(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await _paid(client, "translate-text", body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def _refused_before_invoice(
    client: httpx.AsyncClient, slug: str, body: dict[str, Any]
) -> dict[str, Any]:
    resp = await client.post(f"/api/l402/{slug}", json=body)
    assert resp.status_code == 503, resp.text  # not 402: no invoice was made
    assert "WWW-Authenticate" not in resp.headers
    error = dict(resp.json())
    assert error["error_code"] == "SERVICE_UNAVAILABLE"
    assert "nothing was charged" in error["error"]
    return error


# -- translate-text ------------------------------------------------------------------------


async def test_spanish_to_english(client: httpx.AsyncClient) -> None:
    out = await _translate(
        client,
        {
            "text": "El perro come pan en la casa de mi madre.",
            "sourceLanguage": "Spanish",
            "targetLanguage": "en",
        },
    )
    words = out["translatedText"].lower()
    for word in ("dog", "eats", "bread", "house", "mother"):
        assert word in words, out
    assert out["sourceLanguage"] == "es" and out["targetLanguage"] == "en"


async def test_english_to_catalan_and_portuguese_to_spanish(client: httpx.AsyncClient) -> None:
    catalan = await _translate(
        client,
        {
            "text": "The house is big.",
            "sourceLanguage": "en",
            "targetLanguage": "Catalan",
        },
    )
    assert "casa" in catalan["translatedText"] and "és" in catalan["translatedText"], catalan
    spanish = await _translate(
        client,
        {
            "text": "O gato come peixe todos os dias.",
            "sourceLanguage": "pt-BR",
            "targetLanguage": "es",
        },
    )
    assert "El gato come pez todos los días" in spanish["translatedText"], spanish


async def test_a_pair_without_its_own_mode_goes_through_a_pivot_and_says_so(
    client: httpx.AsyncClient,
) -> None:
    """No English-French pair is installed: English to Spanish, then Spanish to French."""
    out = await _translate(
        client,
        {
            "text": "The dog eats bread in the house.",
            "sourceLanguage": "en",
            "targetLanguage": "fr",
        },
    )
    words = out["translatedText"].lower()
    assert "chien" in words and "pain" in words and "maison" in words, out
    assert out["pivotLanguage"] == "es" and "through Spanish" in out["note"], out
    direct = await _translate(
        client, {"text": "The house is big.", "sourceLanguage": "en", "targetLanguage": "es"}
    )
    assert "pivotLanguage" not in direct and "note" not in direct, direct


async def test_source_language_is_detected(client: httpx.AsyncClient) -> None:
    out = await _translate(
        client,
        {
            "text": "Le chat mange du poisson tous les jours dans la cuisine de la maison.",
            "sourceLanguage": "auto",
            "targetLanguage": "es",
        },
    )
    assert out["sourceLanguage"] == "fr"
    assert "gato" in out["translatedText"] and "pescado" in out["translatedText"], out
    omitted = await _translate(
        client,
        {
            "text": "Mañana vamos a la playa con los niños y comemos pescado.",
            "targetLanguage": "en",
        },
    )
    assert omitted["sourceLanguage"] == "es"
    assert "beach" in omitted["translatedText"] and "tomorrow" in omitted["translatedText"].lower()
    # A few words fit many languages: the likeliest one this node translates from (the
    # spec's own example, and a greeting no identifier can place by itself).
    example = await _translate(client, {"text": "Good morning", "targetLanguage": "es"})
    assert example == {
        "translatedText": "Buenos días",
        "sourceLanguage": "en",
        "targetLanguage": "es",
        "untrusted_output": True,
    }
    hola = await _translate(client, {"text": "Hola", "targetLanguage": "en"})
    assert hola["translatedText"] == "Hello" and hola["sourceLanguage"] == "es"


async def test_pairs_this_node_lacks_are_refused_before_any_invoice(
    client: httpx.AsyncClient,
) -> None:
    # A target no installed pair reaches: the message lists what is served.
    error = await _refused_before_invoice(
        client, "translate-text", {"text": "Hola", "sourceLanguage": "es", "targetLanguage": "de"}
    )
    assert "German" in error["error"] and "es->en" in error["error"]
    # A known target from a source it is not translated from here, even through a pivot
    # (French reaches English only through Spanish, so Esperanto, which only English
    # reaches, is two pivots away).
    error = await _refused_before_invoice(
        client,
        "translate-text",
        {"text": "Bonjour", "sourceLanguage": "fr", "targetLanguage": "eo"},
    )
    assert "not from French" in error["error"]
    # No source given, and the text reads as a language not served into English.
    error = await _refused_before_invoice(
        client,
        "translate-text",
        {
            "text": "Der Hund schläft heute im Garten hinter dem großen Haus.",
            "targetLanguage": "en",
        },
    )
    assert "German (de)" in error["error"] and "sourceLanguage" in error["error"]
    # A pinned text model: the local engine is no text model.
    error = await _refused_before_invoice(
        client,
        "translate-text",
        {"text": "Hola", "sourceLanguage": "es", "targetLanguage": "en", "modelId": 31},
    )
    assert "model 31" in error["error"]
    # The EPUB service checks its pair the same way.
    await _refused_before_invoice(
        client,
        "translate-epub",
        {"epubBase64": _b64(_epub()), "sourceLanguage": "es", "targetLanguage": "de"},
    )


@pytest.fixture
def hasty_server(tmp_path: Path) -> Iterator[ThreadedServer]:
    """A node whose engines get 1 ms: every translation runs out of time."""
    srv = ThreadedServer(make_settings(tmp_path / "data", cpu_job_time_limit_s=0.001))
    yield srv
    srv.stop()


async def test_a_translation_past_its_time_limit_is_refunded(
    hasty_server: ThreadedServer,
) -> None:
    async for client in http_client(hasty_server):
        resp = await _paid(
            client,
            "translate-text",
            {
                "text": "El perro come pan. " * 200,
                "sourceLanguage": "es",
                "targetLanguage": "en",
            },
        )
        assert resp.status_code != 200, resp.text
        error = resp.json()
        assert error["error_code"] == "TIMEOUT", error
        assert error["refund"]["amount_sats"] >= 1


# -- translate-epub ------------------------------------------------------------------------

_CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="es" lang="es">
<head><title>{title}</title><link rel="stylesheet" href="style.css"/></head>
<body>
<h1 class="chapter" id="c{n}">{title}</h1>
{paragraphs}
<p>El niño &amp; el gato leen <em>un libro</em> muy <a href="#c{n}">grande</a>.</p>
<img src="cover.png" alt="portada"/>
</body>
</html>
"""

_OPF = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id" xml:lang="es">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">urn:uuid:1234</dc:identifier><dc:title>Libro</dc:title>
<dc:language>es</dc:language>
</metadata>
<manifest>
<item id="c1" href="text/c1.xhtml" media-type="application/xhtml+xml"/>
<item id="c2" href="text/c2.xhtml" media-type="application/xhtml+xml"/>
<item id="css" href="text/style.css" media-type="text/css"/>
<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
</manifest>
<spine><itemref idref="c1"/><itemref idref="c2"/></spine>
</package>
"""

_NCX = """<?xml version="1.0" encoding="utf-8"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1" xml:lang="es">
<head><meta name="dtb:uid" content="urn:uuid:1234"/></head>
<docTitle><text>Libro</text></docTitle>
<navMap><navPoint id="n1" playOrder="1"><navLabel><text>La casa grande</text></navLabel>
<content src="text/c1.xhtml"/></navPoint></navMap>
</ncx>
"""

_CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>
"""


def _epub(paragraphs: int = 3) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", _CONTAINER)
        book.writestr("OEBPS/content.opf", _OPF)
        for n, (title, text) in enumerate(
            [
                ("La casa", "La casa es grande y está cerca del río. Bebo caf&eacute;."),
                ("El perro", "El perro come pan en la cocina de mi madre."),
            ],
            start=1,
        ):
            body = "\n".join(f"<p>{text}</p>" for _ in range(paragraphs * n))
            book.writestr(
                f"OEBPS/text/c{n}.xhtml",
                _CHAPTER.format(title=title, n=n, paragraphs=body),
                compress_type=zipfile.ZIP_DEFLATED,
            )
        book.writestr("OEBPS/text/style.css", "h1 { color: navy }")
        book.writestr("OEBPS/toc.ncx", _NCX)
    return out.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def _job_result(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await _paid(client, "translate-epub", body)
    assert resp.status_code == 202, resp.text
    poll = resp.json()["poll_url"]
    for _ in range(300):
        status = (await client.get(poll)).json()
        if status["status"] != "IN_PROGRESS":
            return dict(status)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job never ended: {status}")


async def test_epub_round_trip(client: httpx.AsyncClient) -> None:
    original = _epub()
    done = await _job_result(
        client,
        {
            "epubBase64": _b64(original),
            "targetLanguage": "English",
            "fileName": "libro.epub",
        },
    )
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    assert result["fileName"] == "libro.en.epub"
    assert result["docs"] == 3 and result["targetLanguage"] == "en"  # 2 chapters, the NCX
    assert result["sourceLanguage"] == "es"  # detected: none was given
    assert result["visibleChars"] > 100
    download = await client.get(result["url"])
    assert download.status_code == 200
    data = download.content
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        assert book.testzip() is None
        first = book.infolist()[0]
        assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
        assert book.read("mimetype") == b"application/epub+zip"
        assert data[30:38] == b"mimetype"  # the name right after the first local header
        names = {i.filename for i in book.infolist()}
        with zipfile.ZipFile(io.BytesIO(original)) as source:
            assert names == set(source.namelist())
            assert book.read("OEBPS/text/style.css") == source.read("OEBPS/text/style.css")
        opf = book.read("OEBPS/content.opf").decode()
        assert "<dc:language>en</dc:language>" in opf and 'xml:lang="en"' in opf
        one = book.read("OEBPS/text/c1.xhtml").decode()
        two = book.read("OEBPS/text/c2.xhtml").decode()
        ncx = book.read("OEBPS/toc.ncx").decode()
    assert "<text>The big house</text>" in ncx and 'xml:lang="en"' in ncx, ncx
    assert '<content src="text/c1.xhtml"/>' in ncx
    for doc in (one, two):
        root = ElementTree.fromstring(doc.encode())  # still well-formed XHTML
        assert root.get("{http://www.w3.org/XML/1998/namespace}lang") == "en"
        assert '<link rel="stylesheet" href="style.css"/>' in doc  # the head is kept
        assert '<img src="cover.png" alt="portada"/>' in doc
        assert "<em>" in doc and "</em>" in doc and 'href="#c' in doc
        assert "&amp;" in doc
    assert '<h1 class="chapter" id="c1">The house</h1>' in one
    assert "The house is big" in one and "river" in one
    assert "coffee" in one and "&eacute;" not in one  # the reference read as the letter
    assert "The dog eats bread" in two and "mother" in two
    assert "El perro come" not in two and "La casa es grande" not in one


async def test_epub_with_a_given_source_and_a_second_pair(client: httpx.AsyncClient) -> None:
    done = await _job_result(
        client,
        {
            "epubBase64": _b64(_epub(1)),
            "sourceLanguage": "es",
            "targetLanguage": "pt",
        },
    )
    assert done["status"] == "COMPLETED", done
    data = (await client.get(done["result"]["url"])).content
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        two = book.read("OEBPS/text/c2.xhtml").decode()
        opf = book.read("OEBPS/content.opf").decode()
    assert "O cão come" in two and "cozinha" in two, two
    assert "<dc:language>pt</dc:language>" in opf


def test_long_bodies_are_cut_after_block_ends() -> None:
    body = "".join(f"<p>frase {i}</p>\n" for i in range(1000))
    doc = epub_translation.Document("a.xhtml", "<body>", body, "</body>", True)
    chunks = doc.chunks(500)
    assert "".join(chunks) == body and len(chunks) > 10
    assert all(c.rstrip().endswith("</p>") for c in chunks)
    assert all(len(c) <= 500 for c in chunks)


def test_mode_names_map_to_language_pairs() -> None:
    pairs = apertium.find_pairs(
        [
            "spa-eng",
            "spa-eng_US",
            "eng-cat_valencia",
            "eng-cat",
            "es-pt",
            "es-pt_BR",
            "hbs-eng",
            "eng-hbs",
            "eng-hbs_SR",
            "eng-hbs_HR",
            "Cyrl-Latn",
            "eco-es-fr",
            "en-eo-bytecode",
            "nno-nob",
            "oc-ca",
            "xyz-eng",
        ]
    )
    assert pairs == {
        ("es", "en"): "spa-eng",
        ("en", "ca"): "eng-cat",
        ("es", "pt"): "es-pt",
        ("sr", "en"): "hbs-eng",
        ("hr", "en"): "hbs-eng",
        ("bs", "en"): "hbs-eng",
        ("en", "sr"): "eng-hbs_SR",
        ("en", "hr"): "eng-hbs_HR",
    }


async def test_an_epub_in_a_language_not_served_is_never_translated_and_charged(
    client: httpx.AsyncClient,
) -> None:
    german = _epub().replace(
        b"La casa es grande y est\xc3\xa1 cerca del r\xc3\xado.",
        "Das Haus ist groß und steht nahe am Fluss.".encode(),
    )
    german = _epub_with(
        german,
        "OEBPS/text/c2.xhtml",
        _CHAPTER.format(
            title="Der Hund",
            n=2,
            paragraphs="<p>Der Hund frisst heute Brot in der Küche.</p>" * 6,
        ),
    )
    body = {"epubBase64": _b64(german), "targetLanguage": "en"}
    first = await client.post("/api/l402/translate-epub", json=body)
    if first.status_code == 503:  # refused before any invoice: the book's language read first
        assert "German" in first.json()["error"]
        return
    # Read only after the invoice (the gate checks the engine before it reads the book):
    # the job fails before translating anything, and the payment comes back whole.
    assert first.status_code == 402, first.text
    done = await _job_result(client, body)
    assert done["status"] == "FAILED", done
    assert done["error_code"] == "INVALID_INPUT" and "German" in done["error"], done
    assert done["refund"]["amount_sats"] == 50


def _epub_with(data: bytes, name: str, text: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            content = text.encode() if info.filename == name else source.read(info)
            target.writestr(info, content)
    return out.getvalue()


async def test_api_languages_says_which_pairs_this_node_translates(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/api/languages")).json()
    node = doc["thisNode"]["translation"]
    assert node["available"] is True and node["source"] == "local"
    assert node["label"] == apertium.LABEL
    pairs = {(p["source"], p["target"]): p.get("via") for p in node["pairs"]}
    installed = set(apertium.installed_pairs())
    assert installed >= NEEDED_PAIRS
    # Every installed pair, directly; the others through one pivot, each leg installed.
    assert {pair for pair, via in pairs.items() if via is None} == installed
    for (source, target), via in pairs.items():
        assert via is None or {(source, via), (via, target)} <= installed, (source, target)
    assert pairs[("en", "fr")] == "es"
    by_code = {entry["code"]: entry for entry in doc["translation"]}
    assert by_code["en"]["here"]["into"] is True and "es" in by_code["en"]["here"]["from"]
    assert "fr" in by_code["en"]["here"]["from"] and "fr" not in by_code["eo"]["here"]["from"]
    assert by_code["de"]["here"] == {"into": False, "from": []}
    assert by_code["es"]["here"]["from"] == sorted(s for s, t in pairs if t == "es")


def test_epub_reading_and_writing_in_process() -> None:
    book = epub_translation.read_epub(_epub(1))
    assert [d.name for d in book.documents] == [
        "OEBPS/text/c1.xhtml",
        "OEBPS/text/c2.xhtml",
        "OEBPS/toc.ncx",
    ]
    assert book.opf == "OEBPS/content.opf"
    assert "La casa es grande" in book.sample() and "<p>" not in book.sample()
    one = book.documents[0]
    assert not one.xml_ok and "café" in one.body  # &eacute; is no XML: read as the letter
    assert book.documents[1].xml_ok and book.documents[1].encoding == "utf-8"
    # A translation that breaks a well-formed document is refused (the book would not open).
    with pytest.raises(epub_translation.EpubError, match=r"c2\.xhtml"):
        epub_translation.write_epub(_epub(1), book, {"OEBPS/text/c2.xhtml": "<p>unclosed"}, "en")
    # Without dc:language, the package gains one; only translated documents change.
    no_language = _epub_with(
        _epub(1), "OEBPS/content.opf", _OPF.replace("<dc:language>es</dc:language>", "")
    )
    book = epub_translation.read_epub(no_language)
    out = epub_translation.write_epub(no_language, book, {}, "ca")
    with (
        zipfile.ZipFile(io.BytesIO(out)) as written,
        zipfile.ZipFile(io.BytesIO(no_language)) as source,
    ):
        assert "<dc:language>ca</dc:language>" in written.read("OEBPS/content.opf").decode()
        assert written.read("OEBPS/text/c2.xhtml") == source.read("OEBPS/text/c2.xhtml")


@pytest.mark.parametrize(
    "data",
    [b"PK not a zip", _epub_with(_epub(1), "META-INF/container.xml", "<container/>")],
    ids=["not-a-zip", "no-rootfile"],  # the zip's bytes carry a time: no stable test id
)
def test_what_is_no_epub_is_refused(data: bytes) -> None:
    with pytest.raises(epub_translation.EpubError):
        epub_translation.read_epub(data)


def test_this_node_translation_with_a_provider_or_without_any_engine() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from satsgate.config.settings import Settings
    from satsgate.discovery.languages import _here, _this_node
    from satsgate.engines import CpuRunner, EngineDeps, build_engines
    from satsgate.services.registry import ENGINE_NAMES
    from tests.engines_down import down_engines, engines_for

    provider = _this_node(engines_for(Settings(**down_engines(["translation"]))))
    assert provider == {"available": True, "source": "provider", "pairs": None}
    assert _here("de", provider) == {"into": True, "from": None}  # any source
    with ThreadPoolExecutor(max_workers=1) as pool:
        bare = build_engines(
            Settings(),
            ENGINE_NAMES,
            EngineDeps(Settings(), CpuRunner(pool, 1.0)),
            provider_kinds={},
            local_engines=(),
        )
    none = _this_node(bare)
    assert none == {"available": False, "source": None, "pairs": []}
    assert _here("en", none) == {"into": False, "from": []}
