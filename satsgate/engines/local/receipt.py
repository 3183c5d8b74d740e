"""A receipt's OCR text -> { merchant, date, currency, total, tax, items }.

Rules, not a model: amounts in the usual notations (12.50, 12,50, 1,234.56,
1.234,56, 1 234,56, ¥1,280), dates in ISO, day-first, month-first and written
forms (15 Mar 2024, March 15, 2024, 15. März 2024, 2024年3月15日), totals, tax and
item lines recognised by keywords in English, German, French, Spanish, Italian,
Portuguese, Dutch, Chinese and Japanese. A field it cannot find is null.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

# -- amounts -------------------------------------------------------------------------------

_CURRENCY_CODES = (
    "EUR", "USD", "GBP", "CHF", "JPY", "CNY", "RMB", "CAD", "AUD", "NZD", "SEK", "NOK", "DKK",
    "PLN", "CZK", "HUF", "INR", "BRL", "MXN", "HKD", "SGD", "ZAR", "TRY", "KRW",
)  # fmt: skip
# Longest first: "R$" before "$".
_SYMBOLS = (
    ("CA$", "CAD"), ("C$", "CAD"), ("A$", "AUD"), ("AU$", "AUD"), ("NZ$", "NZD"),
    ("HK$", "HKD"), ("S$", "SGD"), ("R$", "BRL"), ("US$", "USD"), ("€", "EUR"), ("£", "GBP"),
    ("¥", "JPY"), ("円", "JPY"), ("元", "CNY"), ("₹", "INR"), ("₩", "KRW"), ("zł", "PLN"),
    ("Kč", "CZK"), ("$", "USD"), ("Fr.", "CHF"),
)  # fmt: skip
_ZERO_DECIMAL = frozenset({"JPY", "KRW", "HUF"})

_SYMBOL_RE = "|".join(re.escape(s) for s, _c in _SYMBOLS)
_NUMBER = r"\d{1,3}(?:[.,'\u2019 ]\d{3})+(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?"
# An amount: a number with two decimals, or any number beside a currency sign or code.
_AMOUNT = re.compile(
    rf"(?P<neg>-)?(?:(?P<pre>{_SYMBOL_RE}|\b(?:{'|'.join(_CURRENCY_CODES)})\b)\s?)?"
    rf"(?P<num>{_NUMBER})(?![\d%])"
    rf"(?:\s?(?P<post>{_SYMBOL_RE}|\b(?:{'|'.join(_CURRENCY_CODES)})\b))?"
)


def parse_number(text: str) -> Decimal | None:
    """'1.234,56' -> 1234.56, '1,234.56' -> 1234.56, '12,5' -> 12.5, '1,280' -> 1280."""
    text = re.sub(r"[\s'\u2019]", "", text)
    if "," in text and "." in text:
        decimal_sep = "," if text.rfind(",") > text.rfind(".") else "."
    elif "," in text or "." in text:
        sep = "," if "," in text else "."
        tail = text.rsplit(sep, 1)[1]
        decimal = len(tail) in (1, 2) or (text.count(sep) == 1 and len(tail) != 3)
        decimal_sep = sep if decimal else ""
    else:
        decimal_sep = ""
    thousands = {",", "."} - {decimal_sep}
    for sep in thousands:
        text = text.replace(sep, "")
    if decimal_sep:
        text = text.replace(decimal_sep, ".")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class Amount:
    value: Decimal
    currency: str | None
    start: int
    has_decimals: bool


def find_amounts(line: str) -> list[Amount]:
    found = []
    for match in _AMOUNT.finditer(line):
        num = match.group("num")
        sign = match.group("pre") or match.group("post")
        has_decimals = bool(re.search(r"[.,]\d{1,2}$", num))
        if not has_decimals and sign is None:
            continue  # a bare integer is a quantity, a code or a phone number
        # A date or time, not money: 15.03 / 12:30 next to more digits.
        before, after = line[: match.start("num")], line[match.end("num") :]
        if re.search(r"[\d][./:-]$", before) or re.match(r"^[./:-]\d", after):
            continue
        value = parse_number(num)
        if value is None:
            continue
        if match.group("neg"):
            value = -value
        found.append(Amount(value, _currency_of(sign), match.start(), has_decimals))
    return found


def _currency_of(sign: str | None) -> str | None:
    if sign is None:
        return None
    upper = sign.upper()
    if upper in _CURRENCY_CODES:
        return "CNY" if upper == "RMB" else upper
    return dict(_SYMBOLS).get(sign)


# -- keywords ------------------------------------------------------------------------------


def _words(*words: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-zÀ-ÿ])(?:" + "|".join(words) + r")(?![A-Za-zÀ-ÿ])", re.I)


_SUBTOTAL = _words(
    r"sub-?\s?total",
    "zwischensumme",
    r"sous-?total",
    "subtotale",
    "netto",
    "net",
    r"total\s+(?:ht|excl\.?|before tax|net)",
    "小計",
    "小计",
)
_TOTAL = re.compile(
    _words(
        "total",
        r"grand\s+total",
        r"amount\s+due",
        r"balance\s+due",
        r"total\s+due",
        "summe",
        "gesamt",
        "gesamtbetrag",
        r"zu\s+zahlen",
        "endbetrag",
        r"total\s+ttc",
        "montant",
        r"net\s+à\s+payer",
        "totale",
        "importe",
        r"total\s+a\s+pagar",
        "totaal",
        r"te\s+betalen",
    ).pattern
    + r"|合計|合计|总计|總計|お会計",
    re.I,
)
_TAX = re.compile(
    _words(
        "tax",
        "vat",
        r"sales\s+tax",
        "mwst",
        r"mwst\.",
        "ust",
        "tva",
        "iva",
        "gst",
        "hst",
        "btw",
        r"incl\.?\s+tax",
        "steuer",
        "imposta",
        "impuesto",
    ).pattern
    + r"|消費税|税|增值税",
    re.I,
)
_PAYMENT = _words(
    "cash",
    "change",
    "card",
    "visa",
    "mastercard",
    "amex",
    "tendered",
    "paid",
    "payment",
    "rückgeld",
    "gegeben",
    "kreditkarte",
    "ec",
    "girocard",
    "espèces",
    "rendu",
    "monnaie",
    "carte",
    "cb",
    "efectivo",
    "cambio",
    "tarjeta",
    "contanti",
    "resto",
    "carta",
    "dinheiro",
    "troco",
    "tip",
    "trinkgeld",
    "pourboire",
    "propina",
    "お釣り",
    "お預り",
)
_CASH_DE = re.compile(r"^bar\b", re.I)  # German "Bar 50,00": cash (not "Chocolate bar")


def _is_payment(line: str) -> bool:
    return bool(_PAYMENT.search(line) or _CASH_DE.match(line))


_NOT_MERCHANT = _words(
    "receipt",
    "invoice",
    "rechnung",
    "quittung",
    "beleg",
    "kassenbon",
    "ticket",
    "reçu",
    "facture",
    "recibo",
    "factura",
    "scontrino",
    "ricevuta",
    "tel",
    "phone",
    "fax",
    "www",
    "welcome",
    "willkommen",
    "bienvenue",
    "bienvenido",
    "benvenuto",
    "date",
    "datum",
    "order",
    "table",
    "tisch",
    "vat",
    "tax",
    "ust-id",
    "siret",
    "cif",
    "nif",
)

# -- dates ---------------------------------------------------------------------------------

_MONTHS = {
    # English, German, French, Spanish, Italian, Portuguese, Dutch (full and abbreviated)
    "jan": 1, "january": 1, "januar": 1, "janvier": 1, "enero": 1, "ene": 1, "gennaio": 1,
    "gen": 1, "janeiro": 1, "januari": 1, "jän": 1,
    "feb": 2, "february": 2, "februar": 2, "février": 2, "fevrier": 2, "févr": 2,
    "febrero": 2, "febbraio": 2, "fevereiro": 2, "fev": 2, "februari": 2,
    "mar": 3, "march": 3, "märz": 3, "maerz": 3, "mär": 3, "mars": 3, "marzo": 3, "março": 3,
    "marco": 3, "maart": 3, "mrt": 3,
    "apr": 4, "april": 4, "avril": 4, "avr": 4, "abril": 4, "abr": 4, "aprile": 4,
    "may": 5, "mai": 5, "mayo": 5, "maggio": 5, "mag": 5, "maio": 5, "mei": 5,
    "jun": 6, "june": 6, "juni": 6, "juin": 6, "junio": 6, "giugno": 6, "giu": 6, "junho": 6,
    "jul": 7, "july": 7, "juli": 7, "juillet": 7, "juil": 7, "julio": 7, "luglio": 7,
    "lug": 7, "julho": 7,
    "aug": 8, "august": 8, "août": 8, "aout": 8, "agosto": 8, "ago": 8, "augustus": 8,
    "sep": 9, "sept": 9, "september": 9, "septembre": 9, "septiembre": 9, "settembre": 9,
    "set": 9, "setembro": 9,
    "oct": 10, "october": 10, "oktober": 10, "okt": 10, "octobre": 10, "octubre": 10,
    "ottobre": 10, "ott": 10, "outubro": 10, "out": 10,
    "nov": 11, "november": 11, "novembre": 11, "noviembre": 11, "novembro": 11,
    "dec": 12, "december": 12, "dezember": 12, "dez": 12, "décembre": 12, "decembre": 12,
    "déc": 12, "diciembre": 12, "dic": 12, "dicembre": 12, "dezembro": 12,
}  # fmt: skip
_MONTH_RE = "|".join(sorted((re.escape(m) for m in _MONTHS), key=len, reverse=True))

_ISO_DATE = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
_CJK_DATE = re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*日")
_NUMERIC_DATE = re.compile(r"(?<![\d.,])(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})(?![\d])")
_DAY_MONTH = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\.?\s+({_MONTH_RE})\.?,?\s+(\d{{4}})\b", re.I
)
_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)


def _valid(year: int, month: int, day: int) -> str | None:
    if year < 100:
        year += 2000
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def find_date(text: str, month_first: bool = False) -> str | None:
    """The first date on the receipt, as YYYY-MM-DD. ``month_first``: read an ambiguous
    01/02/2024 as January 2 (US receipts) rather than 1 February."""
    for line in text.splitlines():
        candidates: list[str | None] = []
        if m := _ISO_DATE.search(line):
            candidates.append(_valid(int(m[1]), int(m[2]), int(m[3])))
        if m := _CJK_DATE.search(line):
            candidates.append(_valid(int(m[1]), int(m[2]), int(m[3])))
        if m := _DAY_MONTH.search(line):
            candidates.append(_valid(int(m[3]), _MONTHS[m[2].lower()], int(m[1])))
        if m := _MONTH_DAY.search(line):
            candidates.append(_valid(int(m[3]), _MONTHS[m[1].lower()], int(m[2])))
        if found := next((c for c in candidates if c), None):
            return found
        if m := _NUMERIC_DATE.search(line):
            a, sep, b, year = int(m[1]), m[2], int(m[3]), int(m[4])
            if a > 12 or sep == "." or not month_first:
                day, month = (a, b) if (a > 12 or b <= 12) else (b, a)
            else:
                month, day = (a, b) if b <= 31 and a <= 12 else (b, a)
            if found := _valid(year, month, day):
                return found
    return None


# -- the receipt ---------------------------------------------------------------------------

_QTY_PREFIX = re.compile(r"^\s*(\d{1,3})\s*[x×*]\s*(?=[^\W\d])", re.I)
_TRAILING_AMOUNT = re.compile(rf"\s(?:{_SYMBOL_RE})?\s?(?P<num>{_NUMBER})\s*(?:{_SYMBOL_RE})?\s*$")
_QTY_INNER = re.compile(r"(?<![\d.,])(\d{1,3})\s*[x×*@]\s*(?=\S*\d)", re.I)


def _money(value: Decimal | None, currency: str | None) -> int | float | None:
    if value is None:
        return None
    if currency in _ZERO_DECIMAL and value == value.to_integral_value():
        return int(value)
    return float(round(value, 2))


def parse_receipt(text: str) -> dict[str, Any]:
    lines = [" ".join(line.split()) for line in text.splitlines()]
    lines = [line for line in lines if line]
    currency = _currency(text, lines)
    summary = _summary(lines)
    merchant = _merchant(lines)
    # The items end at the first summary line (else at the total's, else at the end).
    end = summary.first if summary.first is not None else (summary.total_line or len(lines))
    items = [
        item
        for line in lines[:end]
        if line != merchant and (item := _item(line, currency)) is not None
    ]
    month_first = currency in ("USD", "CAD") or bool(re.search(r"\bUSA?\b", text))
    return {
        "merchant": merchant,
        "date": find_date(text, month_first=month_first),
        "currency": currency,
        "total": _money(summary.total, currency),
        "tax": _money(summary.tax, currency),
        "items": items,
    }


def _currency(text: str, lines: list[str]) -> str | None:
    """The receipt's currency: the code written most (a code outweighs a sign)."""
    currencies: dict[str, int] = {}
    for code in re.findall(rf"\b({'|'.join(_CURRENCY_CODES)})\b", text):
        key = "CNY" if code == "RMB" else code
        currencies[key] = currencies.get(key, 0) + 3  # a written code outweighs a sign
    for line in lines:
        for amount in find_amounts(line):
            if amount.currency:
                currencies[amount.currency] = currencies.get(amount.currency, 0) + 1
    currency = max(currencies, key=lambda c: currencies[c]) if currencies else None
    if currency == "JPY" and re.search(r"元|RMB|CNY|人民币", text):
        currency = "CNY"
    return currency


