"""Rows of the store as typed values. Amounts are msat."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple


class PaymentStatus(enum.StrEnum):
    UNPAID = "unpaid"  # invoice issued, not settled
    PAID = "paid"  # settled, not yet used for its call
    SERVING = "serving"  # spent on its call, whose answer or refund is not recorded yet
    SPENT = "spent"  # used for its one call: answered, or refunded after the spend
    REFUNDED = "refunded"  # paid, never served, refund issued in full
    CANCELED = "canceled"  # hold invoice canceled: the payer's HTLCs went back, nothing kept


class RefundStatus(enum.StrEnum):
    OPEN = "open"  # link issued, not claimed
    CLAIMING = "claiming"  # a withdraw invoice was accepted; payout under way or unknown
    PAID = "paid"  # the node paid the withdraw invoice
    EXPIRED = "expired"  # not claimed in time


class Payment(NamedTuple):
    """One invoice and the one call it pays for. A NamedTuple rather than a frozen
    dataclass: a row becomes one in a single tuple construction, about a sixth of a
    frozen dataclass's per-field setattr (a paid call reads one back from its spend)."""

    payment_id: str
    payment_hash: str
    bolt11: str
    service: str
    amount_msat: int
    status: PaymentStatus
    created_at: int
    expires_at: int  # invoice expiry, unix s
    paid_at: int | None
    spent_at: int | None
    root_key: str  # per-token macaroon root key, hex
    token_id: str  # hex, part of the macaroon identifier
    request_digest: str  # sha256 of the priced request (service + canonical params)
    description: str
    via: str  # "http" or "mcp": the surface that created it
    mode: str = "invoice"  # "invoice", or "hold": charged only when the call succeeds


@dataclass(frozen=True)
class Refund:
    refund_id: str  # public charge id
    payment_id: str
    amount_msat: int
    k1: str  # LNURL-withdraw secret, 32 random bytes hex; single use
    status: RefundStatus
    reason: str
    created_at: int
    expires_at: int
    payout_bolt11: str | None
    payout_hash: str | None
    updated_at: int


class JobStatus(enum.StrEnum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Job:
    job_id: str
    payment_id: str
    service: str
    job_type: str
    status: JobStatus
    result: dict[str, Any] | None  # the service's result body, when COMPLETED
    error: dict[str, Any] | None  # the error envelope (with its refund), when FAILED
    created_at: int
    updated_at: int
    callback: JobCallback | None = None  # where to deliver its end, if the caller asked


@dataclass(frozen=True)
class JobCallback:
    """A caller's callback_url and callback_id, and the HMAC key its deliveries are
    signed with (handed to the caller in the 202 answer, never logged)."""

    url: str
    callback_id: str | None
    secret: str  # hex


@dataclass(frozen=True)
class CallbackDelivery:
    job_id: str
    url: str
    secret: str  # hex HMAC key
    body: str  # the exact JSON text that is signed and sent
    attempts: int  # made before this one
