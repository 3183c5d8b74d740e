"""Delivery status of sent SMS, automated calls and faxes: provider reports applied to
the records (satsgate.store.deliveries), a call's billing by its connected duration,
and the payer's free status read.

- :func:`apply_events`: what the webhook route (``POST /api/webhooks/<kind>/<NAME>``)
  does with a genuine provider report. Statuses move forward only
  (:data:`STATUS_RANKS`); a call that reaches a final status is settled once
  (:func:`settle_call`): the started minutes it was connected, at least one when it
  was answered, are charged; the rest of the prepaid time is refunded through the
  refund machinery (an LNURL-withdraw the payer finds in the status read).
- :func:`record_status`: the payer's status read (free), which asks the provider again
  when no report came for a while (a node whose webhooks cannot reach it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from satsgate.engines.delivery import StatusUpdate, WebhookEvents
from satsgate.refunds import RefundService
from satsgate.store import Store
from satsgate.store.deliveries import Delivery

log = logging.getLogger(__name__)

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
    store: Store
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
    record = await env.store.deliveries.update(
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
    if record.channel == "call" and record.final and record.settled_at is None:
        await settle_call(env, record)
        record = await env.store.deliveries.get(record.delivery_id) or record
    return record


async def apply_events(env: DeliveryEnv, provider: str, events: WebhookEvents) -> None:
    """A genuine webhook's status reports. (Inbound messages, e.g. STOP replies, are
    the adapter's to put on the do-not-contact list: it holds ``deps.opt_outs``.)"""
    for update in events.updates:
        try:
            await apply_update(env, provider, update)
        except Exception:  # one bad report must not lose the others
            log.exception("applying a delivery report failed")


def call_charge_msat(record: Delivery) -> int:
    """What a final call costs: its connected duration in started minutes at the
    destination's rate, at least one minute when it connected at all, never more than
    was paid; nothing when it never connected (busy, no answer, failed, canceled)."""
    seconds = record.duration_s or 0
    if record.status != "completed" or seconds <= 0 or record.rate_msat is None:
        return 0
    minutes = max(1, math.ceil(seconds / 60))
    return min(record.paid_msat, minutes * record.rate_msat)


async def settle_call(env: DeliveryEnv, record: Delivery) -> dict[str, Any] | None:
    """Charge a final call's connected time and refund the rest of what was paid, once
    (the record's settlement is one conditional UPDATE); the refund object, if any."""
    charged = call_charge_msat(record)
    if not await env.store.deliveries.settle(record.delivery_id, charged):
        return None  # settled before
    unused = record.paid_msat - charged
    if unused <= 0:
        return None
    payment = await env.store.payments.get(record.payment_id)
    if payment is None:
        log.error("call %s: its payment is gone; %d msat not refunded", record.delivery_id, unused)
        return None
    refund = await env.refunds.refund_spent(payment, unused, f"call {record.status}: unused time")
    log.info(
        "call %s %s after %ss: charged %d msat, refunded %d msat",
        record.delivery_id,
        record.status,
        record.duration_s,
        charged,
        unused if refund else 0,
    )
    return refund