@dataclass(frozen=True)
class _Summary:
    total: Decimal | None
    total_line: int | None  # the line the total was read from
    tax: Decimal | None
    first: int | None  # the first summary line (subtotal, tax, total): the items end there


def _summary(lines: list[str]) -> _Summary:
    total: Decimal | None = None
    total_line: int | None = None
    tax: Decimal | None = None
    first_summary: int | None = None
    for index, line in enumerate(lines):
        amounts = find_amounts(line)
        if _SUBTOTAL.search(line):
            first_summary = index if first_summary is None else first_summary
            continue
        if _TAX.search(line) and not _TOTAL.search(line.split(" ")[0]):
            if amounts and tax is None:
                tax = amounts[-1].value
            first_summary = index if first_summary is None else first_summary
            continue
        if _TOTAL.search(line) and not _is_payment(line):
            first_summary = index if first_summary is None else first_summary
            if amounts and (total is None or amounts[-1].value > total):
                total, total_line = amounts[-1].value, index
    if total is None:  # no total line: the largest amount not paid or handed back
        candidates = [
            a.value for line in lines if not _is_payment(line) for a in find_amounts(line)
        ]
        total = max(candidates) if candidates else None
    return _Summary(total, total_line, tax, first_summary)


def _merchant(lines: list[str]) -> str | None:
    """The first of the top lines that reads as a name: mostly letters, no total or date."""
    for line in lines[:6]:
        letters = sum(ch.isalpha() for ch in line)
        if (
            letters >= 3
            and letters >= len(line.replace(" ", "")) * 0.6
            and not _NOT_MERCHANT.search(line)
            and not _TOTAL.search(line)
            and find_date(line) is None
        ):
            return line
    return None


