"""What the telnyx provider reads and checks: values of its table (the webhook public key
among them), a webhook's Ed25519 signature, and the numbers, counts and times in
Telnyx's objects (webhook payloads and API answers alike)."""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping
from datetime import datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from satsgate.domain.telephony import check_e164
from satsgate.engines.config import EngineConfigError
from satsgate.engines.providers.upstream import fresh_unix_stamp


def public_key_from(value: object, where: str) -> Ed25519PublicKey:
    """The webhook public key (base64 of the 32 raw bytes, as the portal shows it)."""
    if not isinstance(value, str) or not value:
        raise EngineConfigError(
            f"{where} needs public_key: the account's webhook public key (base64) from "
            "the portal, to verify webhooks"
        )
    try:
        raw = base64.b64decode(value, validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError):
        raise EngineConfigError(f"{where} public_key is not a base64 Ed25519 key") from None


def verify_signature(
    key: Ed25519PublicKey, headers: Mapping[str, str], body: bytes, now: float | None = None
) -> bool:
    """Telnyx's webhook signature: Ed25519 over ``f"{timestamp}|{raw body}"``, the
    timestamp within 300 s of now. ``headers`` are lower-cased."""
    stamp = headers.get("telnyx-timestamp", "")
    signature = headers.get("telnyx-signature-ed25519", "")
    if not signature or not fresh_unix_stamp(stamp, now):
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
        key.verify(raw, stamp.encode() + b"|" + body)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def string_list(value: object, where: str) -> tuple[str, ...]:
    """An optional config value that must be a list of strings; () when absent."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise EngineConfigError(f"{where} must be a list of strings")
    return tuple(value)


def positive_number(value: object, where: str, default: float) -> float:
    """An optional config value that must be a positive number; ``default`` when absent."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EngineConfigError(f"{where} must be a positive number")
    return float(value)


def count_or_none(value: object) -> int | None:
    """A non-negative whole number as Telnyx reports it (an int or a digit string); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def reported_e164(value: object) -> str:
    """A number as Telnyx reports it (sometimes without its ``+``), in E.164; "" if not one."""
    if not isinstance(value, str):
        return ""
    digits = value.strip()
    if digits and not digits.startswith("+"):
        digits = "+" + digits
    try:
        return check_e164(digits)
    except ValueError:
        return ""


def reported_time(value: object) -> float:
    """An ISO 8601 time Telnyx reports, as unix seconds; now when it is missing or unreadable."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()
