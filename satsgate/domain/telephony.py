"""Destinations for SMS, calls, fax and the voice bridge: E.164 prefix -> country and rates.

Rates are the fixed fallback in sats (BTC-pegged: :mod:`satsgate.services.catalog.rates`
scales them by the live BTC price). A number whose prefix is not in the table
has no route and is refused before payment. The longest matching prefix wins,
so NANP islands (``1876`` Jamaica) price apart from ``1`` (US and Canada).

The operator may replace the built-in table with a CSV file (``[telephony] rates_file``,
read and checked at start-up: :func:`load_rates_file`)::

    prefix,country,name,sms_sats,call_sats_per_minute
    1,US,United States,15,30
    44,GB,United Kingdom,40,40

The table is app-scoped and immutable: ``create_app`` builds one :class:`Destinations`
(the built-in :data:`BUILTIN` or the operator's file) and keeps it on the app's rate book
(``RateBook.destinations``), so every price function that takes the book prices by it.
Params validators reach it through pydantic's validation context
(:func:`validation_context`, filled by ``ServiceSpec.parse``); a validator given no table
refuses the number (:func:`from_context`), it never guesses one.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from pydantic import ValidationInfo

E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


@dataclass(frozen=True)
class Destination:
    prefix: str  # calling code digits, without "+"
    country: str  # ISO 3166-1 alpha-2
    name: str
    sms_sats: int  # one SMS segment
    call_sats_per_minute: int  # plain telephony (automated call, voice bridge line)


# prefix country name sms_sats call_sats_per_minute
_TABLE: Final[str] = """
1 US United-States 15 30;1876 JM Jamaica 60 150;1809 DO Dominican-Republic 60 120;
1829 DO Dominican-Republic 60 120;1849 DO Dominican-Republic 60 120;1787 PR Puerto-Rico 15 30;
1939 PR Puerto-Rico 15 30;1242 BS Bahamas 60 150;1246 BB Barbados 60 150;
1868 TT Trinidad-and-Tobago 60 150;7 RU Russia 80 120;20 EG Egypt 90 160;
27 ZA South-Africa 40 80;30 GR Greece 50 60;31 NL Netherlands 90 50;32 BE Belgium 90 60;
33 FR France 60 50;34 ES Spain 70 50;36 HU Hungary 70 60;39 IT Italy 70 50;40 RO Romania 60 60;
41 CH Switzerland 60 60;43 AT Austria 90 60;44 GB United-Kingdom 40 40;45 DK Denmark 50 50;
46 SE Sweden 60 50;47 NO Norway 60 50;48 PL Poland 40 50;49 DE Germany 80 50;51 PE Peru 60 80;
52 MX Mexico 30 40;54 AR Argentina 60 80;55 BR Brazil 30 50;56 CL Chile 50 60;
57 CO Colombia 40 60;60 MY Malaysia 40 60;61 AU Australia 40 50;62 ID Indonesia 50 90;
63 PH Philippines 30 120;64 NZ New-Zealand 80 60;65 SG Singapore 40 40;66 TH Thailand 30 60;
81 JP Japan 80 80;82 KR South-Korea 40 60;84 VN Vietnam 50 100;86 CN China 40 50;
90 TR Turkey 30 80;91 IN India 20 40;92 PK Pakistan 60 90;94 LK Sri-Lanka 80 110;
212 MA Morocco 90 200;213 DZ Algeria 100 200;216 TN Tunisia 100 200;221 SN Senegal 100 200;
233 GH Ghana 80 160;234 NG Nigeria 90 150;254 KE Kenya 60 120;255 TZ Tanzania 70 150;
256 UG Uganda 70 150;351 PT Portugal 40 50;353 IE Ireland 60 50;354 IS Iceland 70 80;
358 FI Finland 90 60;359 BG Bulgaria 80 80;370 LT Lithuania 40 60;371 LV Latvia 40 60;
372 EE Estonia 60 60;380 UA Ukraine 60 90;385 HR Croatia 60 60;386 SI Slovenia 60 60;
420 CZ Czechia 60 60;421 SK Slovakia 60 60;502 GT Guatemala 70 100;503 SV El-Salvador 70 100;
506 CR Costa-Rica 60 80;507 PA Panama 60 80;593 EC Ecuador 60 90;598 UY Uruguay 60 90;
852 HK Hong-Kong 40 40;880 BD Bangladesh 50 90;886 TW Taiwan 50 60;961 LB Lebanon 80 150;
962 JO Jordan 80 150;966 SA Saudi-Arabia 40 80;971 AE United-Arab-Emirates 30 80;
972 IL Israel 40 60;974 QA Qatar 50 100
"""


def _parse() -> dict[str, Destination]:
    out: dict[str, Destination] = {}
    for entry in _TABLE.replace("\n", "").split(";"):
        prefix, country, name, sms, call = entry.split()
        if prefix in out:
            raise ValueError(f"duplicate prefix {prefix}")
        out[prefix] = Destination(prefix, country, name.replace("-", " "), int(sms), int(call))
    return out


RATES_HEADER: Final = ("prefix", "country", "name", "sms_sats", "call_sats_per_minute")
MAX_RATE_SATS: Final = 1_000_000
_PREFIX = re.compile(r"^[1-9][0-9]{0,5}$")
_COUNTRY = re.compile(r"^[A-Z]{2}$")


class RatesFileError(ValueError):
    """The operator's rates file is unusable; satsgate refuses to start and says where."""


