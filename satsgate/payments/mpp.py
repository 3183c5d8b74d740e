"""MPP: the "Payment" HTTP authentication scheme, lightning method, charge intent.

The challenge id is stateless: an HMAC over the challenge's fields under the
server secret, so a credential proves it echoes a challenge this server issued,
byte for byte, without storing challenges. What a challenge buys is still
decided by the payment row found through ``methodDetails.paymentHash``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from satsgate.constant_time import texts_equal
from satsgate.edge import json_input
from satsgate.payments.hmac_sha256 import HmacKey
from satsgate.payments.l402 import CredentialError, CredentialExpired, MalformedCredential

METHOD = "lightning"
INTENT = "charge"
PROBLEM_BASE = "https://paymentauth.org/problems/"
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")


class InvalidChallenge(CredentialError):
    """The echoed challenge is not one this server issued (its id does not verify), or
    not one it offers here: the core draft's ``invalid-challenge``."""

    problem = "invalid-challenge"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise MalformedCredential("not base64url") from exc


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rfc3339(unix_s: int) -> str:
    # time.gmtime rather than datetime: a third of the cost, on every 402.
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def parse_rfc3339(text: str) -> int:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise CredentialError("the challenge's expires is not RFC 3339") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp())


@dataclass(frozen=True)
class Challenge:
    id: str
    realm: str
    request: str  # b64url of canonical JSON
    expires: str

    def header(self) -> str:
        return (
            f'Payment id="{self.id}", realm="{self.realm}", method="{METHOD}", '
            f'intent="{INTENT}", request="{self.request}", expires="{self.expires}"'
        )


def _challenge_id(
    secret: str,
    realm: str,
    method: str,
    intent: str,
    request: str,
    expires: str,
    digest: str = "",
    opaque: str = "",
) -> str:
    message = "|".join((realm, method, intent, request, expires, digest, opaque))
    return b64url(_challenge_key(secret).digest(message.encode()))


@functools.lru_cache(maxsize=4)
def _challenge_key(secret: str) -> HmacKey:
    """The server secret's HMAC key, its padded states hashed once per secret."""
    return HmacKey(secret.encode())


def make_challenge(
    *,
    secret: str,
    realm: str,
    amount_sats: int,
    bolt11: str,
    payment_hash: str,
    network: str,
    expires_at: int,
    description: str,
) -> Challenge:
    request = {
        "amount": str(amount_sats),
        "currency": "sat",
        "description": description,
        "methodDetails": {"invoice": bolt11, "paymentHash": payment_hash, "network": network},
    }
    request_b64 = b64url(canonical_json(request).encode())
    expires = rfc3339(expires_at)  # never later than the invoice expiry
    cid = _challenge_id(secret, realm, METHOD, INTENT, request_b64, expires)
    return Challenge(cid, realm, request_b64, expires)


@dataclass(frozen=True)
class MppCredential:
    challenge_id: str
    payment_hash: str
    preimage: str
    expires_at: int
    source: str | None

    @property
    def scheme(self) -> str:
        return "Payment"


def authenticated_challenge(
    doc: dict[str, Any], *, secret: str, intents: tuple[str, ...] = (INTENT,)
) -> tuple[str, str, dict[str, Any], str]:
    """The echoed challenge of a decoded credential ``doc``, authenticated: its id is the
    HMAC under ``secret`` of its fields, so this server issued it byte for byte (the
    session intent's challenges are made the same way, payments/sessions.py). Returns
    (id, intent, the decoded request object, expires as sent); expiry is not checked.
    Raises MalformedCredential or CredentialError (InvalidChallenge)."""
    ch = doc.get("challenge")
    if not isinstance(ch, dict):
        raise MalformedCredential("the Payment credential has no challenge object")
    fields = {}
    for name in ("id", "realm", "method", "intent", "request", "expires", "digest", "opaque"):
        item = ch.get(name, "")
        if not isinstance(item, str):
            raise MalformedCredential(f"challenge.{name} must be a string")
        fields[name] = item
    if fields["method"] != METHOD or fields["intent"] not in intents:
        raise InvalidChallenge(f"only method=lightning, intent={'/'.join(intents)} is accepted")
    expected = _challenge_id(
        secret,
        fields["realm"],
        fields["method"],
        fields["intent"],
        fields["request"],
        fields["expires"],
        fields["digest"],
        fields["opaque"],
    )
    if not texts_equal(fields["id"], expected):
        raise InvalidChallenge("the challenge was not issued by this server")
    try:
        request = json.loads(b64url_decode(fields["request"]))
    except ValueError as exc:
        raise CredentialError("the challenge request is not JSON") from exc
    if not isinstance(request, dict):
        raise CredentialError("the challenge request is not a JSON object")
    return fields["id"], fields["intent"], request, fields["expires"]


def parse_credential(value: str, *, secret: str, now: float | None = None) -> MppCredential:
    """Decode and authenticate 'Payment <b64url JSON>', refusing an expired challenge.
    Raises MalformedCredential or CredentialError."""
    try:
        doc = json_input.loads(b64url_decode(value.strip()))
    except json_input.JsonInputError as exc:
        raise MalformedCredential(f"the Payment credential is not base64url JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("challenge"), dict):
        raise MalformedCredential("the Payment credential has no challenge object")
    payload = doc.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("preimage"), str):
        raise MalformedCredential("the Payment credential has no payload.preimage")
    preimage = payload["preimage"]
    if not _LOWER_HEX64.fullmatch(preimage):  # the charge draft: 64 lowercase hex
        raise MalformedCredential("payload.preimage must be 64 lowercase hex characters")
    challenge_id, _, request, expires = authenticated_challenge(doc, secret=secret)
    payment_hash = charge_payment_hash(request)
    if payment_hash is None:
        raise CredentialError("the challenge request has no paymentHash")
    expires_at = parse_rfc3339(expires)
    if expires_at <= (time.time() if now is None else now):
        # The draft: a credential for an expired challenge is refused. A payment made
        # for it and never used stays refundable (POST /api/l402/refund).
        raise CredentialExpired(f"the challenge expired at {expires}")
    source = doc.get("source")
    return MppCredential(
        challenge_id=challenge_id,
        payment_hash=payment_hash,
        preimage=preimage,
        expires_at=expires_at,
        source=source if isinstance(source, str) else None,
    )


def charge_payment_hash(request: dict[str, Any]) -> str | None:
    """The payment hash a charge challenge's request names (``methodDetails.paymentHash``)."""
    details = request.get("methodDetails")
    found = details.get("paymentHash") if isinstance(details, dict) else None
    return found.lower() if isinstance(found, str) else None


def receipt_header(challenge_id: str, payment_hash: str, unix_s: int) -> str:
    receipt = {
        "status": "success",
        "method": METHOD,
        "timestamp": rfc3339(unix_s),
        "reference": payment_hash,
        "challengeId": challenge_id,
    }
    return b64url(canonical_json(receipt).encode())
