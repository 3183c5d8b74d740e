"""The V2 binary macaroon format, read and written directly.

Why not pymacaroons on the hot path: its deserializer builds a ``Macaroon``, a
packet tuple per field and a ``Caveat`` per caveat, and hex-encodes the
signature; that was about 15% of the event loop's time on a paid call (see the
README's performance section). The format is small, so it is parsed here in one
pass, with pymacaroons' acceptance rules (the test suite checks both agree, on
real and on mutated buffers, and that pymacaroons verifies what is minted here).

Layout (libmacaroons / go-macaroon V2): version byte 0x02; a header section
(optional location, identifier); one section per caveat (optional location,
identifier, optional verification id); an empty section; the signature field.
A section is ``varint type, varint length, bytes`` fields in ascending type
order, ended by a zero byte. Bytes after the signature are ignored, as
pymacaroons ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from satsgate.payments.hmac_sha256 import HmacKey, hmac_sha256

VERSION = 2
_END, _LOCATION, _IDENTIFIER, _VID, _SIGNATURE = 0, 1, 2, 4, 6
# HMAC key derivation of libmacaroons: the root key is never used directly.
_KEY_GENERATOR = HmacKey(b"macaroons-key-generator")


class FormatError(ValueError):
    """The bytes are not a well-formed V2 macaroon."""


class Caveat(NamedTuple):
    caveat_id: bytes
    location: str | None = None
    verification_id: bytes | None = None  # set only on third-party caveats


class MacaroonV2(NamedTuple):
    location: str
    identifier: bytes
    caveats: tuple[Caveat, ...]
    signature: bytes  # raw 32 bytes


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise FormatError("varint extends past end of buffer")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _section(buf: bytes, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    fields: list[tuple[int, bytes]] = []
    previous = -1
    end = len(buf)
    while True:
        if pos >= end:
            raise FormatError("section extends past end of buffer")
        kind = buf[pos]
        if kind < 0x80:  # one-byte varint: every field type satsgate knows
            pos += 1
        else:
            kind, pos = _uvarint(buf, pos)
        if kind == _END:
            return fields, pos
        if pos < end and buf[pos] < 0x80:
            size = buf[pos]
            pos += 1
        else:
            size, pos = _uvarint(buf, pos)
        if size > end - pos:
            raise FormatError("field data extends past end of buffer")
        if kind <= previous:
            raise FormatError("fields out of order")
        fields.append((kind, buf[pos : pos + size]))
        previous = kind
        pos += size


def _caveat(section: list[tuple[int, bytes]]) -> Caveat:
    location = None
    if section[0][0] == _LOCATION:
        location = section[0][1].decode("utf-8")
        section = section[1:]
    if not section or section[0][0] != _IDENTIFIER:
        raise FormatError("no identifier in caveat")
    caveat_id, rest = section[0][1], section[1:]
    if not rest:
        if location is not None:
            raise FormatError("location not allowed in first party caveat")
        return Caveat(caveat_id)
    if len(rest) != 1:
        raise FormatError("extra fields found in caveat")
    if rest[0][0] != _VID:
        raise FormatError("invalid field found in caveat")
    return Caveat(caveat_id, location, rest[0][1])


def parse(raw: bytes) -> MacaroonV2:
    """Parse a V2 binary macaroon; raises FormatError (or UnicodeDecodeError)."""
    buf = bytes(raw)
    if len(buf) == 0 or buf[0] != VERSION:
        raise FormatError("not a V2 macaroon")
    header, pos = _section(buf, 1)
    location = ""
    if header and header[0][0] == _LOCATION:
        location = header[0][1].decode("utf-8")
        header = header[1:]
    if len(header) != 1 or header[0][0] != _IDENTIFIER:
        raise FormatError("invalid macaroon header")
    caveats = []
    end = len(buf)
    while True:
        # Fast path, the shape of every caveat satsgate mints: one identifier field
        # with a one-byte length, then the section's end (0x02, n, n bytes, 0x00).
        # _section and _caveat would read it to the same Caveat.
        if pos + 1 < end and buf[pos] == _IDENTIFIER and buf[pos + 1] < 0x80:
            stop = pos + 2 + buf[pos + 1]
            if stop < end and buf[stop] == _END:
                caveats.append(Caveat(buf[pos + 2 : stop]))
                pos = stop + 1
                continue
        section, pos = _section(buf, pos)
        if not section:
            break
        caveats.append(_caveat(section))
    if pos >= len(buf):
        raise FormatError("no signature")
    kind, pos = _uvarint(buf, pos)
    if kind != _SIGNATURE:
        raise FormatError("unexpected field found instead of signature")
    size, pos = _uvarint(buf, pos)
    if size > len(buf) - pos:
        raise FormatError("field data extends past end of buffer")
    return MacaroonV2(location, header[0][1], tuple(caveats), buf[pos : pos + size])


def signature(root_key: bytes, identifier: bytes, caveat_ids: Sequence[bytes]) -> bytes:
    """The HMAC-SHA256 chain of a macaroon with first-party caveats only."""
    sig = hmac_sha256(_KEY_GENERATOR.digest(root_key), identifier)
    for caveat_id in caveat_ids:
        sig = hmac_sha256(sig, caveat_id)
    return sig


def _field(kind: int, data: bytes) -> bytes:
    out = bytearray((kind,))  # every field type used here is < 128: one varint byte
    size = len(data)
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + data


def serialize(
    location: str, identifier: bytes, caveat_ids: Sequence[bytes], root_key: bytes
) -> bytes:
    """Mint: a V2 macaroon with first-party caveats, signed with ``root_key``."""
    parts = [bytes((VERSION,)), _field(_LOCATION, location.encode("utf-8"))]
    parts += (_field(_IDENTIFIER, identifier), b"\x00")
    for caveat_id in caveat_ids:
        parts += (_field(_IDENTIFIER, caveat_id), b"\x00")
    sig = signature(root_key, identifier, caveat_ids)
    parts += (b"\x00", _field(_SIGNATURE, sig))
    return b"".join(parts)
