"""Language data: transcription (13), translation (119, ISO 639) and rare-language tables.

Callers may name a language by ISO 639 code (639-1, or 639-3 where there is no
639-1 code), by English name, or by a locale tag (``pt-BR`` -> ``pt``); all
are case-insensitive. :func:`resolve_translation_language` and friends return
the canonical code or raise :class:`UnknownLanguage` (a ValueError, so pydantic
reports it as L402_INVALID_PARAMS before any invoice).

Translation engines: the target picks the engine. ``standard`` is the
standard text tier (1 sat per 1000 characters); ``routed`` targets, where the
standard engine is weak, go to the better text tier and cost more
(see :mod:`satsgate.services.pricing`).
"""

from __future__ import annotations

from typing import Final, Literal

Engine = Literal["standard", "routed"]


class UnknownLanguage(ValueError):
    pass


# The 13 transcription languages of the spec.
TRANSCRIPTION_LANGUAGES: Final[dict[str, str]] = {
    "en": "English", "zh": "Chinese", "hi": "Hindi", "es": "Spanish", "ar": "Arabic",
    "fr": "French", "pt": "Portuguese", "ru": "Russian", "de": "German", "ja": "Japanese",
    "ko": "Korean", "it": "Italian", "nl": "Dutch",
}  # fmt: skip

# code: English name. "|" separates further accepted names.
_TRANSLATION: Final[str] = """
af Afrikaans;sq Albanian;am Amharic;ar Arabic;hy Armenian;as Assamese;az Azerbaijani;
eu Basque;be Belarusian;bn Bengali|Bangla;bs Bosnian;bg Bulgarian;my Burmese|Myanmar;
ca Catalan;ceb Cebuano;zh Chinese|Mandarin|Simplified Chinese|Traditional Chinese;
co Corsican;hr Croatian;cs Czech;da Danish;nl Dutch|Flemish;en English;eo Esperanto;
et Estonian;fi Finnish;fr French;fy Frisian|Western Frisian;gl Galician;ka Georgian;
de German;el Greek;gu Gujarati;ht Haitian Creole|Haitian;ha Hausa;haw Hawaiian;
he Hebrew;hi Hindi;hmn Hmong;hu Hungarian;is Icelandic;ig Igbo;id Indonesian;ga Irish;
it Italian;ja Japanese;jv Javanese;kn Kannada;kk Kazakh;km Khmer;rw Kinyarwanda;
ko Korean;ku Kurdish;ky Kyrgyz;lo Lao;la Latin;lv Latvian;lt Lithuanian;
lb Luxembourgish;mk Macedonian;mg Malagasy;ms Malay;ml Malayalam;mt Maltese;mi Maori;
mr Marathi;mn Mongolian;ne Nepali;no Norwegian|Norwegian Bokmal;ny Chichewa|Nyanja;
or Odia|Oriya;ps Pashto;fa Persian|Farsi;pl Polish;pt Portuguese;pa Punjabi;
ro Romanian;ru Russian;sm Samoan;gd Scottish Gaelic|Gaelic;sr Serbian;st Sesotho;
sn Shona;sd Sindhi;si Sinhala;sk Slovak;sl Slovenian;so Somali;es Spanish;su Sundanese;
sw Swahili;sv Swedish;tl Tagalog|Filipino;tg Tajik;ta Tamil;tt Tatar;te Telugu;th Thai;
tr Turkish;tk Turkmen;uk Ukrainian;ur Urdu;ug Uyghur;uz Uzbek;vi Vietnamese;cy Welsh;
xh Xhosa;yi Yiddish;yo Yoruba;zu Zulu;yue Cantonese;bo Tibetan;dv Dhivehi|Maldivian;
fo Faroese;ti Tigrinya;om Oromo;qu Quechua;gn Guarani;ln Lingala;tn Tswana|Setswana
"""

