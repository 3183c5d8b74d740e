"""L402: minting and verifying macaroons, the challenge header, the credential.

Identifier (66 bytes): uint16 big-endian version 0 | payment_hash (32) | token_id (32).
Each token has its own 32-byte root key, stored with its payment; deleting the
payment row revokes the token. Caveats are evaluated here, not by the
pymacaroons Verifier (which reports unknown caveats as bad signatures).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import struct
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from pymacaroons.serializers.binary_serializer import BinarySerializer

from satsgate.errors import ErrorCode
from satsgate.payments import macaroon_v2
from satsgate.payments.hmac_sha256 import HmacKey, hmac_sha256

LOCATION = "lsat"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_IDENTIFIER_VERSION = 0
_IDENTIFIER_PREFIX = struct.pack(">H", _IDENTIFIER_VERSION)


class CredentialError(Exception):
    """The credential is well-formed but does not verify; message says which check failed.

    ``code`` is the error-catalog code the caller gets, ``problem`` the payment-auth
    draft's problem type (the Payment scheme's RFC 9457 body); both are read by the HTTP
    face, which answers with a fresh challenge."""

    code: ClassVar[ErrorCode] = ErrorCode.PAYMENT_INVALID
    problem: ClassVar[str] = "verification-failed"


class CredentialExpired(CredentialError):
    """The credential verified once and its time is past (a macaroon caveat, an MPP
    challenge's ``expires``)."""

    code = ErrorCode.PAYMENT_EXPIRED
    problem = "payment-expired"


class MalformedCredential(Exception):
    """The Authorization header cannot be parsed as a credential."""

    code: ClassVar[ErrorCode] = ErrorCode.MALFORMED_CREDENTIAL
    problem: ClassVar[str] = "malformed-credential"


class RootKeys:
    """Per-token root keys, derived rather than drawn: HMAC-SHA256(K, token id), with K
    derived from the server secret. The gate can then check a macaroon's signature
    before it reads the token's row. Tokens minted with a random stored root key (before
    this) still verify through the key stored with their payment."""

    def __init__(self, server_secret: str) -> None:
        key = hmac_sha256(server_secret.encode(), b"satsgate l402 root key")
        self._key = HmacKey(key)

    def for_token(self, token_id: bytes) -> bytes:
        return self._key.digest(token_id)


@dataclass(frozen=True)
class MintedToken:
    macaroon_b64: str  # standard base64, padded, of the V2 binary serialization
    root_key: str  # hex
    token_id: str  # hex


@dataclass(frozen=True)
class L402Credential:
    macaroon: bytes  # raw V2 (or V1) binary
    preimage: str  # 64 lowercase hex

    @property
    def scheme(self) -> str:
        return "L402"


def service_caveat(service: str) -> str:
    return f"services={service}:0"


def valid_until_caveat(service: str, unix_s: int) -> str:
    return f"{service}_valid_until={unix_s}"


def mint(
    payment_hash: str,
    service: str,
    valid_until: int,
    root_key: bytes | None = None,
    token_id: bytes | None = None,
) -> MintedToken:
    """A new token, or (given its root key and id) the same token again, byte for byte."""
    root_key = secrets.token_bytes(32) if root_key is None else root_key
    token_id = secrets.token_bytes(32) if token_id is None else token_id
    identifier = _IDENTIFIER_PREFIX + bytes.fromhex(payment_hash) + token_id
    caveats = (
        service_caveat(service).encode(),
        valid_until_caveat(service, valid_until).encode(),
    )
    raw = macaroon_v2.serialize(LOCATION, identifier, caveats, root_key)
    return MintedToken(base64.b64encode(raw).decode("ascii"), root_key.hex(), token_id.hex())


def challenge_headers(macaroon_b64: str, bolt11: str) -> list[str]:
    """Two WWW-Authenticate values in the exact common form: L402 first, since clients that
    read only the first challenge pay it (Alby's fetchWithL402, pyl402), then LSAT for
    clients that know only the old name."""
    return [
        f'L402 macaroon="{macaroon_b64}", invoice="{bolt11}"',
        f'LSAT macaroon="{macaroon_b64}", invoice="{bolt11}"',
    ]


def parse_credential(value: str) -> L402Credential:
    """Parse the part after the scheme: '<base64 macaroon>:<hex preimage>'."""
    token = value.strip()
    if "," in token or " " in token:
        raise MalformedCredential("exactly one macaroon is accepted")
    mac_part, sep, preimage = token.rpartition(":")
    if not sep or not mac_part:
        raise MalformedCredential("expected '<macaroon>:<preimage>'")
    preimage = preimage.lower()
    if _HEX64.fullmatch(preimage) is None:
        raise MalformedCredential("the preimage must be 64 hex characters")
    raw = decode_base64(mac_part)
    return L402Credential(raw, preimage)


def decode_base64(text: str) -> bytes:
    # Standard alphabet, padded, as issued; url-safe or unpadded is accepted too
    # because some clients re-encode, but nothing else is.
    candidate = text.replace("-", "+").replace("_", "/")
    candidate += "=" * (-len(candidate) % 4)
    try:
        return base64.b64decode(candidate, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedCredential("the macaroon is not valid base64") from exc


class DecodedMacaroon(NamedTuple):
    identifier: bytes
    payment_hash: str
    token_id: str
    caveat_ids: tuple[bytes, ...]  # as signed
    signature: bytes

    @property
    def caveats(self) -> tuple[str, ...]:
        return tuple(c.decode("utf-8", "replace") for c in self.caveat_ids)


def _parse(raw: bytes) -> macaroon_v2.MacaroonV2:
    """V2 binary (what satsgate issues) directly; V1, which a client may have
    re-serialized to, through pymacaroons."""
    try:
        if raw[:1] == bytes((macaroon_v2.VERSION,)):
            return macaroon_v2.parse(raw)
        mac = BinarySerializer().deserialize_raw(raw)
        return macaroon_v2.MacaroonV2(
            mac.location,
            mac.identifier_bytes,
            tuple(
                macaroon_v2.Caveat(c.caveat_id_bytes, c.location, c.verification_key_id or None)
                for c in mac.caveats
            ),
            binascii.unhexlify(mac.signature_bytes),
        )
    except Exception as exc:  # pymacaroons raises assorted types on bad input
        raise MalformedCredential("the macaroon cannot be decoded") from exc


# The exact bytes satsgate mints up to the first caveat's length: version 2, location
# "lsat", a 66-byte identifier of version 0, end of header, a caveat id field.
_MINTED_HEAD = b"\x02\x01\x04" + LOCATION.encode() + b"\x02\x42" + _IDENTIFIER_PREFIX
_MINTED_HEAD_END = len(_MINTED_HEAD) + 64  # the identifier's hash and token id follow
# Between the two caveats, and after the second: end of section, next field's type.
_CAVEAT_BREAK = b"\x00\x02"
_SIGNATURE_HEAD = b"\x00\x00\x06\x20"  # end of caveat, end of caveats, 32-byte signature


def _decode_minted(raw: bytes) -> DecodedMacaroon | None:
    """The macaroons satsgate mints (two first-party caveats, each id under 128
    bytes), read by position; None for any other layout, which the general parser
    then reads. Either way the same DecodedMacaroon (tests/payments/test_macaroon_v2.py)."""
    head_end = _MINTED_HEAD_END
    size = len(raw)
    if (
        size <= head_end + 2
        or raw[head_end : head_end + 2] != _CAVEAT_BREAK
        or not raw.startswith(_MINTED_HEAD)
    ):
        return None
    first_len = raw[head_end + 2]
    first_end = head_end + 3 + first_len
    if first_len >= 0x80 or size <= first_end + 2:
        return None
    if raw[first_end : first_end + 2] != _CAVEAT_BREAK:
        return None
    second_len = raw[first_end + 2]
    second_end = first_end + 3 + second_len
    if second_len >= 0x80 or raw[second_end : second_end + 4] != _SIGNATURE_HEAD:
        return None
    signature = raw[second_end + 4 : second_end + 36]
    if len(signature) != 32:
        return None
    identifier = raw[len(_MINTED_HEAD) - 2 : head_end]
    caveat_ids = (raw[head_end + 3 : first_end], raw[first_end + 3 : second_end])
    return DecodedMacaroon(
        identifier, identifier[2:34].hex(), identifier[34:].hex(), caveat_ids, signature
    )


def decode_macaroon(raw: bytes) -> DecodedMacaroon:
    minted = _decode_minted(raw)
    if minted is not None:
        return minted
    mac = _parse(raw)
    identifier = mac.identifier
    if len(identifier) != 66 or identifier[:2] != _IDENTIFIER_PREFIX:
        raise CredentialError("unknown macaroon identifier")
    caveat_ids = []
    for caveat in mac.caveats:
        if caveat.verification_id:
            raise CredentialError("third-party caveats are not accepted")
        caveat_ids.append(caveat.caveat_id)
    return DecodedMacaroon(
        identifier, identifier[2:34].hex(), identifier[34:].hex(), tuple(caveat_ids), mac.signature
    )


def _minted_caveats_hold(caveat_ids: tuple[bytes, ...], service: str, now: int) -> bool:
    """True when the caveats are exactly the two satsgate mints for ``service`` and the
    credential has not expired; False sends them to the general check, which then
    says what is wrong (or accepts another form)."""
    if len(caveat_ids) != 2:
        return False
    services, valid_until = caveat_ids
    slug = service.encode()
    if services != b"services=" + slug + b":0":
        return False
    prefix = slug + b"_valid_until="
    until = valid_until[len(prefix) :]
    # At most 18 digits: never near int()'s limit on digits, which would raise here.
    return (
        valid_until.startswith(prefix)
        and 0 < len(until) <= 18
        and until.isdigit()
        and now < int(until)
    )


def check_preimage(payment_hash: str, preimage: str) -> None:
    if hashlib.sha256(bytes.fromhex(preimage)).hexdigest() != payment_hash:
        raise CredentialError("the preimage does not match the invoice's payment hash")


def signature_matches(decoded: DecodedMacaroon, root_key: bytes) -> bool:
    expected = macaroon_v2.signature(root_key, decoded.identifier, decoded.caveat_ids)
    return hmac.compare_digest(expected, decoded.signature)


def check_caveats(decoded: DecodedMacaroon, service: str, now: int) -> None:
    """Every caveat must hold. Repeats may only narrow: each one is checked on its own."""
    if not _minted_caveats_hold(decoded.caveat_ids, service, now):
        check_each_caveat(decoded, service, now)


def check_each_caveat(decoded: DecodedMacaroon, service: str, now: int) -> None:
    """The general rule of :func:`check_caveats`, one caveat at a time, for any form a
    client may send (attenuated with repeats, capabilities, listed services)."""
    service_seen = False
    for caveat in decoded.caveats:
        condition, sep, value = caveat.partition("=")
        if not sep:
            raise CredentialError(f"malformed caveat {caveat!r}")
        if condition == "services":
            names = {item.split(":", 1)[0] for item in value.split(",")}
            if service not in names:
                raise CredentialError(f"this credential was issued for {value}, not {service}")
            service_seen = True
        elif condition.endswith("_valid_until"):
            try:
                until = int(value)
            except ValueError as exc:
                raise CredentialError(f"malformed caveat {caveat!r}") from exc
            if now >= until:
                raise CredentialExpired("the credential has expired")
        elif condition.endswith("_capabilities"):
            continue  # satsgate grants no capabilities beyond the call itself
        else:
            raise CredentialError(f"unknown caveat {condition!r}")
    if not service_seen:
        raise CredentialError("the macaroon names no service")
