"""satsgate's own V2 macaroon codec against pymacaroons, the reference implementation.

What satsgate mints must deserialize and verify in pymacaroons; what pymacaroons
serializes must parse here to the same fields; and on real and mutated buffers
both must accept and refuse the same inputs.
"""

from __future__ import annotations

import base64
import random
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymacaroons import MACAROON_V2, Macaroon, Verifier
from pymacaroons.serializers.binary_serializer import BinarySerializer

from satsgate.payments import l402, macaroon_v2


def _reference(raw: bytes) -> Macaroon:
    return BinarySerializer().deserialize_raw(raw)


def _same_fields(ours: macaroon_v2.MacaroonV2, ref: Macaroon) -> None:
    assert ours.location == ref.location
    assert ours.identifier == ref.identifier_bytes
    assert ours.signature.hex() == ref.signature_bytes.decode()
    assert [c.caveat_id for c in ours.caveats] == [c.caveat_id_bytes for c in ref.caveats]
    assert [c.verification_id or b"" for c in ours.caveats] == [
        c.verification_key_id or b"" for c in ref.caveats
    ]


def test_minted_token_verifies_in_pymacaroons() -> None:
    root_key = secrets.token_bytes(32)
    payment_hash = secrets.token_hex(32)
    token = l402.mint(payment_hash, "render-card", 1_900_000_000, root_key)
    ref = _reference(base64.b64decode(token.macaroon_b64))
    seen: list[str] = []

    def satisfied(caveat: str) -> bool:
        seen.append(caveat)
        return True

    verifier = Verifier()
    verifier.satisfy_general(satisfied)
    assert verifier.verify(ref, root_key)
    assert seen == ["services=render-card:0", "render-card_valid_until=1900000000"]
    assert ref.identifier_bytes[2:34].hex() == payment_hash
    with pytest.raises(Exception):  # noqa: B017 - pymacaroons raises its own types
        Verifier().verify(ref, secrets.token_bytes(32))


@settings(max_examples=150, deadline=None)
@given(
    location=st.text(max_size=40),
    identifier=st.binary(min_size=1, max_size=300),
    caveats=st.lists(st.text(min_size=1, max_size=100).map(str.encode), max_size=5),
    key=st.binary(min_size=1, max_size=64),
)
def test_serialize_matches_pymacaroons_byte_for_byte(
    location: str, identifier: bytes, caveats: list[bytes], key: bytes
) -> None:
    ref = Macaroon(location=location, identifier=identifier, key=key, version=MACAROON_V2)
    for caveat in caveats:
        ref.add_first_party_caveat(caveat)
    expected = BinarySerializer().serialize_raw(ref)
    assert macaroon_v2.serialize(location, identifier, caveats, key) == expected
    _same_fields(macaroon_v2.parse(expected), ref)


def test_third_party_caveats_parse_like_pymacaroons_and_are_refused() -> None:
    ref = Macaroon(
        location="lsat", identifier=b"\x00\x00" + bytes(64), key=b"k", version=MACAROON_V2
    )
    ref.add_first_party_caveat("services=render-card:0")
    ref.add_third_party_caveat("https://elsewhere", secrets.token_bytes(32), b"tp-id")
    raw = BinarySerializer().serialize_raw(ref)
    parsed = macaroon_v2.parse(raw)
    _same_fields(parsed, ref)
    assert parsed.caveats[1].location == "https://elsewhere"
    with pytest.raises(l402.CredentialError, match="third-party"):
        l402.decode_macaroon(raw)


def _outcome(parse: object, raw: bytes) -> tuple[str, object]:
    try:
        if parse is _reference:
            ref = _reference(raw)
            return "ok", (
                ref.identifier_bytes,
                ref.signature_bytes.decode(),
                tuple(c.caveat_id_bytes for c in ref.caveats),
            )
        ours = macaroon_v2.parse(raw)
        return "ok", (
            ours.identifier,
            ours.signature.hex(),
            tuple(c.caveat_id for c in ours.caveats),
        )
    except Exception:
        return "refused", None


def _mutated(raw: bytes, rng: random.Random) -> bytes:
    """One random edit: a bit flipped, the tail cut off, or a byte inserted."""
    b = bytearray(raw)
    at = rng.randrange(len(b))
    op = rng.randrange(3)
    if op == 0:
        b[at] ^= 1 << rng.randrange(8)
    elif op == 1:
        del b[at:]
    else:
        b.insert(at, rng.randrange(256))
    return bytes(b)