# Targets the standard engine handles poorly: routed to the better tier.
_ROUTED = "co haw hmn la mi sm yi dv fo ti om qu gn ln tn bo ug tt tk ht st sn ny"
ROUTED_TARGETS: Final[frozenset[str]] = frozenset(_ROUTED.split(" "))

# Other spellings of codes: legacy ISO codes, 639-2/3 codes, macrolanguage members.
_CODE_ALIASES: Final[dict[str, str]] = {
    "iw": "he", "jw": "jv", "in": "id", "ji": "yi", "nb": "no", "nn": "no", "fil": "tl",
    "zho": "zh", "cmn": "zh", "eng": "en", "spa": "es", "fra": "fr", "fre": "fr", "deu": "de",
    "ger": "de", "por": "pt", "rus": "ru", "jpn": "ja", "kor": "ko", "ita": "it", "nld": "nl",
    "dut": "nl", "ara": "ar", "hin": "hi", "tur": "tr", "pol": "pl", "ukr": "uk", "vie": "vi",
    "fas": "fa", "per": "fa", "pes": "fa", "zsm": "ms", "msa": "ms", "swa": "sw", "swh": "sw",
    "tgl": "tl", "heb": "he", "ell": "el", "gre": "el", "ces": "cs", "cze": "cs", "ron": "ro",
    "rum": "ro", "hun": "hu", "swe": "sv", "dan": "da", "fin": "fi", "nor": "no", "nob": "no",
}  # fmt: skip


def _parse(table: str) -> tuple[dict[str, str], dict[str, str]]:
    names: dict[str, str] = {}
    lookup: dict[str, str] = {}
    for entry in table.replace("\n", "").split(";"):
        code, _, spelled = entry.strip().partition(" ")
        all_names = spelled.split("|")
        names[code] = all_names[0]
        lookup[code] = code
        for name in all_names:
            lookup[name.lower()] = code
    return names, lookup


TRANSLATION_LANGUAGES, _TRANSLATION_LOOKUP = _parse(_TRANSLATION)
assert len(TRANSLATION_LANGUAGES) == 119, len(TRANSLATION_LANGUAGES)
assert set(TRANSLATION_LANGUAGES) >= ROUTED_TARGETS


def translation_engine(code: str) -> Engine:
    """The engine a translation into ``code`` uses (and so its price)."""
    return "routed" if code in ROUTED_TARGETS else "standard"


def _normalize(value: str) -> str:
    return " ".join(value.strip().replace("_", "-").split()).lower()


def _lookup(value: str, table: dict[str, str], what: str) -> str:
    key = _normalize(value)
    if not key:
        raise UnknownLanguage(f"{what}: a language is required")
    candidates = [key, _CODE_ALIASES.get(key, "")]
    if "-" in key:  # locale tag: pt-br -> pt, zh-hant-tw -> zh
        primary = key.split("-", 1)[0]
        candidates += [primary, _CODE_ALIASES.get(primary, "")]
    for candidate in candidates:
        if candidate and candidate in table:
            return table[candidate]
    raise UnknownLanguage(f"{what}: unsupported language {value.strip()!r}")


def resolve_translation_language(value: str) -> str:
    """One of the 119: an ISO 639 code, English name or locale tag -> canonical code."""
    return _lookup(value, _TRANSLATION_LOOKUP, "translation")


def resolve_transcription_language(value: str) -> str:
    """One of the 13 transcription languages (or ``auto``) -> canonical code."""
    if _normalize(value) == "auto":
        return "auto"
    code = _lookup(value, _TRANSLATION_LOOKUP, "transcription")
    if code not in TRANSCRIPTION_LANGUAGES:
        raise UnknownLanguage(
            f"transcription: {value.strip()!r} is not one of "
            + ", ".join(TRANSCRIPTION_LANGUAGES)
        )
    return code


# -- rare languages (translate-rare-language) ---------------------------------------------

QualityTier = Literal["good", "fair", "unverified", "experimental"]

