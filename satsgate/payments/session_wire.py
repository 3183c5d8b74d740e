"""The session intent on the wire (draft-lightning-session-00, lightning method): its
challenge, the credential a client sends back and its checks, the session token that
binds a session to its payer, the receipt, and the refusal every step raises. Pure: no
store, no node (the desk that moves the money is satsgate.payments.sessions).

Credentials (``Authorization: Payment <b64url JCS JSON>``), ``payload.action``:

- ``open`` (``preimage``, amountless ``returnInvoice``): consumes the paid deposit
  into a new session (id: the deposit's payment hash), binds it to a session token and
  serves the request as a bearer call; the token is in this answer only
  (``Payment-Session-Token`` and the receipt's ``sessionToken``);
- ``bearer`` (``sessionId``, ``preimage``, ``token``): serves the request, debiting its
  quoted price from the balance in one conditional UPDATE (store/sessions.py); too
  little left is a fresh 402 (insufficient-balance) whose session challenge is the
  top-up's;
- ``topUp`` (also ``topup``; ``sessionId``, ``topUpPreimage``, ``token``): consumes a
  paid deposit into the session's balance; answers ``{"status": "ok"}`` and serves
  nothing;
- ``close`` (``sessionId``, ``preimage``, ``token``): closes the session and pays the
  balance left to the return invoice (the node's own payment, under the payouts' fee
  limit); a second close answers the same result.

The binding (a departure from the draft, whose bearer proof is the deposit preimage
alone: every node on the deposit's route learns that preimage). The token is
HMAC-SHA256, under a key derived from the server secret, of the session id and the id
of the challenge the session was opened with: only the payer holds that challenge (it
came in a 402 over HTTPS), so only the payer's open is answered with it, and a replay
of that same open credential gets the same token back, never a second one. The store
keeps its sha256; each action compares in constant time. A credential without it, or
with another, is refused (``SESSION_BINDING_REQUIRED``) before anything is debited,
credited, consumed or closed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from satsgate.constant_time import texts_equal
from satsgate.edge import json_input
from satsgate.errors import ApiError, ErrorCode
from satsgate.payments import mpp
from satsgate.payments.hmac_sha256 import HmacKey

INTENT = "session"
PROBLEMS = "https://paymentauth.org/problems/lightning/"
PROBLEM_TITLES = {
    "malformed-credential": "Malformed credential",
    "unknown-challenge": "Unknown challenge",
    "invalid-preimage": "Invalid preimage",
    "session-not-found": "Session not found",
    "session-closed": "Session closed",
    "insufficient-balance": "Insufficient balance",
    "challenge-expired": "Challenge expired",
    "invalid-return-invoice": "Invalid return invoice",
}
# satsgate's own problem (the draft has no binding): typed by its error-catalog entry.
BINDING_PROBLEM = "session-binding-required"
HEX_DIGITS = frozenset("0123456789abcdef")


class SessionProblem(Exception):
    """A refused session credential: the draft's problem type, satsgate's error code."""

    def __init__(
        self, problem: str, code: ErrorCode, detail: str, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(detail)
        self.problem = problem
        self.code = code
        self.detail = detail
        self.extra = extra or {}
        # The session token, when this answers the open that made the session (its call
        # was refused after the open): the payer gets it with the refusal.
        self.token: str | None = None

    def api_error(self) -> ApiError:
        """The envelope of this refusal where no 402 problem body is answered (MCP)."""
        return ApiError(self.code, self.detail, extra=self.extra)


@dataclass(frozen=True)
class SessionChallenge:
    id: str
    realm: str
    request: str  # b64url of the JCS request object
    expires: str
    fields: dict[str, str]  # the request object, for the 402 body

    def header(self) -> str:
        return (
            f'Payment id="{self.id}", realm="{self.realm}", method="{mpp.METHOD}", '
            f'intent="{INTENT}", request="{self.request}", expires="{self.expires}"'
        )


def challenge_id(key: HmacKey, realm: str, request: str, expires: str, extra: str = "||") -> str:
    """The stateless id: HMAC-SHA256 under the server secret over the same slots as the
    charge intent's (realm|method|intent|request|expires|digest|opaque)."""
    message = "|".join((realm, mpp.METHOD, INTENT, request, expires)) + extra
    return mpp.b64url(key.digest(message.encode()))