def test_mutated_buffers_are_accepted_and_refused_like_pymacaroons() -> None:
    rng = random.Random(7)
    samples = []
    for i in range(40):
        token = l402.mint(secrets.token_hex(32), "render-card", 1_800_000_000 + i)
        samples.append(base64.b64decode(token.macaroon_b64))
    cases = [b"\x02", b"\x02\x00", b"\x02\x02\x00\x00\x00", b"\x02\x02\x01a\x00\x00\x06"]
    for raw in samples:
        cases.append(raw + b"trailing")
        for _ in range(25):
            cases.append(_mutated(raw, rng))
    refused = 0
    for raw in cases:
        ours, ref = _outcome(macaroon_v2.parse, raw), _outcome(_reference, raw)
        assert ours == ref, raw.hex()
        refused += ours[0] == "refused"
    assert 0 < refused < len(cases)  # the mutations exercised both outcomes


def test_decode_refuses_garbage_as_malformed() -> None:
    for raw in (b"", b"\x02", b"\x01garbage", b"\xff" * 10):
        with pytest.raises(l402.MalformedCredential):
            l402.decode_macaroon(raw)


def _general_decode(raw: bytes) -> tuple[str, object]:
    """decode_macaroon without its fast path for satsgate's own layout."""
    try:
        mac = macaroon_v2.parse(raw)
    except Exception:
        return "refused", None
    if len(mac.identifier) != 66 or mac.identifier[:2] != b"\x00\x00":
        return "refused", None
    if any(c.verification_id for c in mac.caveats):
        return "refused", None
    return "ok", (mac.identifier, tuple(c.caveat_id for c in mac.caveats), mac.signature)


def test_the_fast_read_of_minted_macaroons_agrees_with_the_general_parser() -> None:
    """decode_macaroon reads satsgate's own layout by position; on every buffer that
    read accepts, the general parser must find the same fields, and it must accept
    every macaroon satsgate mints (or it is never the fast path)."""
    rng = random.Random(11)
    fast_reads = 0
    for i in range(60):
        slug = rng.choice(["render-card", "html-to-pdf", "x" * rng.randrange(1, 130)])
        token = l402.mint(secrets.token_hex(32), slug, rng.randrange(0, 10**12) + i)
        raw = base64.b64decode(token.macaroon_b64)
        decoded = l402.decode_macaroon(raw)
        assert _general_decode(raw) == (
            "ok",
            (decoded.identifier, decoded.caveat_ids, decoded.signature),
        )
        # Read by position whenever each caveat id fits a one-byte length.
        fits = all(len(c) < 0x80 for c in decoded.caveat_ids)
        assert (l402._decode_minted(raw) is not None) == fits
        for _ in range(40):
            mutated = _mutated(raw, rng)
            fast = l402._decode_minted(mutated)
            if fast is None:
                continue
            fast_reads += 1
            assert _general_decode(mutated) == (
                "ok",
                (fast.identifier, fast.caveat_ids, fast.signature),
            ), mutated.hex()
            assert (fast.payment_hash, fast.token_id) == (
                fast.identifier[2:34].hex(),
                fast.identifier[34:].hex(),
            )
    assert fast_reads > 100  # mutations inside ids and the signature still read fast


def _general_caveat_outcome(caveats: tuple[bytes, ...], service: str, now: int) -> str:
    try:
        l402.check_each_caveat(l402.DecodedMacaroon(b"", "", "", caveats, b""), service, now)
    except l402.CredentialError:
        return "refused"
    return "ok"


@settings(max_examples=300, deadline=None)
@given(
    service=st.sampled_from(["render-card", "html-to-pdf"]),
    other=st.sampled_from(["render-card", "html-to-pdf", "render-car", ""]),
    value=st.one_of(
        st.integers(min_value=0, max_value=2 * 10**9).map(lambda n: str(n).encode()),
        st.binary(max_size=12),
        st.sampled_from([b" 5", b"+5", b"1_0", b"\xd9\xa5", b"99999999999999999999", b"9" * 5000]),
    ),
    now=st.integers(min_value=0, max_value=2 * 10**9),
)
def test_the_fast_caveat_check_never_accepts_what_the_general_one_refuses(
    service: str, other: str, value: bytes, now: int
) -> None:
    caveats = (f"services={other}:0".encode(), other.encode() + b"_valid_until=" + value)
    fast = l402._minted_caveats_hold(caveats, service, now)
    general = _general_caveat_outcome(caveats, service, now)
    # check_caveats runs the fast check first: it may only short-cut an acceptance
    if fast:
        assert general == "ok"
    # ... and it takes the case of every genuine, unexpired credential
    if other == service and value.isdigit() and len(value) <= 18 and now < int(value):
        assert fast
