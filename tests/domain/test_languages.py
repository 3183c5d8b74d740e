"""The rare-language table of translate-rare-language: 452 languages from the lists its module
docstring names, each reachable by code and name, none changing how the 119 resolve; quoted
over HTTP before payment, refused before any invoice when unknown, listed by /api/languages."""

from __future__ import annotations

import fnmatch
import tomllib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from satsgate.domain import languages
from satsgate.domain.languages import (
    RARE_LANGUAGES,
    RARE_LISTED_BY,
    UnknownLanguage,
    resolve_rare_language,
    resolve_translation_language,
)
from satsgate.lightning.invoices import decode_invoice
from tests.conftest import ThreadedServer, http_client, serve_with_engines
from tests.payments.test_gateway import assert_envelope, payment_count

ROOT = Path(__file__).resolve().parents[2]

# The table before it grew to 452 (git history): every code stays but the two ISO 639-5
# family codes; the retired tpw is tpn now.
_EARLIER = """
ace ban bjn bug min mad ilo pag war hil bcl pam fao oci ast glg srd scn lij lmo vec fur ltz
roh bre cor glv hsb dsb szl csb rue wln lim zea nds bar gsw tat bak chv kaa crh uig azb ckb
kmr pnb snd mai bho mag awa hne san kas doi gom mni sat tso ven ssw nso nbl lug kin run luo
kik kam twi ewe fon wol bam ful kon lua tum bem nya tir orm som kab tzm shi zgh quy quz aym
grn nah yua quc kek cak mam tzo tzh zap mix oto tar shp agr cni arn nav chr oji cre iku kal
haw smo ton fij tah mri rar tpi bis cha mah gil tvl niu tet pau chk pon mos dyu sus men tem
kri pcm efi ibb tiv kau bin urh nup sag lin kmb umb tsn sot loz kqn lun nyk her kua ndo mfe
crs hat pap jam srn gcf djk dzo bod new lif lep sck kru khb shn kac ksw mnw blk cjm hmn mww
iii zha bal brh skr hno bgq mwr raj gbm kfy tcy bfq sgc kln mas tuv dik nus shk xog nyn cgg
ach lgg teo kdj mer guz luy suk nym hay vmw ngl sna nde toi ava che inh kbd ady lez dar lbe
tab oss abk xal bua sah tyv alt krc kum nog udm kpv mhr mrj myv mdf krl vep sme smn sma liv
vro ain ryu ami tay pwn bnn tao yrk kca mns evn eve ckt niv ket ale esu ipk chy lkt dak cho
mus hop zun ood yaq hch tob wca guc pbb cbi qvi kgp gub xav tpw yrl pjt wbp aer tcs rop tiw
gup djr bvr
"""
EARLIER = _EARLIER.split()
DROPPED = {"nah", "oto"}
# Added from NLLB-200 (some also in MADLAD-400), and from MADLAD-400 up to its entry ``cbk``.
FROM_NLLB = {"acm", "acq", "aeb", "apc", "ars", "ary", "arz", "ayr", "cjk", "fuv", "knc", "kbp",
             "kea", "ltg", "lus", "prs", "taq"}  # fmt: skip
FROM_MADLAD_SAMPLE = {"cnh", "iba", "kha", "zza", "otq", "hif", "syr", "gag", "rmc", "stq",
                      "pis", "dje", "cbk"}  # fmt: skip
# MADLAD-400 entries after cbk, left out for the count.
CUT_SAMPLE = ("akb", "syl", "brx", "srr", "msb", "Sylheti")
# Names the earlier rare table already shared with the 119: rare resolution keeps them rare.
SHARED_NAMES = {
    "faroese": "fao", "galician": "glg", "luxembourgish": "ltz", "tatar": "tat",
    "uyghur": "uig", "sindhi": "snd", "kinyarwanda": "kin", "tigrinya": "tir", "oromo": "orm",
    "somali": "som", "guarani": "grn", "hawaiian": "haw", "samoan": "smo", "maori": "mri",
    "lingala": "lin", "tswana": "tsn", "haitian creole": "hat", "tibetan": "bod",
    "hmong": "hmn", "shona": "sna",
}  # fmt: skip


def test_the_table_holds_452_languages_with_tiers_from_their_evidence() -> None:
    assert len(RARE_LANGUAGES) == 452
    assert all(len(code) == 3 and code.isascii() and code.islower() for code in RARE_LANGUAGES)
    assert set(EARLIER) - DROPPED - {"tpw"} | {"tpn"} <= set(RARE_LANGUAGES)
    assert not (DROPPED | {"tpw"}) & set(RARE_LANGUAGES)
    assert set(RARE_LANGUAGES) >= FROM_NLLB | FROM_MADLAD_SAMPLE
    assert len(set(RARE_LANGUAGES) - set(EARLIER) - {"tpn"}) == 17 + 135
    # unverified exactly where a published list names the language; no measurement, so no
    # good or fair tier.
    for code, (_name, tier) in RARE_LANGUAGES.items():
        assert tier == ("unverified" if RARE_LISTED_BY[code] else "experimental"), code
    assert Counter(tier for _name, tier in RARE_LANGUAGES.values()) == {
        "unverified": 325, "experimental": 127}  # fmt: skip
    listed = Counter(name for names in RARE_LISTED_BY.values() for name in names)
    assert listed == {"NLLB-200": 101, "MADLAD-400": 285}
    assert RARE_LISTED_BY["arz"] == ("NLLB-200",) and RARE_LISTED_BY["cbk"] == ("MADLAD-400",)
    assert RARE_LISTED_BY["ain"] == () and RARE_LANGUAGES["ain"] == ("Ainu", "experimental")