@dataclass(frozen=True)
class SessionCredential:
    action: str  # open | bearer | topUp | close
    challenge_id: str
    request: dict[str, Any]  # the echoed challenge's request object
    expires_at: int | None
    payload: dict[str, Any]

    def text(self, name: str) -> str:
        value = self.payload.get(name)
        if not isinstance(value, str) or not value:
            raise SessionProblem(
                "malformed-credential",
                ErrorCode.MALFORMED_CREDENTIAL,
                f"payload.{name} is required for action {self.action}",
            )
        return value

    def token(self) -> str | None:
        """``payload.token``, the session token the open answered; None when absent."""
        if "token" not in self.payload:
            return None
        return self.text("token")

    def hex32(self, name: str) -> str:
        value = self.text(name)
        if len(value) != 64 or not set(value) <= HEX_DIGITS:
            raise SessionProblem(
                "malformed-credential",
                ErrorCode.MALFORMED_CREDENTIAL,
                f"payload.{name} must be 64 lowercase hex characters",
            )
        return value


def session_payload(value: str) -> dict[str, Any] | None:
    """The decoded credential when ``value`` (after ``Payment ``) is one of the session
    intent; None for anything else (the charge intent's own parser answers those)."""
    try:
        doc = json_input.loads(mpp.b64url_decode(value.strip()))
    except (json_input.JsonInputError, Exception):
        return None
    if not isinstance(doc, dict):
        return None
    challenge = doc.get("challenge")
    if not isinstance(challenge, dict) or challenge.get("intent") != INTENT:
        return None
    return doc


def parse_credential(doc: dict[str, Any], key: HmacKey) -> SessionCredential:
    """Check a decoded session credential: its challenge was issued here (the HMAC id),
    the action is known. Raises SessionProblem."""
    ch = doc["challenge"]
    fields: dict[str, str] = {}
    for name in ("id", "realm", "method", "intent", "request", "expires", "digest", "opaque"):
        item = ch.get(name, "")
        if not isinstance(item, str):
            raise SessionProblem(
                "malformed-credential",
                ErrorCode.MALFORMED_CREDENTIAL,
                f"challenge.{name} must be a string",
            )
        fields[name] = item
    if fields["method"] != mpp.METHOD:
        raise SessionProblem(
            "malformed-credential",
            ErrorCode.MALFORMED_CREDENTIAL,
            "only method=lightning is accepted",
        )
    expected = challenge_id(
        key,
        fields["realm"],
        fields["request"],
        fields["expires"],
        f"|{fields['digest']}|{fields['opaque']}",
    )
    if not texts_equal(fields["id"], expected):
        raise SessionProblem(
            "unknown-challenge",
            ErrorCode.PAYMENT_INVALID,
            "the challenge was not issued by this server",
        )
    try:
        request = json_input.loads(mpp.b64url_decode(fields["request"]))
    except (json_input.JsonInputError, Exception):
        request = None
    if not isinstance(request, dict):
        raise SessionProblem(
            "malformed-credential", ErrorCode.MALFORMED_CREDENTIAL, "challenge.request is not JSON"
        )
    payload = doc.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("action"), str):
        raise SessionProblem(
            "malformed-credential", ErrorCode.MALFORMED_CREDENTIAL, "payload.action is required"
        )
    action = payload["action"]
    if action == "topup":  # some clients spell it so
        action = "topUp"
    if action not in ("open", "bearer", "topUp", "close"):
        raise SessionProblem(
            "malformed-credential", ErrorCode.MALFORMED_CREDENTIAL, f"unknown action {action!r}"
        )
    expires_at = None
    if fields["expires"]:
        try:
            expires_at = mpp.parse_rfc3339(fields["expires"])
        except Exception:
            raise SessionProblem(
                "malformed-credential",
                ErrorCode.MALFORMED_CREDENTIAL,
                "challenge.expires is not RFC 3339",
            ) from None
    return SessionCredential(action, fields["id"], request, expires_at, payload)


def session_token(key: HmacKey, session_id: str, challenge_id: str) -> str:
    """The token binding a session to its payer (64 hex): see the module docstring."""
    return key.digest(f"{session_id}|{challenge_id}".encode()).hex()


def token_sha256(token: str) -> str:
    """What the store keeps of a session token."""
    return hashlib.sha256(token.encode()).hexdigest()


def receipt_header(reference: str, unix_s: int, **fields: Any) -> str:
    receipt = {
        "method": mpp.METHOD,
        "reference": reference,
        "status": "success",
        "timestamp": mpp.rfc3339(unix_s),
        **fields,
    }
    return mpp.b64url(mpp.canonical_json(receipt).encode())
