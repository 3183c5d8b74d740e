"""Proposal: mint and decode L402 macaroons (V2 binary) without pymacaroons objects.

``l402.decode_macaroon`` goes through ``pymacaroons.BinarySerializer``: it slices
the buffer once per field, builds ``PacketV2`` tuples, a ``Macaroon`` and one
``Caveat`` per caveat, and hex-encodes the signature only for
``decode_macaroon`` to decode it again. That is ~15% of the event loop's time on
a paid call. The V2 format is small (version byte; sections of ``varint type,
varint length, bytes`` ending in a zero byte; the signature last), so it is
parsed here in one pass over a memoryview, with the same acceptance rules as
pymacaroons (same fields, order checks and errors; bytes after the signature
are ignored, as pymacaroons ignores them). V1 (text) macaroons still go to
pymacaroons.

Minting is the mirror image: ``l402.mint`` builds a ``Macaroon``, two
``Caveat`` objects and hex-encodes/decodes the signature at every step (~0.1 ms,
most of ``Gate.challenge_of`` on the 402 path). :func:`mint` writes the same
bytes directly (three HMAC-SHA256 one-shots, a few varints).

For satsgate the proposal is: ``DecodedMacaroon`` keeps ``caveat_ids: tuple[bytes,
...]`` (what ``verify_signature`` needs) instead of ``_mac``; ``decode_macaroon``
uses :func:`parse_v2` for V2. The experiment below keeps today's dataclass by
giving it a tiny stand-in for ``_mac``.

``python bench/proposals/fast_macaroon.py`` checks it against pymacaroons on
minted tokens, extra and third-party caveats, and thousands of mutated buffers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import secrets
import struct
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

from satsgate.payments import l402

_EOS, _LOCATION, _IDENTIFIER, _VID, _SIGNATURE = 0, 1, 2, 4, 6


class FormatError(ValueError):
    pass


@dataclass(frozen=True)
class Caveat:
    caveat_id: bytes
    location: str | None
    vid: bytes | None


@dataclass(frozen=True)
class ParsedV2:
    location: str
    identifier: bytes
    caveats: tuple[Caveat, ...]
    signature: bytes  # raw 32 bytes


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
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


def _section(buf: memoryview, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    fields: list[tuple[int, bytes]] = []
    prev = -1
    while True:
        if pos >= len(buf):
            raise FormatError("section extends past end of buffer")
        kind, pos = _uvarint(buf, pos)
        if kind == _EOS:
            return fields, pos
        size, pos = _uvarint(buf, pos)
        if size > len(buf) - pos:
            raise FormatError("field data extends past end of buffer")
        if kind <= prev:
            raise FormatError("fields out of order")
        fields.append((kind, bytes(buf[pos : pos + size])))
        prev = kind
        pos += size


def parse_v2(raw: bytes) -> ParsedV2:
    """Parse a V2 binary macaroon; raises FormatError (or UnicodeDecodeError) when malformed."""
    buf = memoryview(raw)
    if len(buf) == 0 or buf[0] != 2:
        raise FormatError("not a V2 macaroon")
    header, pos = _section(buf, 1)
    location = ""
    if header and header[0][0] == _LOCATION:
        location = header[0][1].decode("utf-8")
        header = header[1:]
    if len(header) != 1 or header[0][0] != _IDENTIFIER:
        raise FormatError("invalid macaroon header")
    caveats = []
    while True:
        section, pos = _section(buf, pos)
        if not section:
            break
        cav_location = None
        if section[0][0] == _LOCATION:
            cav_location = section[0][1].decode("utf-8")
            section = section[1:]
        if not section or section[0][0] != _IDENTIFIER:
            raise FormatError("no identifier in caveat")
        cid, section = section[0][1], section[1:]
        if not section:
            if cav_location is not None:
                raise FormatError("location not allowed in first party caveat")
            caveats.append(Caveat(cid, None, None))
            continue
        if len(section) != 1:
            raise FormatError("extra fields found in caveat")
        if section[0][0] != _VID:
            raise FormatError("invalid field found in caveat")
        caveats.append(Caveat(cid, cav_location, section[0][1]))
    if pos >= len(buf):
        raise FormatError("no signature")
    kind, pos = _uvarint(buf, pos)
    if kind != _SIGNATURE:
        raise FormatError("unexpected field found instead of signature")
    size, pos = _uvarint(buf, pos)
    if size > len(buf) - pos:
        raise FormatError("field data extends past end of buffer")
    return ParsedV2(location, header[0][1], tuple(caveats), bytes(buf[pos : pos + size]))


_pymacaroons_decode = l402.decode_macaroon


def decode_macaroon(raw: bytes) -> l402.DecodedMacaroon:
    """Drop-in for ``l402.decode_macaroon`` (same result, same exceptions)."""
    if raw[:1] != b"\x02":
        return _pymacaroons_decode(raw)  # V1 or garbage: as before
    try:
        parsed = parse_v2(raw)
    except (FormatError, UnicodeDecodeError) as exc:
        raise l402.MalformedCredential("the macaroon cannot be decoded") from exc
    identifier = parsed.identifier
    if len(identifier) != 66 or identifier[:2] != b"\x00\x00":
        raise l402.CredentialError("unknown macaroon identifier")
    if any(c.vid for c in parsed.caveats):
        raise l402.CredentialError("third-party caveats are not accepted")
    # Today's DecodedMacaroon wants a ``_mac`` with ``.caveats[i].caveat_id_bytes``.
    mac = SimpleNamespace(
        caveats=[SimpleNamespace(caveat_id_bytes=c.caveat_id) for c in parsed.caveats]
    )
    return l402.DecodedMacaroon(
        identifier=identifier,
        payment_hash=identifier[2:34].hex(),
        token_id=identifier[34:].hex(),
        caveats=tuple(c.caveat_id.decode("utf-8", "replace") for c in parsed.caveats),
        signature=parsed.signature,
        _mac=mac,  # type: ignore[arg-type]
    )


def _field(kind: int, data: bytes) -> bytes:
    # Field type and length as uvarints (type < 128 always; lengths are general).
    out = bytearray((kind,))
    n = len(data)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


_DERIVE = b"macaroons-key-generator"
_LOCATION_FIELD = _field(_LOCATION, l402.LOCATION.encode())


def mint(
    payment_hash: str,
    service: str,
    valid_until: int,
    root_key: bytes | None = None,
    token_id: bytes | None = None,
) -> l402.MintedToken:
    """Drop-in for ``l402.mint``: the same token, byte for byte, for the same inputs."""
    root_key = secrets.token_bytes(32) if root_key is None else root_key
    token_id = secrets.token_bytes(32) if token_id is None else token_id
    identifier = struct.pack(">H", 0) + bytes.fromhex(payment_hash) + token_id
    caveats = (
        l402.service_caveat(service).encode(),
        l402.valid_until_caveat(service, valid_until).encode(),
    )
    key = hmac.digest(_DERIVE, root_key, hashlib.sha256)
    sig = hmac.digest(key, identifier, hashlib.sha256)
    parts = [b"\x02", _LOCATION_FIELD, _field(_IDENTIFIER, identifier), b"\x00"]
    for cid in caveats:
        sig = hmac.digest(sig, cid, hashlib.sha256)
        parts += (_field(_IDENTIFIER, cid), b"\x00")
    parts += (b"\x00", _field(_SIGNATURE, sig))
    raw = b"".join(parts)
    return l402.MintedToken(base64.b64encode(raw).decode("ascii"), root_key.hex(), token_id.hex())


# -- equivalence check --------------------------------------------------------------------------


def _outcome(fn: object, raw: bytes) -> tuple[str, object]:
    try:
        d = fn(raw)  # type: ignore[operator]
    except Exception as exc:
        return type(exc).__name__, None
    ids = tuple(c.caveat_id_bytes for c in d._mac.caveats)
    return "ok", (d.identifier, d.payment_hash, d.token_id, d.caveats, d.signature, ids)


def _samples(count: int) -> list[bytes]:
    from pymacaroons import MACAROON_V2, Macaroon
    from pymacaroons.serializers.binary_serializer import BinarySerializer

    out = []
    for i in range(count):
        token = l402.mint(secrets.token_hex(32), "render-card", 1_800_000_000 + i)
        raw = l402._b64decode_strict(token.macaroon_b64)
        out.append(raw)
        if i % 4 == 0:  # more caveats, a location, and now and then a third-party one
            mac = BinarySerializer().deserialize_raw(raw)
            mac.add_first_party_caveat(f"extra_capabilities=x{i}")
            if i % 8 == 0:
                mac.add_third_party_caveat("https://tp", secrets.token_bytes(32), b"tp-id")
            out.append(BinarySerializer().serialize_raw(mac))
        if i % 16 == 0:
            other = Macaroon(location="", identifier=secrets.token_bytes(66), key=b"k",
                             version=MACAROON_V2)
            out.append(BinarySerializer().serialize_raw(other))
    return out


def _self_test(count: int = 2000) -> None:
    rng = random.Random(1)
    samples = _samples(count // 10)
    cases = list(samples)
    for raw in samples:  # mutations: flips, truncations, insertions, trailing bytes
        for _ in range(8):
            b = bytearray(raw)
            op = rng.randrange(4)
            at = rng.randrange(len(b))
            if op == 0:
                b[at] ^= 1 << rng.randrange(8)
            elif op == 1:
                del b[at:]
            elif op == 2:
                b.insert(at, rng.randrange(256))
            else:
                b += bytes(rng.randrange(256) for _ in range(3))
            cases.append(bytes(b))
    cases += [b"", b"\x02", b"\x02\x00", b"\x02\x02\x00\x00\x00"]
    mismatches = 0
    for raw in cases:
        want, got = _outcome(_pymacaroons_decode, raw), _outcome(decode_macaroon, raw)
        if want != got:
            mismatches += 1
            if mismatches < 5:
                print("MISMATCH", raw.hex(), want, got)
    if mismatches:
        raise SystemExit(f"{mismatches} of {len(cases)} differ")
    minted = [raw for raw in samples if _outcome(_pymacaroons_decode, raw)[0] == "ok"]
    t0 = time.perf_counter()
    for raw in minted:
        _pymacaroons_decode(raw)
    t1 = time.perf_counter()
    for raw in minted:
        decode_macaroon(raw)
    t2 = time.perf_counter()
    n = len(minted)
    print(
        f"decode: {len(cases)} buffers, same result or same exception type; pymacaroons"
        f" {(t1 - t0) / n * 1e6:.1f} us, this {(t2 - t1) / n * 1e6:.1f} us per decode"
    )
    slow = fast = 0.0
    for _ in range(count):
        args = (secrets.token_hex(32), rng.choice(["render-card", "x", "é" * 70]),
                rng.randrange(2**40), secrets.token_bytes(32), secrets.token_bytes(32))
        t0 = time.perf_counter()
        want = l402.mint(*args)
        t1 = time.perf_counter()
        got = mint(*args)
        t2 = time.perf_counter()
        slow, fast = slow + t1 - t0, fast + t2 - t1
        if want != got:
            raise SystemExit(f"mint MISMATCH for {args}: {want} {got}")
    print(
        f"mint: {count} tokens identical; pymacaroons {slow / count * 1e6:.1f} us,"
        f" this {fast / count * 1e6:.1f} us per token"
    )


if __name__ == "__main__":
    _self_test(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