# ISO 639-3 code, English name; grouped by the quality tier the engine is known for.
# The measured chrF per language comes from the engine; the table holds no scores.
_RARE: Final[dict[QualityTier, str]] = {
    "good": """
ace Acehnese;ban Balinese;bjn Banjar;bug Buginese;min Minangkabau;mad Madurese;
ilo Ilocano;pag Pangasinan;war Waray;hil Hiligaynon;bcl Central Bikol;pam Kapampangan;
fao Faroese;oci Occitan;ast Asturian;glg Galician;srd Sardinian;scn Sicilian;lij Ligurian;
lmo Lombard;vec Venetian;fur Friulian;ltz Luxembourgish;roh Romansh;bre Breton;cor Cornish;
glv Manx;hsb Upper Sorbian;dsb Lower Sorbian;szl Silesian;csb Kashubian;rue Rusyn;
wln Walloon;lim Limburgish;zea Zeelandic;nds Low German;bar Bavarian;gsw Swiss German;
tat Tatar;bak Bashkir;chv Chuvash;kaa Karakalpak;crh Crimean Tatar;uig Uyghur;
azb South Azerbaijani;ckb Central Kurdish;kmr Northern Kurdish;pnb Western Punjabi;
snd Sindhi;mai Maithili;bho Bhojpuri;mag Magahi;awa Awadhi;hne Chhattisgarhi;
san Sanskrit;kas Kashmiri;doi Dogri;gom Goan Konkani;mni Meitei;sat Santali;
tso Tsonga;ven Venda;ssw Swati;nso Northern Sotho;nbl Southern Ndebele;
lug Ganda;kin Kinyarwanda;run Rundi;luo Luo;kik Kikuyu;kam Kamba;
twi Twi;ewe Ewe;fon Fon;wol Wolof;bam Bambara;ful Fula;kon Kongo;lua Luba-Kasai;
tum Tumbuka;bem Bemba;nya Chewa;tir Tigrinya;orm Oromo;som Somali;kab Kabyle;
tzm Central Atlas Tamazight;shi Tachelhit;zgh Standard Moroccan Tamazight
""",
    "fair": """
quy Ayacucho Quechua;quz Cusco Quechua;aym Aymara;grn Guarani;nah Nahuatl;
yua Yucatec Maya;quc K'iche';kek Q'eqchi';cak Kaqchikel;mam Mam;tzo Tzotzil;tzh Tzeltal;
zap Zapotec;mix Mixtec;oto Otomi;tar Tarahumara;shp Shipibo-Konibo;agr Aguaruna;
cni Ashaninka;arn Mapudungun;nav Navajo;chr Cherokee;oji Ojibwe;cre Cree;iku Inuktitut;
kal Greenlandic;haw Hawaiian;smo Samoan;ton Tongan;fij Fijian;tah Tahitian;mri Maori;
rar Cook Islands Maori;tpi Tok Pisin;bis Bislama;cha Chamorro;mah Marshallese;
gil Gilbertese;tvl Tuvaluan;niu Niuean;tet Tetum;pau Palauan;chk Chuukese;pon Pohnpeian;
mos Mossi;dyu Dyula;sus Susu;men Mende;tem Temne;kri Krio;pcm Nigerian Pidgin;
efi Efik;ibb Ibibio;tiv Tiv;kau Kanuri;bin Edo;urh Urhobo;nup Nupe;
sag Sango;lin Lingala;kmb Kimbundu;umb Umbundu;tsn Tswana;sot Southern Sotho;
loz Lozi;kqn Kaonde;lun Lunda;nyk Nyaneka;her Herero;kua Kwanyama;ndo Ndonga;
mfe Mauritian Creole;crs Seychellois Creole;hat Haitian Creole;pap Papiamento;
jam Jamaican Patois;srn Sranan Tongo;gcf Guadeloupean Creole;djk Aukan
""",
    "unverified": """
dzo Dzongkha;bod Tibetan;new Newari;lif Limbu;lep Lepcha;sck Sadri;kru Kurukh;
khb Tai Lue;shn Shan;kac Kachin;ksw S'gaw Karen;mnw Mon;blk Pa'o;cjm Eastern Cham;
hmn Hmong;mww Hmong Daw;iii Nuosu;zha Zhuang;bal Baluchi;brh Brahui;skr Saraiki;
hno Northern Hindko;bgq Bagri;mwr Marwari;raj Rajasthani;gbm Garhwali;kfy Kumaoni;
tcy Tulu;bfq Badaga;sgc Kipsigis;kln Kalenjin;mas Maasai;tuv Turkana;dik Dinka;
nus Nuer;shk Shilluk;xog Soga;nyn Nyankole;cgg Chiga;ach Acholi;lgg Lugbara;teo Teso;
kdj Karamojong;mer Meru;guz Gusii;luy Luyia;suk Sukuma;nym Nyamwezi;hay Haya;
vmw Makhuwa;ngl Lomwe;sna Shona;nde North Ndebele;toi Tonga (Zambia);
ava Avar;che Chechen;inh Ingush;kbd Kabardian;ady Adyghe;lez Lezgian;dar Dargwa;
lbe Lak;tab Tabasaran;oss Ossetian;abk Abkhaz;xal Kalmyk;bua Buryat;sah Yakut;
tyv Tuvan;alt Southern Altai;krc Karachay-Balkar;kum Kumyk;nog Nogai;udm Udmurt;
kpv Komi;mhr Eastern Mari;mrj Hill Mari;myv Erzya;mdf Moksha;krl Karelian;vep Veps;
sme Northern Sami;smn Inari Sami;sma Southern Sami;liv Livonian;vro Voro
""",
    "experimental": """
ain Ainu;ryu Okinawan;ami Amis;tay Atayal;pwn Paiwan;bnn Bunun;tao Yami;
yrk Nenets;kca Khanty;mns Mansi;evn Evenki;eve Even;ckt Chukchi;niv Nivkh;ket Ket;
ale Aleut;esu Central Yupik;ipk Inupiaq;chy Cheyenne;lkt Lakota;dak Dakota;
cho Choctaw;mus Muscogee;hop Hopi;zun Zuni;ood O'odham;yaq Yaqui;hch Huichol;
tob Toba;wca Yanomami;guc Wayuu;pbb Paez;cbi Chachi;qvi Imbabura Quichua;
kgp Kaingang;gub Guajajara;xav Xavante;tpw Tupi;yrl Nheengatu;
pjt Pitjantjatjara;wbp Warlpiri;aer Eastern Arrernte;tcs Torres Strait Creole;
rop Kriol;tiw Tiwi;gup Gunwinggu;djr Djambarrpuyngu;bvr Burarra
""",
}


