"""IATA Bar Coded Boarding Pass (BCBP, Resolution 792) messages: parse and write.

A message is the fixed mandatory header (format ``M``, number of legs, passenger name,
e-ticket indicator), then per leg the 37 characters of mandatory items ending with the
hexadecimal size of that leg's variable part. The first leg's variable part starts
with the conditional items that occur once (``>``, version, their size, then passenger
description, check-in source, issue date, document type, issuer, bag tags); each leg's
variable part holds that leg's repeated conditional items (their size, then airline
numeric code, document number, selectee, documentation check, marketing carrier,
frequent-flyer airline and number, ID/AD, baggage allowance, fast track) and then
data for the airline's own use. Security data (``^``) may follow the last leg.

Mandatory items are strict (a message that breaks them is not a boarding pass);
conditional items are read leniently, as scanners do: airlines fill them unevenly.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

_MANDATORY_LEG = 37
_HEADER = 23
_AIRPORT = re.compile(r"^[A-Z]{3}$")
_CARRIER = re.compile(r"^[A-Z0-9]{2,3}$")
_TITLES = frozenset({"MR", "MRS", "MS", "MISS", "MSTR", "DR", "PROF", "REV", "CHD", "INF"})


class BcbpError(ValueError):
    """Not a BCBP message (or a broken one)."""


@dataclass(frozen=True)
class Leg:
    pnr: str  # operating carrier booking reference
    origin: str  # IATA airport code
    destination: str
    carrier: str  # operating carrier designator
    flight_number: str  # "834", "1234A"
    julian_date: int | None  # day of the year of the flight; None when blank
    compartment: str
    seat: str  # "1A"; "" when not assigned
    sequence: str  # check-in sequence number, "25"
    passenger_status: str
    marketing_carrier: str = ""
    frequent_flyer: str = ""  # "AC 123456789"
    baggage_allowance: str = ""
    fast_track: bool = False
    airline_data: str = ""  # the airline's own part of this leg, as is

    @property
    def flight(self) -> str:
        return f"{self.carrier}{self.flight_number}"


@dataclass(frozen=True)
class BoardingPassData:
    message: str
    passenger_name: str  # as encoded: "DESMARAIS/LUC"
    electronic_ticket: bool
    legs: tuple[Leg, ...]
    version: str = ""
    issue_date: str = ""  # "6326": last digit of the year + day of the year
    issuer: str = ""
    document_type: str = ""  # "B" boarding pass, "I" itinerary receipt
    passenger_description: str = ""
    security_data: str = field(default="", repr=False)

    @property
    def surname(self) -> str:
        return self.passenger_name.partition("/")[0].strip()

    @property
    def given_names(self) -> str:
        """Given names without a trailing title (MR, MRS, MS ...)."""
        words = self.passenger_name.partition("/")[2].split()
        if len(words) > 1 and words[-1] in _TITLES:
            words.pop()
        return " ".join(words)

    @property
    def passenger(self) -> str:
        """Given names then surname, as printed on a pass: "LUC DESMARAIS"."""
        return " ".join(p for p in (self.given_names, self.surname) if p) or self.passenger_name

    def flight_date(self, leg: Leg, today: datetime.date) -> datetime.date | None:
        """The leg's date: the day of the year in the year the issue date names, else the
        year that puts it nearest to ``today`` (the message carries no year)."""
        if leg.julian_date is None:
            return None
        if self.issue_date[:1].isdigit() and self.issue_date[1:].isdigit():
            issued = _from_issue_date(self.issue_date, today)
            if issued is not None:
                for year in (issued.year, issued.year + 1):
                    day = _day_of_year(year, leg.julian_date)
                    if day is not None and day >= issued - datetime.timedelta(days=1):
                        return day
        days = [
            d
            for y in (today.year - 1, today.year, today.year + 1)
            if (d := _day_of_year(y, leg.julian_date)) is not None
        ]
        return min(days, key=lambda d: abs((d - today).days)) if days else None


def _day_of_year(year: int, day: int) -> datetime.date | None:
    date = datetime.date(year, 1, 1) + datetime.timedelta(days=day - 1)
    return date if date.year == year else None


def _from_issue_date(value: str, today: datetime.date) -> datetime.date | None:
    """``YDDD`` (last digit of the year, day of the year): the latest such date not
    after a year from today."""
    digit, day = int(value[0]), int(value[1:])
    year = today.year + 1 - ((today.year + 1 - digit) % 10)
    for candidate in (year, year - 10):
        date = _day_of_year(candidate, day)
        if date is not None and date <= today + datetime.timedelta(days=366):
            return date
    return None


def _hex(value: str) -> int:
    if len(value) != 2:
        raise ValueError(value)
    return int(value, 16)


def _strip_zeros(value: str) -> str:
    value = value.strip()
    stripped = value.lstrip("0")
    return stripped if stripped and stripped[0].isdigit() else (stripped or value)


def looks_like_bcbp(message: str) -> bool:
    return len(message) >= _HEADER + _MANDATORY_LEG and message[0] == "M" and message[1].isdigit()


def parse(message: str) -> BoardingPassData:
    """The items of a BCBP message; BcbpError when it is not one."""
    if not looks_like_bcbp(message):
        raise BcbpError("not an IATA boarding pass barcode")
    count = int(message[1])
    if not 1 <= count <= 4:
        raise BcbpError(f"{count} legs encoded; a boarding pass holds 1 to 4")
    name = message[2:22].strip()
    if not name:
        raise BcbpError("no passenger name")
    pos = _HEADER
    legs: list[Leg] = []
    unique: dict[str, str] = {}
    for index in range(count):
        item = message[pos : pos + _MANDATORY_LEG]
        if len(item) < _MANDATORY_LEG:
            raise BcbpError(f"leg {index + 1} is cut short")
        origin, destination, carrier = item[7:10], item[10:13], item[13:16].strip()
        if not (_AIRPORT.match(origin) and _AIRPORT.match(destination)):
            raise BcbpError(f"leg {index + 1}: airport codes {origin!r} {destination!r}")
        if not _CARRIER.match(carrier):
            raise BcbpError(f"leg {index + 1}: carrier {carrier!r}")
        julian = item[21:24].strip()
        if julian and not (julian.isdigit() and 1 <= int(julian) <= 366):
            raise BcbpError(f"leg {index + 1}: date of flight {julian!r}")
        try:
            size = _hex(item[35:37])
        except ValueError:
            raise BcbpError(f"leg {index + 1}: variable size {item[35:37]!r}") from None
        pos += _MANDATORY_LEG
        variable = message[pos : pos + size]
        if len(variable) < size:
            raise BcbpError(f"leg {index + 1}: variable part cut short")
        pos += size
        if index == 0 and variable.startswith(">"):
            unique, variable = _unique_items(variable)
        repeated, airline = _repeated_items(variable)
        flight = item[16:21]
        legs.append(
            Leg(
                pnr=item[0:7].strip(),
                origin=origin,
                destination=destination,
                carrier=carrier,
                flight_number=(_strip_zeros(flight[:4]) + flight[4:]).strip(),
                julian_date=int(julian) if julian else None,
                compartment=item[24].strip(),
                seat=_strip_zeros(item[25:29]),
                sequence=_strip_zeros(item[29:34]),
                passenger_status=item[34].strip(),
                marketing_carrier=repeated.get("marketing_carrier", ""),
                frequent_flyer=repeated.get("frequent_flyer", ""),
                baggage_allowance=repeated.get("baggage_allowance", ""),
                fast_track=repeated.get("fast_track", "") == "Y",
                airline_data=airline,
            )
        )
    rest = message[pos:]
    security = rest if rest.startswith("^") else ""
    return BoardingPassData(
        message=message,
        passenger_name=name,
        electronic_ticket=message[22] == "E",
        legs=tuple(legs),
        version=unique.get("version", ""),
        issue_date=unique.get("issue_date", ""),
        issuer=unique.get("issuer", ""),
        document_type=unique.get("document_type", ""),
        passenger_description=unique.get("passenger_description", ""),
        security_data=security,
    )


def _unique_items(variable: str) -> tuple[dict[str, str], str]:
    """The conditional items that occur once (first leg), and what follows them."""
    items = {"version": variable[1:2]}
    try:
        size = _hex(variable[2:4])
    except ValueError:
        return items, variable[4:]
    block = variable[4 : 4 + size]
    for key, start, end in (
        ("passenger_description", 0, 1),
        ("checkin_source", 1, 2),
        ("issue_source", 2, 3),
        ("issue_date", 3, 7),
        ("document_type", 7, 8),
        ("issuer", 8, 11),
    ):
        items[key] = block[start:end].strip()
    return items, variable[4 + size :]


def _repeated_items(variable: str) -> tuple[dict[str, str], str]:
    """A leg's repeated conditional items, and the airline's own data after them."""
    if len(variable) < 2:
        return {}, variable
    try:
        size = _hex(variable[:2])
    except ValueError:
        return {}, variable
    block = variable[2 : 2 + size]
    items = {
        "marketing_carrier": block[15:18].strip(),
        "frequent_flyer": " ".join(p for p in (block[18:21].strip(), block[21:37].strip()) if p),
        "baggage_allowance": block[38:41].strip(),
        "fast_track": block[41:42],
    }
    return items, variable[2 + size :]


# -- writing (tests, examples) ---------------------------------------------------------------


@dataclass(frozen=True)
class LegInput:
    pnr: str
    origin: str
    destination: str
    carrier: str
    flight: str  # "834" or "0834A"
    julian_date: int
    compartment: str = "Y"
    seat: str = "12C"
    sequence: int = 1
    marketing_carrier: str = ""
    frequent_flyer: str = ""
    airline_data: str = ""


def encode(
    passenger_name: str,
    legs: list[LegInput],
    *,
    issue_date: str = "",
    issuer: str = "",
    security: str = "",
) -> str:
    """A BCBP message (version 6) for these legs: the inverse of :func:`parse`."""
    out = ["M", str(len(legs)), f"{passenger_name:<20.20}", "E"]
    for index, leg in enumerate(legs):
        number = leg.flight if leg.flight[-1:].isalpha() else leg.flight + " "
        digits, suffix = number[:-1], number[-1]
        seat = leg.seat.rjust(4, "0") if leg.seat else "    "
        repeated = (
            f"{'':3}{'':10}{'0'}{'0'}{leg.marketing_carrier:<3}"
            f"{leg.frequent_flyer[:3]:<3}{leg.frequent_flyer[3:].strip():<16}{' '}{'20K'}{'N'}"
        )
        variable = f"{len(repeated):02X}{repeated}{leg.airline_data}"
        if index == 0:
            unique = f"{' '}{'W'}{'W'}{issue_date:<4}{'B'}{issuer:<3}{'':13}"
            variable = f">6{len(unique):02X}{unique}{variable}"
        out.append(
            f"{leg.pnr:<7}{leg.origin}{leg.destination}{leg.carrier:<3}"
            f"{digits.rjust(4, '0')}{suffix}{leg.julian_date:03d}{leg.compartment}{seat}"
            f"{leg.sequence:04d} 1{len(variable):02X}{variable}"
        )
    if security:
        out.append(f"^1{len(security):02X}{security}")
    return "".join(out)
