"""Proposal: small, behaviour-preserving trims of the paid call's hot path.

Each function is a drop-in for the satsgate function named in its docstring;
``python bench/proposals/lean_paths.py`` checks each against the original.

* ``verify_signature``: ``hmac.digest`` one-shots (C, no HMAC object per step)
  instead of ``hmac.new(...).digest()``.
* ``parse_credential``: one compiled regex for the 64-hex preimage instead of a
  generator over its characters.
* ``payment_where`` (``Store._payment_where``): the SELECT text built once, the
  row mapped positionally (the column list is the dataclass's field order)
  instead of ``dict(zip(...))`` + ``Payment(**data)``.
* ``read_json``: a body whose Content-Length is known and within the limit is read
  with one ``await request.read()`` instead of a chunk iterator (chunked bodies
  still go through the original, which counts as it reads).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import sqlite3
import sys
from typing import Any

from aiohttp import web

from satsgate.errors import ApiError
from satsgate.http_util import read_json as _original_read_json
from satsgate.payments import l402
from satsgate.store import Payment, PaymentStatus

_KEY_GENERATOR = b"macaroons-key-generator"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def verify_signature(decoded: l402.DecodedMacaroon, root_key_hex: str) -> None:
    """Drop-in for ``l402.verify_signature``."""
    key = hmac.digest(_KEY_GENERATOR, bytes.fromhex(root_key_hex), "sha256")
    sig = hmac.digest(key, decoded.identifier, "sha256")
    for caveat in decoded._mac.caveats:
        sig = hmac.digest(sig, caveat.caveat_id_bytes, "sha256")
    if not hmac.compare_digest(sig, decoded.signature):
        raise l402.CredentialError("the macaroon signature does not verify")


def parse_credential(value: str) -> l402.L402Credential:
    """Drop-in for ``l402.parse_credential``."""
    token = value.strip()
    if "," in token or " " in token:
        raise l402.MalformedCredential("exactly one macaroon is accepted")
    mac_part, sep, preimage = token.rpartition(":")
    if not sep or not mac_part:
        raise l402.MalformedCredential("expected '<macaroon>:<preimage>'")
    preimage = preimage.lower()
    if _HEX64.fullmatch(preimage) is None:
        raise l402.MalformedCredential("the preimage must be 64 hex characters")
    return l402.L402Credential(l402._b64decode_strict(mac_part), preimage)


_FIELDS = tuple(Payment.__dataclass_fields__)
_STATUS = _FIELDS.index("status")
_SELECT = f"SELECT {', '.join(_FIELDS)} FROM payments WHERE "


def payment_where(conn: sqlite3.Connection, clause: str, arg: str) -> Payment | None:
    """The body of ``Store._payment_where`` (bound to the store's connection by the caller)."""
    row = conn.execute(_SELECT + clause, (arg,)).fetchone()
    if row is None:
        return None
    values = list(row)
    values[_STATUS] = PaymentStatus(values[_STATUS])
    return Payment(*values)


async def read_json(request: web.Request, limit: int) -> Any:
    """Drop-in for ``http_util.read_json``."""
    length = request.content_length
    if length is None or length > limit:
        return await _original_read_json(request, limit)  # chunked, or the 413 path
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"The request body is not valid JSON: {exc}",
            example='{"prompt": "..."}',
        ) from None


# -- equivalence checks --------------------------------------------------------------------------


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _self_test(count: int = 2000) -> None:
    import random

    rng = random.Random(2)
    good = []
    for i in range(count // 10):
        token = l402.mint(secrets.token_hex(32), "render-card", 1_800_000_000 + i)
        good.append((token, secrets.token_hex(32)))
    values = []
    for token, pre in good:
        values.append(f"{token.macaroon_b64}:{pre}")
        values.append(f"  {token.macaroon_b64}:{pre.upper()} ")
        for _ in range(8):
            v = list(f"{token.macaroon_b64}:{pre}")
            at = rng.randrange(len(v))
            v[at] = rng.choice([":", ",", " ", "g", "=", "-", "_", "A", "0", ""])
            values.append("".join(v))
    values += ["", ":", "a:", ":" + "0" * 64, "x:" + "0" * 63, "AA==:" + "f" * 64, "é:" + "0" * 64]
    for v in values:
        if _outcome(l402.parse_credential, v) != _outcome(parse_credential, v):
            raise SystemExit(f"parse_credential differs on {v!r}")
    for token, _ in good:
        decoded = l402.decode_macaroon(l402._b64decode_strict(token.macaroon_b64))
        for key in (token.root_key, secrets.token_hex(32)):
            a = _outcome(l402.verify_signature, decoded, key)
            b = _outcome(verify_signature, decoded, key)
            if a != b:
                raise SystemExit(f"verify_signature differs: {a} {b}")
    print(f"parse_credential: {len(values)} values, same results and errors;"
          f" verify_signature: {2 * len(good)} keys, same outcomes")


if __name__ == "__main__":
    _self_test(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