def test_every_rare_language_resolves_by_code_and_by_name() -> None:
    names = Counter(name.lower() for name, _tier in RARE_LANGUAGES.values())
    assert max(names.values()) == 1
    for code, (name, _tier) in RARE_LANGUAGES.items():
        assert resolve_rare_language(code) == code
        assert resolve_rare_language(code.upper()) == code
        assert resolve_rare_language(name) == code, name
        assert resolve_rare_language(f"  {name.upper()} ") == code, name
        assert languages.language_name(code) == name


@pytest.mark.parametrize(
    ("spelled", "code"),
    [
        ("oc", "oci"),  # ISO 639-1 code
        ("Occitan (post 1500)", "oci"),  # ISO 639-3 reference name
        ("Egyptian Arabic", "arz"),
        ("DARI", "prs"),
        ("Kabiyè", "kbp"),
        ("Kabiye", "kbp"),  # without diacritics
        ("Asháninka", "cni"),
        ("ace_Latn", "ace"),  # NLLB-200's code
        ("quy-PE", "quy"),
        ("tpw", "tpn"),  # retired ISO 639-3 codes
        ("ajp", "apc"),
        ("Mixtec", "mix"),
        ("Tày", "tyz"),
        ("tay", "tay"),  # a code beats a name that folds onto it
        ("lu", "lub"),
        ("Lü", "khb"),
    ],
)
def test_codes_aliases_and_tags(spelled: str, code: str) -> None:
    assert resolve_rare_language(spelled) == code


def test_the_119_resolve_as_before() -> None:
    """Every spelling of the 119 resolves through the rare service to the same code as
    through translate-text, except the names the earlier rare table already shared."""
    keys = {*languages._TRANSLATION_LOOKUP, *languages._CODE_ALIASES, "pt-BR", "zh-Hant-TW"}
    for key in keys:
        expected = SHARED_NAMES.get(key, resolve_translation_language(key))
        assert resolve_rare_language(key) == expected, key
    assert resolve_rare_language("Haitian") == "ht" and resolve_rare_language("gl") == "gl"


@pytest.mark.parametrize(
    "bad", ["", "zzz", "nah", "Nahuatl", "oto", "Klingon", "tlh", "zxx", "ber", *CUT_SAMPLE]
)
def test_unknown_languages_are_refused(bad: str) -> None:
    with pytest.raises(UnknownLanguage):
        resolve_rare_language(bad)


def test_the_table_ships_in_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["satsgate"]
    data = "domain/data/rare_languages.tsv"
    assert (ROOT / "satsgate" / data).is_file()
    assert any(fnmatch.fnmatch(data, pattern) for pattern in patterns)


# -- over HTTP -------------------------------------------------------------------------------

NEW_SAMPLE = ["arz", "Dari", "Latgalian", "cnh", "Kabiyè", "gag", "cbk", "ace_Latn", "oc"]


@pytest.fixture(scope="module")
def rare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    yield from serve_with_engines(tmp_path_factory, "rare", ["rare_translation"])


@pytest.fixture
async def rare_client(rare_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(rare_server):
        yield c


async def test_new_languages_quote_and_unknown_ones_are_refused_before_any_invoice(
    rare_client: httpx.AsyncClient, rare_server: ThreadedServer
) -> None:
    for language in NEW_SAMPLE:
        resp = await rare_client.post(
            "/api/l402/translate-rare-language",
            json={"text": "x" * 1000, "targetLanguage": language},
        )
        assert resp.status_code == 402, (language, resp.text)
        challenge = resp.json()
        assert challenge["amountSats"] == 52  # 50 + 0.002 per character
        assert decode_invoice(challenge["invoice"]).amount_msat == 52_000
    before = payment_count(rare_server)
    for bad in ("zzz", "nah", "akb"):
        resp = await rare_client.post(
            "/api/l402/translate-rare-language", json={"text": "x", "targetLanguage": bad}
        )
        body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert "WWW-Authenticate" not in resp.headers and "invoice" not in body
        assert "/api/languages" in body["error"], body
    assert payment_count(rare_server) == before


async def test_without_an_engine_the_service_refuses_before_any_invoice(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.post(
        "/api/l402/translate-rare-language", json={"text": "x", "targetLanguage": "arz"}
    )
    assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
    assert "WWW-Authenticate" not in resp.headers


async def test_api_languages_lists_every_rare_language_with_its_tier(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.get("/api/languages")
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    rare = {entry["code"]: entry for entry in doc["rare"]}
    assert len(rare) == len(doc["rare"]) == 452
    engines = {engine["engine"]: engine for engine in doc["engines"]}
    assert engines["rare"]["languages"] == 452
    for code, (name, tier) in RARE_LANGUAGES.items():
        entry = rare[code]
        assert (entry["name"], entry["quality"]) == (name, tier), code
        assert entry["listedBy"] == list(RARE_LISTED_BY[code]) and entry["chrF"] is None
    assert rare["arz"]["quality"] == "unverified" and rare["arz"]["listedBy"] == ["NLLB-200"]
    assert rare["ain"]["quality"] == "experimental" and rare["ain"]["listedBy"] == []
