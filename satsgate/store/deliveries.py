"""Delivery records: one per SMS, automated call or fax handed to a provider.

Created before the provider is asked (so a status webhook that beats the send's answer
finds it), updated by status reports, read by the payer's free poll. A status only moves
forward (``status_rank``, given by the caller: a late ``sent`` never overwrites
``delivered``), and nothing moves a final record's status again. Billing by duration is
settled once: :meth:`DeliveryRepository.settle` is one conditional UPDATE from unsettled.

No message text and no phone number is stored: the destination's country, statuses,
durations and amounts only (the spec's retention rules).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection

_COLUMNS = (
    "delivery_id",
    "payment_id",
    "channel",
    "provider",
    "provider_ref",
    "country",
    "status",
    "status_rank",
    "final",
    "error",
    "answered_by",
    "duration_s",
    "paid_msat",
    "rate_msat",
    "charged_msat",
    "settled_at",
    "created_at",
    "updated_at",
    "final_at",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM deliveries WHERE "

_PREFIX = {"sms": "msg", "call": "call", "fax": "fax"}


@dataclass(frozen=True)
class Delivery:
    delivery_id: str  # shown to the payer (message_id / call_id / faxId): unguessable
    payment_id: str
    channel: str  # "sms" | "call" | "fax"
    provider: str  # the operator's [providers.NAME]: never shown to callers
    provider_ref: str | None  # the provider's id, once it answered
    country: str  # ISO 3166-1 alpha-2 of the destination
    status: str
    status_rank: int
    final: bool
    error: str | None
    answered_by: str | None
    duration_s: int | None
    paid_msat: int
    rate_msat: int | None  # calls: the destination's price per started minute
    charged_msat: int | None  # set once, at settlement
    settled_at: int | None
    created_at: int
    updated_at: int
    final_at: int | None


def new_delivery_id(channel: str) -> str:
    """An unguessable id for the payer's poll: ``msg_...``, ``call_...`` or ``fax_...``."""
    return f"{_PREFIX.get(channel, channel)}_{secrets.token_urlsafe(18)}"


def _row(row: tuple[Any, ...]) -> Delivery:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["final"] = bool(values["final"])
    return Delivery(**values)


class DeliveryRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def create(
        self,
        *,
        delivery_id: str,
        payment_id: str,
        channel: str,
        provider: str,
        country: str,
        status: str,
        paid_msat: int,
        rate_msat: int | None = None,
        now: int | None = None,
    ) -> Delivery:
        """A new record in ``status`` (rank 0), before the provider is asked."""
        stamp = int(time.time()) if now is None else now
        delivery = Delivery(
            delivery_id, payment_id, channel, provider, None, country, status, 0, False,
            None, None, None, paid_msat, rate_msat, None, None, stamp, stamp, None,
        )  # fmt: skip
        values = [getattr(delivery, c) for c in _COLUMNS]
        values[_COLUMNS.index("final")] = 0
        sql = (
            f"INSERT INTO deliveries ({', '.join(_COLUMNS)})"
            f" VALUES ({', '.join('?' * len(_COLUMNS))})"
        )
        await self._db.write_one(sql, values)
        return delivery

    async def get(self, delivery_id: str) -> Delivery | None:
        row = await self._db.read(
            lambda conn: conn.execute(_SELECT + "delivery_id = ?", (delivery_id,)).fetchone()
        )
        return None if row is None else _row(row)

    async def find(self, provider: str, provider_ref: str) -> Delivery | None:
        row = await self._db.read(
            lambda conn: conn.execute(
                _SELECT + "provider = ? AND provider_ref = ?", (provider, provider_ref)
            ).fetchone()
        )
        return None if row is None else _row(row)

    async def update(
        self,
        *,
        provider: str,
        status: str,
        rank: int,
        final: bool,
        delivery_id: str | None = None,
        provider_ref: str | None = None,
        error: str | None = None,
        answered_by: str | None = None,
        duration_s: int | None = None,
        now: int | None = None,
    ) -> Delivery | None:
        """Apply one status report to the record of ``delivery_id`` (when the report
        carried it) else of ``(provider, provider_ref)``: the provider's id, error,
        answered_by and duration are filled in when given; the status moves only to a
        higher ``rank`` and never away from a final one. Returns the record as it is
        now; None when no record of ``provider`` matches."""
        stamp = int(time.time()) if now is None else now

        def go(conn: Connection) -> Delivery | None:
            if delivery_id is not None:
                where, args = "delivery_id = ? AND provider = ?", (delivery_id, provider)
            elif provider_ref is not None:
                where, args = "provider = ? AND provider_ref = ?", (provider, provider_ref)
            else:
                return None
            row = conn.execute(_SELECT + where, args).fetchone()
            if row is None:
                return None
            current = _row(row)
            if provider_ref is not None and current.provider_ref not in (None, provider_ref):
                return current  # a report naming another provider id: not this record's
            conn.execute(
                "UPDATE deliveries SET provider_ref = COALESCE(provider_ref, ?),"
                " error = COALESCE(?, error), answered_by = COALESCE(?, answered_by),"
                " duration_s = COALESCE(?, duration_s), updated_at = ?"
                " WHERE delivery_id = ?",
                (provider_ref, error, answered_by, duration_s, stamp, current.delivery_id),
            )
            conn.execute(
                "UPDATE deliveries SET status = ?, status_rank = ?, final = ?,"
                " final_at = CASE WHEN ? = 1 THEN ? ELSE final_at END"
                " WHERE delivery_id = ? AND final = 0 AND status_rank < ?",
                (status, rank, int(final), int(final), stamp, current.delivery_id, rank),
            )
            after = conn.execute(_SELECT + "delivery_id = ?", (current.delivery_id,)).fetchone()
            return _row(after)

        return await self._db.run_in_transaction(go)

    async def reassign(self, delivery_id: str, provider: str, now: int | None = None) -> bool:
        """Move a record no provider has answered for yet to the next provider of a
        fallback chain; False when it has a provider id already."""
        stamp = int(time.time()) if now is None else now
        changed = await self._db.write_one(
            "UPDATE deliveries SET provider = ?, updated_at = ?"
            " WHERE delivery_id = ? AND provider_ref IS NULL AND final = 0",
            (provider, stamp, delivery_id),
        )
        return changed == 1

    async def settle(self, delivery_id: str, charged_msat: int, now: int | None = None) -> bool:
        """Record the amount finally charged, once: False when it was settled before."""
        stamp = int(time.time()) if now is None else now
        changed = await self._db.write_one(
            "UPDATE deliveries SET charged_msat = ?, settled_at = ?, updated_at = ?"
            " WHERE delivery_id = ? AND settled_at IS NULL",
            (charged_msat, stamp, stamp, delivery_id),
        )
        return changed == 1

    async def open_records(
        self, channel: str, updated_before: int, created_after: int = 0, limit: int = 100
    ) -> list[Delivery]:
        """Records of ``channel`` not final (or final but unsettled) last updated before
        ``updated_before`` and created after ``created_after``: what a status fetch
        should look at again."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                _SELECT + "channel = ? AND (final = 0 OR settled_at IS NULL)"
                " AND updated_at < ? AND created_at > ? ORDER BY updated_at LIMIT ?",
                (channel, updated_before, created_after, limit),
            ).fetchall()
        )
        return [_row(r) for r in rows]