def _item(line: str, currency: str | None) -> dict[str, Any] | None:
    """An item line's name, quantity, price and unit price; None for any other line."""
    if _is_payment(line) or _TAX.search(line):
        return None
    amounts = find_amounts(line)
    if not amounts:
        return None
    price = amounts[-1].value  # the line's total is its last amount
    head = line[: amounts[-1].start]
    quantity = 1
    unit_price: Decimal | None = None
    if m := _QTY_PREFIX.match(head):  # "2 x Latte 9.00"
        quantity, head = int(m[1]), head[m.end() :]
    elif m := _QTY_INNER.search(head):  # "Ale 2 @ 4.20 8.40"
        quantity = int(m[1])
        inner = [a for a in amounts[:-1] if a.start > m.start()]
        unit_price = inner[0].value if inner else None
        head = head[: m.start()]
    # Amounts left at the end of the name are a unit price ("Latte 4.50 9.00"); those
    # inside it are part of it ("Water 1,5L").
    while (tail := _TRAILING_AMOUNT.search(head)) is not None:
        if quantity > 1 and unit_price is None:
            unit_price = parse_number(tail["num"])
        head = head[: tail.start()]
    name = head.strip(" .:-*\t")
    if sum(ch.isalpha() for ch in name) < 2:
        return None
    item: dict[str, Any] = {"name": name, "quantity": quantity, "price": _money(price, currency)}
    if unit_price is not None:
        item["unitPrice"] = _money(unit_price, currency)
    return item
