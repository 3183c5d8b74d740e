"""Delivery records of sent SMS, automated calls and faxes: made as a send is tried,
provider reports applied to them (satsgate.store.deliveries), a call's billing by its
connected duration, and the payer's free status read.

- :func:`send_recorded`: an SMS's or a call's send, every provider attempt of a fallback
  chain recorded under one delivery id; a failure recorded ``failed`` (the gate refunds
  it in full).
- :func:`apply_events`: what the webhook route (``POST /api/webhooks/<kind>/<NAME>``)
  does with a genuine provider report. Statuses move forward only
  (:data:`STATUS_RANKS`); a call that reaches a final status is settled once
  (:func:`settle`): the started minutes it was connected, at least one when it
  was answered, are charged; the rest of the prepaid time is refunded through the
  refund machinery (an LNURL-withdraw the payer finds in the status read). An SMS that
  ends undelivered or failed is refunded in full the same way (a failure after payment).
- :func:`record_status`: the payer's status read (free), which asks the provider again
  when no report came for a while (a node whose webhooks cannot reach it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

from satsgate.engines import EngineConfigError, EngineError, Engines
from satsgate.engines.delivery import StatusUpdate, WebhookEvents
from satsgate.engines.messaging import SmsEngine
from satsgate.engines.voice_call import VoiceCallEngine
from satsgate.errors import ApiError, ErrorCode
from satsgate.payouts.refunds import RefundService
from satsgate.services.base import ServiceContext
from satsgate.store.deliveries import Delivery, DeliveryRepository, new_delivery_id
from satsgate.store.rows import Payment

log = logging.getLogger(__name__)

_E = TypeVar("_E")

# Status -> rank per channel; the initial "sending" (the record exists, the provider has
# not answered yet) is rank 0. Final statuses share the highest rank of their channel.
STATUS_RANKS: Final[Mapping[str, Mapping[str, int]]] = {
    "sms": {"sending": 0, "queued": 1, "sent": 2, "delivered": 3, "undelivered": 3, "failed": 3},
    "call": {
        "sending": 0, "queued": 1, "ringing": 2, "in-progress": 3, "completed": 4,
        "busy": 4, "no-answer": 4, "failed": 4, "canceled": 4,
    },
    "fax": {"sending": 0, "queued": 1, "sending-fax": 2, "delivered": 3, "failed": 3},
}  # fmt: skip
FINAL_STATUSES: Final[Mapping[str, frozenset[str]]] = {
    "sms": frozenset({"delivered", "undelivered", "failed"}),
    "call": frozenset({"completed", "busy", "no-answer", "failed", "canceled"}),
    "fax": frozenset({"delivered", "failed"}),
}
SENDING = "sending"


def rank(channel: str, status: str) -> tuple[int, bool] | None:
    """(rank, final) of a status of ``channel``; None for a status it does not know."""
    ranks = STATUS_RANKS.get(channel, {})
    if status not in ranks:
        return None
    return ranks[status], status in FINAL_STATUSES.get(channel, frozenset())


@dataclass(frozen=True)
class DeliveryEnv:
    """What applying reports needs: the records, the payments (a call's amount paid) and
    the refund machinery."""

    deliveries: DeliveryRepository
    get_payment: Callable[[str], Awaitable[Payment | None]]
    refunds: RefundService


async def apply_update(
    env: DeliveryEnv, provider: str, update: StatusUpdate, now: int | None = None
) -> Delivery | None:
    """One report onto its record (and a call's settlement once it is final); None when
    it matches no record of ``provider`` or names a status the channel lacks."""
    ranked = rank(update.channel, update.status)
    if ranked is None:
        log.info("delivery report with unknown %s status %r ignored", update.channel, update.status)
        return None
    record = await env.deliveries.update(
        provider=provider,
        status=update.status,
        rank=ranked[0],
        final=ranked[1],
        delivery_id=update.reference,
        provider_ref=update.provider_ref or None,
        error=update.error,
        answered_by=update.answered_by,
        duration_s=update.duration_s,
        now=now,
    )
    if record is None:
        log.info("delivery report for no known %s of provider %s", update.channel, provider)
        return None
    if record.final and record.settled_at is None:
        await settle(env, record)
        record = await env.deliveries.get(record.delivery_id) or record
    return record


async def apply_events(env: DeliveryEnv, provider: str, events: WebhookEvents) -> None:
    """A genuine webhook's status reports. (Inbound messages, e.g. STOP replies, are
    the adapter's to put on the do-not-contact list: it holds ``deps.opt_outs``.)"""
    for update in events.updates:
        try:
            await apply_update(env, provider, update)
        except Exception:  # one bad report must not lose the others
            log.exception("applying a delivery report failed")


def paid_minutes(record: Delivery) -> int:
    """The minutes a call's payment bought (its quote was minutes times the rate)."""
    if not record.rate_msat:
        return 1
    return max(1, record.paid_msat // record.rate_msat)


def used_minutes(record: Delivery) -> int:
    """A final call's billed minutes: its connected time in started minutes, at least one
    when it connected at all, at most what was paid; 0 when it never connected (busy, no
    answer, failed, canceled)."""
    seconds = record.duration_s or 0
    if record.status != "completed" or seconds <= 0:
        return 0
    return min(paid_minutes(record), max(1, math.ceil(seconds / 60)))


def call_charge_msat(record: Delivery, amount_msat: int) -> int:
    """What a final call costs of the ``amount_msat`` its payment carried: that amount's
    share of the minutes used (the rate the payer was quoted)."""
    return amount_msat * used_minutes(record) // paid_minutes(record)


# A message that ended so was not delivered: refunded in full.
UNDELIVERED_SMS: Final = frozenset({"undelivered", "failed"})


def charge_msat(record: Delivery, amount_msat: int) -> int:
    """What a final record costs of the ``amount_msat`` paid: a call its connected
    minutes; an SMS all of it when delivered, nothing when it was not; a fax (or any other
    channel) all of it."""
    if record.channel == "call":
        return call_charge_msat(record, amount_msat)
    if record.channel == "sms" and record.status in UNDELIVERED_SMS:
        return 0
    return amount_msat


# A record's settlement (the claim, then its refund) runs under its lock, and a status
# read of a final record waits on it: the read never shows "settled" without the refund.
# Per process, by delivery id; an entry lives while someone holds or awaits its lock.
_SETTLING: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def settlement_lock(delivery_id: str) -> asyncio.Lock:
    lock = _SETTLING.get(delivery_id)
    if lock is None:
        lock = _SETTLING[delivery_id] = asyncio.Lock()
    return lock


async def settle(env: DeliveryEnv, record: Delivery) -> dict[str, Any] | None:
    """Charge a final record (:func:`charge_msat`) and refund the rest of what was paid,
    once (the record's settlement is one conditional UPDATE, and the claim and its refund
    run under the record's lock); the refund object, if any."""
    async with settlement_lock(record.delivery_id):
        return await _settle(env, record)


async def _settle(env: DeliveryEnv, record: Delivery) -> dict[str, Any] | None:
    payment = await env.get_payment(record.payment_id)
    amount = record.paid_msat if payment is None else payment.amount_msat
    charged = charge_msat(record, amount)
    if not await env.deliveries.settle(record.delivery_id, charged):
        return None  # settled before
    unused = amount - charged
    if unused <= 0:
        return None
    if payment is None:
        log.error("call %s: its payment is gone; %d msat not refunded", record.delivery_id, unused)
        return None
    reason = (
        f"call {record.status}: unused time"
        if record.channel == "call"
        else f"{record.channel} {record.status}"
    )
    refund = await env.refunds.refund_spent(payment, unused, reason)
    log.info(
        "%s %s %s: charged %d msat, refunded %d msat",
        record.channel,
        record.delivery_id,
        record.status,
        charged,
        unused if refund else 0,
    )
    return refund


# -- the payer's status read (free) ---------------------------------------------------------

# Ask the provider again when no report came for this long (a node whose webhooks do
# not reach it still shows the payer a moving status).
REFRESH_AFTER_S = 15
SMS_STATUS_PATH = "/api/l402/send-sms"
CALL_STATUS_PATH = "/api/l402/call"


def status_url(base_url: str, record_id: str) -> str:
    """The free status read of a message (``msg_...``) or call (``call_...``)."""
    if record_id.startswith("call_"):
        return f"{base_url}{CALL_STATUS_PATH}?call_id={record_id}"
    return f"{base_url}{SMS_STATUS_PATH}?message_id={record_id}"


async def read_status(
    env: DeliveryEnv, engines: Engines, channel: str, delivery_id: str, now: int | None = None
) -> Delivery:
    """The record the payer asks for (ApiError DELIVERY_NOT_FOUND when there is none of
    ``channel``), refreshed from the provider when no report came for a while, and a
    final call settled if a restart interrupted its settlement."""
    record = await env.deliveries.get(delivery_id)
    if record is None or record.channel != channel:
        raise ApiError(ErrorCode.DELIVERY_NOT_FOUND, f"No {channel} with id {delivery_id!r}.")
    stamp = int(time.time()) if now is None else now
    if not record.final and record.provider_ref and stamp - record.updated_at >= REFRESH_AFTER_S:
        update = await _fetch(engines, record)
        if update is not None:
            update = dataclasses.replace(update, reference=record.delivery_id)
            record = await apply_update(env, record.provider, update, now=stamp) or record
    if record.final:
        async with settlement_lock(record.delivery_id):  # a settlement under way ends first
            record = await env.deliveries.get(record.delivery_id) or record
            if record.settled_at is None:
                await _settle(env, record)
                record = await env.deliveries.get(record.delivery_id) or record
    return record


async def _fetch(engines: Engines, record: Delivery) -> StatusUpdate | None:
    provider = engines.provider(record.provider)
    ref = record.provider_ref
    if provider is None or ref is None:
        return None
    try:
        if record.channel == "sms":
            sms = cast(SmsEngine | None, provider.engine("sms"))
            return None if sms is None else await sms.sms_status(ref)
        if record.channel == "call":
            voice = cast(VoiceCallEngine | None, provider.engine("voice"))
            return None if voice is None else await voice.call_status(ref)
    except (EngineError, EngineConfigError) as exc:
        log.info("status fetch of %s failed: %s", record.delivery_id, getattr(exc, "code", exc))
    return None


def _iso(stamp: int | None) -> str | None:
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")


async def sms_body(env: DeliveryEnv, record: Delivery, base_url: str) -> dict[str, Any]:
    """``{ success, message_id, status, final, updated_at, status_url }``, and ``refund``
    (an LNURL-withdraw) once a message ended undelivered or failed."""
    body: dict[str, Any] = {
        "success": True,
        "message_id": record.delivery_id,
        "status": record.status,
        "final": record.final,
        "updated_at": _iso(record.updated_at),
        "status_url": status_url(base_url, record.delivery_id),
    }
    if record.settled_at is not None and record.charged_msat == 0:
        body["refund"] = await env.refunds.latest_refund(record.payment_id)
    return body


async def call_body(env: DeliveryEnv, record: Delivery, base_url: str) -> dict[str, Any]:
    """``{ success, call_id, status, final, duration_s, answered_by, paid_minutes,
    billed_minutes, charged_sats, refund, status_url }``: billing once the call ended."""
    body: dict[str, Any] = {
        "success": True,
        "call_id": record.delivery_id,
        "status": record.status,
        "final": record.final,
        "updated_at": _iso(record.updated_at),
        "duration_s": record.duration_s,
        "answered_by": record.answered_by,
        "paid_minutes": paid_minutes(record),
        "status_url": status_url(base_url, record.delivery_id),
    }
    if record.settled_at is not None and record.charged_msat is not None:
        body["billed_minutes"] = used_minutes(record)
        body["charged_sats"] = record.charged_msat / 1000
        body["refund"] = await env.refunds.latest_refund(record.payment_id)
    return body


# -- the sweep (scheduled) ------------------------------------------------------------------

# A record no report finished this long after its last change is asked about again; one
# older than SWEEP_MAX_AGE_S is left as it is (the provider has forgotten it too).
SWEEP_AFTER_S = 15 * 60
SWEEP_MAX_AGE_S = 3 * 86400


async def sweep(env: DeliveryEnv, engines: Engines, now: int | None = None) -> int:
    """Finish what no webhook finished: fetch the status of open SMS and calls from their
    provider, settle the ones that ended (their refunds); a record the provider never
    answered for (a restart between the record and the send) is closed as failed (its
    payment was refunded by the gate's restart sweep). Returns the records finished."""
    stamp = int(time.time()) if now is None else now
    finished = 0
    for channel in ("call", "sms"):
        records = await env.deliveries.open_records(
            channel, stamp - SWEEP_AFTER_S, stamp - SWEEP_MAX_AGE_S
        )
        for record in records:
            try:
                if record.provider_ref is None:
                    ranked = rank(channel, "failed")
                    assert ranked is not None
                    await env.deliveries.update(
                        provider=record.provider, delivery_id=record.delivery_id,
                        status="failed", rank=ranked[0], final=True, error="lost", now=stamp,
                    )  # fmt: skip
                    await env.deliveries.settle(record.delivery_id, 0, now=stamp)
                    finished += 1
                    continue
                got = await read_status(env, engines, channel, record.delivery_id, now=stamp)
                finished += int(got.final)
            except Exception:  # one record must not stop the sweep
                log.exception("delivery sweep: %s failed", record.delivery_id)
    return finished


# -- the records of a send (SMS, automated call) --------------------------------------------


def _records(ctx: ServiceContext) -> DeliveryRepository:
    if ctx.deliveries is None:  # every app has a store; a bare context is a bug
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "Delivery records are not available on this node."
        )
    return ctx.deliveries


def _provider_of(ctx: ServiceContext, engine_name: str, engine: object) -> str:
    """The operator's provider name of the binding serving ``engine`` (the records are
    keyed by it, so its webhooks find them)."""
    for binding in ctx.engines.bindings(engine_name):
        if binding.engine is engine:
            return binding.provider.name if binding.provider is not None else binding.label
    return engine_name


async def _attempt_record(
    ctx: ServiceContext,
    records: DeliveryRepository,
    created: list[str],
    *,
    delivery_id: str,
    channel: str,
    provider: str,
    country: str,
    paid_msat: int,
    rate_msat: int | None = None,
) -> None:
    """The record of one attempt: created before the first provider is asked, moved to
    the next provider of a fallback chain."""
    if not created:
        await records.create(
            delivery_id=delivery_id,
            payment_id=ctx.call_id,
            channel=channel,
            provider=provider,
            country=country,
            status=SENDING,
            paid_msat=paid_msat,
            rate_msat=rate_msat,
        )
    elif created[-1] != provider:
        await records.reassign(delivery_id, provider)
    created.append(provider)


async def _record_sent(
    records: DeliveryRepository,
    channel: str,
    provider: str,
    delivery_id: str,
    provider_ref: str,
    status: str,
) -> str:
    """The provider took the message or call: its id and first status recorded; the
    status to show the payer (the record's, which a webhook may already have moved)."""
    ranked = rank(channel, status) or (1, False)
    record = await records.update(
        provider=provider,
        delivery_id=delivery_id,
        provider_ref=provider_ref,
        status=status,
        rank=ranked[0],
        final=ranked[1],
    )
    return record.status if record is not None else status


async def _mark_failed(
    records: DeliveryRepository,
    created: list[str],
    delivery_id: str,
    exc: EngineError,
    channel: str,
) -> None:
    if created:
        ranked = rank(channel, "failed")
        assert ranked is not None
        await records.update(
            provider=created[-1],
            delivery_id=delivery_id,
            status="failed",
            rank=ranked[0],
            final=True,
            error=exc.code,
        )
        await records.settle(delivery_id, 0)  # refunded in full by the gate


async def send_recorded(
    ctx: ServiceContext,
    channel: str,
    engine_name: str,
    protocol: type[_E],
    send: Callable[[_E, str], Awaitable[tuple[str, str]]],
    *,
    phone_number: str,
    paid_msat: int,
    rate_msat: int | None = None,
) -> tuple[str, str]:
    """``send(engine, delivery_id)`` (the provider's id and first status) on the engine
    named ``engine_name``, every attempt recorded under one delivery id: that id, and the
    status to show the payer. A failure is recorded ``failed`` and raised (the gate
    refunds it)."""
    records = _records(ctx)
    delivery_id = new_delivery_id(channel)
    country = ctx.rate_book.destinations.destination(phone_number).country
    created: list[str] = []

    async def attempt(engine: _E, _model: str | None) -> tuple[str, str, str]:
        provider = _provider_of(ctx, engine_name, engine)
        await _attempt_record(
            ctx, records, created, delivery_id=delivery_id, channel=channel, provider=provider,
            country=country, paid_msat=paid_msat, rate_msat=rate_msat,
        )  # fmt: skip
        provider_ref, status = await send(engine, delivery_id)
        return provider, provider_ref, status

    try:
        provider, provider_ref, status = await ctx.engines.run(engine_name, protocol, attempt)
    except EngineError as exc:
        await _mark_failed(records, created, delivery_id, exc, channel)
        raise
    return delivery_id, await _record_sent(
        records, channel, provider, delivery_id, provider_ref, status
    )