def parse_rates_csv(text: str, where: str = "rates file") -> dict[str, Destination]:
    """A rates CSV (header ``prefix,country,name,sms_sats,call_sats_per_minute``; blank
    lines and ``#`` comments ignored) -> the table; RatesFileError naming the line."""
    rows = [
        (number, row)
        for number, row in enumerate(csv.reader(io.StringIO(text)), start=1)
        if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")
    ]
    if not rows or tuple(c.strip().lower() for c in rows[0][1]) != RATES_HEADER:
        raise RatesFileError(f"{where}: the first line must be {','.join(RATES_HEADER)}")
    table: dict[str, Destination] = {}
    for number, row in rows[1:]:
        at = f"{where} line {number}"
        if len(row) != len(RATES_HEADER):
            raise RatesFileError(f"{at}: {len(row)} fields, expected {len(RATES_HEADER)}")
        prefix, country, name, sms, call = (cell.strip() for cell in row)
        prefix = prefix.removeprefix("+")
        if not _PREFIX.match(prefix):
            raise RatesFileError(f"{at}: prefix {prefix!r} is not 1 to 6 digits (no leading 0)")
        if prefix in table:
            raise RatesFileError(f"{at}: prefix {prefix} is listed twice")
        if not _COUNTRY.match(country):
            raise RatesFileError(f"{at}: country {country!r} is not an ISO code like US")
        if not name or len(name) > 64:
            raise RatesFileError(f"{at}: name must be 1 to 64 characters")
        sats = []
        for label, value in (("sms_sats", sms), ("call_sats_per_minute", call)):
            if not value.isdigit() or not 1 <= int(value) <= MAX_RATE_SATS:
                raise RatesFileError(f"{at}: {label} {value!r} is not 1 to {MAX_RATE_SATS}")
            sats.append(int(value))
        table[prefix] = Destination(prefix, country, name, sats[0], sats[1])
    if not table:
        raise RatesFileError(f"{where}: no destinations")
    return table


def load_rates_file(path: str | Path) -> Destinations:
    """Read and check the operator's rates file; RatesFileError when it is unusable."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise RatesFileError(f"rates file {path}: cannot read it ({exc})") from None
    return Destinations(parse_rates_csv(text, f"rates file {path}"))


class NoRoute(ValueError):
    """The number's prefix is in no row of the table: the country is not served."""


def check_e164(value: str) -> str:
    """``+`` then 7 to 15 digits, no leading zero: the number as sent, or ValueError."""
    if not E164.match(value):
        raise ValueError(
            "phone number must be E.164: '+' then country code and number, e.g. +14155550123"
        )
    return value


@dataclass(frozen=True, eq=False)
class Destinations:
    """One app's destination table, never changed once built: prefix -> its
    :class:`Destination` (a read-only copy, non-empty, each row under its own prefix),
    the longest prefix, and the longest-prefix lookup."""

    table: Mapping[str, Destination]
    max_prefix: int = field(init=False)  # the longest prefix, in digits
    countries: frozenset[str] = field(init=False)  # the ISO codes of the rows

    def __post_init__(self) -> None:
        rows = dict(self.table)
        if not rows:
            raise RatesFileError("an empty rates table")
        for prefix, row in rows.items():
            if row.prefix != prefix:
                raise ValueError(f"prefix {prefix} holds the row of {row.prefix}")
        object.__setattr__(self, "table", MappingProxyType(rows))
        object.__setattr__(self, "max_prefix", max(len(p) for p in rows))
        object.__setattr__(self, "countries", frozenset(r.country for r in rows.values()))

    def destination(self, number: str) -> Destination:
        """The destination of an E.164 number (longest prefix): ValueError when it is not
        E.164, NoRoute when its country is not served."""
        digits = check_e164(number)[1:]
        for length in range(min(self.max_prefix, len(digits)), 0, -1):
            found = self.table.get(digits[:length])
            if found is not None:
                return found
        raise NoRoute(f"no route to {number}: destination country not served")

    def __repr__(self) -> str:
        return f"Destinations({len(self.table)} prefixes)"


# The built-in table: what an app serves without [telephony] rates_file, and what
# pricing uses where no app exists (the FALLBACK rate book of tests and tools).
BUILTIN: Final = Destinations(_parse())

_CONTEXT_KEY: Final = "satsgate.destinations"


def validation_context(destinations: Destinations) -> dict[str, Any]:
    """The pydantic validation context that gives params validators this table
    (``Model.model_validate(body, context=validation_context(table))``)."""
    return {_CONTEXT_KEY: destinations}


def from_context(info: ValidationInfo) -> Destinations:
    """The table a validator checks numbers against: the one in pydantic's validation
    context. Fails closed: without one (a bare ``model_validate``) the number is refused
    (ValueError), never checked against some other table."""
    context = info.context
    found = context.get(_CONTEXT_KEY) if isinstance(context, Mapping) else None
    if not isinstance(found, Destinations):
        raise ValueError("no destination table to check the number against (nothing served)")
    return found


def served_number(value: str, info: ValidationInfo) -> str:
    """A params validator: ``value`` is E.164 and in a country the context's table
    serves, else ValueError (fails closed without a table: :func:`from_context`)."""
    from_context(info).destination(value)
    return value