def _parse_rare() -> dict[str, tuple[str, QualityTier]]:
    out: dict[str, tuple[str, QualityTier]] = {}
    for tier, table in _RARE.items():
        for entry in table.replace("\n", "").split(";"):
            code, _, name = entry.strip().partition(" ")
            out[code] = (name, tier)
    return out


RARE_LANGUAGES: Final[dict[str, tuple[str, QualityTier]]] = _parse_rare()
_RARE_LOOKUP: Final[dict[str, str]] = {
    **{code: code for code in RARE_LANGUAGES},
    **{name.lower(): code for code, (name, _tier) in RARE_LANGUAGES.items()},
}


def resolve_rare_language(value: str) -> str:
    """A rare language (ISO 639-3 code or English name), or one of the 119."""
    key = _normalize(value)
    if key in _RARE_LOOKUP:
        return _RARE_LOOKUP[key]
    try:
        return resolve_translation_language(value)
    except UnknownLanguage:
        raise UnknownLanguage(
            f"unsupported language {value.strip()!r}: see GET /api/languages"
        ) from None


def language_name(code: str) -> str:
    if code in TRANSLATION_LANGUAGES:
        return TRANSLATION_LANGUAGES[code]
    if code in RARE_LANGUAGES:
        return RARE_LANGUAGES[code][0]
    return code
