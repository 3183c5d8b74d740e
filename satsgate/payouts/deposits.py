"""Deposit settlement: bill the used part of a deposit payment, refund the rest exactly once.

Services paid by a deposit (an AI call's minutes, a voice bridge's session) are spent
when they start and settled when they end: :meth:`DepositSettler.settle` bills what was
used and refunds the unused part, once, however often and however concurrently it is
called (the settlement row is keyed by the payment and written in the same transaction as
the refund row and the payment's ``serving -> spent``: :mod:`satsgate.store.deposits`).

The refund is a refund row (an LNURL-withdraw link, counted by the ledger as refunded).
When the payer gave a Lightning address (``refund_address``, LUD-16), the node pays it
there itself: ``https://domain/.well-known/lnurlp/name`` (LUD-06 payRequest), its
callback with ``amount`` in msat, the invoice checked (exactly that amount, the
description hash of the metadata, our network, not our own) and paid through the node
under the refunds' fee cap, claimed first like a withdraw (one payout wins). A payout that
fails leaves the link open: the payer claims it as an LNURL-withdraw (``refund`` in the
settlement, ``POST /api/claim-refund``). A payout whose outcome is unknown stays claiming
until ``RefundService.reconcile`` learns it from the node. After a restart,
:meth:`DepositSettler.resume` takes up payouts that had not finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from satsgate.config.settings import Settings
from satsgate.lightning.invoices import RefusedPayoutInvoice, payout_invoice
from satsgate.payouts.refunds import RefundService, refund_object
from satsgate.public_urls import SYSTEM_OUTBOUND, Outbound, UnsafeUrl, pinned
from satsgate.store import Refund, RefundStatus, Store
from satsgate.store import deposits as rows
from satsgate.store.deposits import DepositRow

log = logging.getLogger("satsgate.payouts.deposits")

LNURL_MAX_BYTES = 64 * 1024
LNURL_TIMEOUT_S = 15.0


class PayoutError(Exception):
    """The Lightning address could not be paid (its message says why, for the payer)."""


@dataclass(frozen=True)
class Settlement:
    """A settled deposit. ``refund_status``: ``none`` (nothing left to refund),
    ``paying`` (on its way to the Lightning address), ``paid`` (paid to the address, or
    the withdraw link was claimed and paid), ``claimable`` (an LNURL-withdraw link: no
    address was given, or the payout to it failed), ``claiming`` (a withdraw is under way),
    ``expired`` (the link was never claimed)."""

    payment_id: str
    service: str
    deposit_msat: int
    used_msat: int
    refund_msat: int
    refund_address: str | None
    payout_state: str  # none | withdraw | pending | paying | paid | fallback
    payout_error: str | None
    refund_status: str
    refund: dict[str, Any] | None  # the LNURL-withdraw refund object (secrets included)
    settled_at: int

    def body(self, *, with_link: bool = False) -> dict[str, Any]:
        """The figures in sats for an answer; the withdraw link only ``with_link`` (for
        whoever proved the payment)."""
        out: dict[str, Any] = {
            "depositSats": self.deposit_msat // 1000,
            "usedSats": -(-self.used_msat // 1000),
            "refundableSats": self.refund_msat // 1000,
            "refund_status": self.refund_status,
        }
        if self.refund_address is not None:
            out["refund_address"] = self.refund_address
        if self.payout_error is not None and self.refund_status == "claimable":
            out["refund_note"] = (
                "The payout to the Lightning address failed; claim the refund as an "
                "LNURL-withdraw (POST /api/claim-refund)."
            )
        if with_link and self.refund is not None:
            out["refund"] = self.refund
        return out


def lnurlp_url(address: str, hosts: Mapping[str, str] | None = None) -> str:
    """LUD-16: ``name@domain`` -> ``https://domain/.well-known/lnurlp/name`` (or the base
    URL ``hosts`` maps the domain to)."""
    name, _, domain = address.partition("@")
    if not name or not domain:
        raise PayoutError(f"{address!r} is not a Lightning address")
    base = (hosts or {}).get(domain.lower(), f"https://{domain}")
    return f"{base.rstrip('/')}/.well-known/lnurlp/{quote(name.lower(), safe='')}"


async def _get_json(
    http: httpx.AsyncClient,
    url: str,
    params: Mapping[str, str],
    outbound: Outbound,
    hosts: Mapping[str, str],
) -> Any:
    """GET a JSON document of a Lightning-address service: a public https:// URL (checked
    and pinned to a public address, satsgate.public_urls), or one under a
    base URL the node's ``lightning_address_hosts`` maps a domain to (off mainnet)."""
    if params:
        url += ("&" if urlsplit(url).query else "?") + urlencode(params)
    direct = any(url.startswith(base.rstrip("/") + "/") for base in hosts.values())
    try:
        async with contextlib.AsyncExitStack() as stack:
            if direct:
                resp = await stack.enter_async_context(
                    http.stream("GET", url, timeout=LNURL_TIMEOUT_S, follow_redirects=False)
                )
            else:
                resp = await stack.enter_async_context(pinned(http, "GET", url, outbound))
            body = b""
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > LNURL_MAX_BYTES:
                    raise PayoutError("the Lightning address service answered too much")
            status = resp.status_code
    except UnsafeUrl as exc:
        raise PayoutError(f"the Lightning address service is not public ({exc})") from None
    except httpx.HTTPError as exc:
        raise PayoutError(
            f"the Lightning address service did not answer ({type(exc).__name__})"
        ) from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise PayoutError(
            f"the Lightning address service answered HTTP {status}, not JSON"
        ) from None
    if not isinstance(doc, dict):
        raise PayoutError("the Lightning address service answered no JSON object")
    if str(doc.get("status", "")).upper() == "ERROR":
        raise PayoutError(f"the Lightning address service refused: {str(doc.get('reason'))[:200]}")
    if status != 200:
        raise PayoutError(f"the Lightning address service answered HTTP {status}")
    return doc


async def lnurlp_invoice(
    http: httpx.AsyncClient,
    address: str,
    amount_msat: int,
    network: str,
    hosts: Mapping[str, str] | None = None,
    outbound: Outbound = SYSTEM_OUTBOUND,
) -> str:
    """An invoice of ``address`` for exactly ``amount_msat`` (LUD-06/16), checked: the
    amount, the description hash of the payRequest's metadata, the network, unexpired.
    Raises PayoutError."""
    hosts = hosts or {}
    async with asyncio.timeout(2 * LNURL_TIMEOUT_S):
        pay_request = await _get_json(http, lnurlp_url(address, hosts), {}, outbound, hosts)
    if pay_request.get("tag") != "payRequest":
        raise PayoutError("the Lightning address is not a payRequest")
    callback, metadata = pay_request.get("callback"), pay_request.get("metadata")
    low, high = pay_request.get("minSendable"), pay_request.get("maxSendable")
    if not isinstance(callback, str) or not isinstance(metadata, str):
        raise PayoutError("the Lightning address's payRequest lacks a callback or metadata")
    if urlsplit(callback).scheme not in ("https", "http"):
        raise PayoutError("the Lightning address's callback is not an https URL")
    if not isinstance(low, int) or not isinstance(high, int) or not low <= amount_msat <= high:
        raise PayoutError(
            f"the Lightning address accepts {low} to {high} msat, not {amount_msat} msat"
        )
    async with asyncio.timeout(2 * LNURL_TIMEOUT_S):
        answer = await _get_json(http, callback, {"amount": str(amount_msat)}, outbound, hosts)
    bolt11 = answer.get("pr")
    if not isinstance(bolt11, str):
        raise PayoutError("the Lightning address gave no invoice")
    try:
        invoice = payout_invoice(bolt11, amount_msat=amount_msat, network=network)
    except RefusedPayoutInvoice as refused:
        raise PayoutError(f"the Lightning address's invoice {refused}") from None
    if invoice.description_hash != hashlib.sha256(metadata.encode()).hexdigest():
        raise PayoutError("the Lightning address's invoice does not commit to its metadata")
    return bolt11


class DepositSettler:
    """Settles deposits (see the module). One per app: ``app[DEPOSITS]``."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        refunds: RefundService,
        http: httpx.AsyncClient,
        outbound: Outbound = SYSTEM_OUTBOUND,
    ) -> None:
        self._outbound = outbound
        self._settings = settings
        self._store = store
        self._refunds = refunds
        self._http = http
        self._payouts: set[asyncio.Task[None]] = set()
        self._in_flight: set[str] = set()  # payment ids whose payout this process makes

    @property
    def base_url(self) -> str:
        return self._settings.public_base_url

    def _hosts(self) -> Mapping[str, str]:
        hosts = self._settings.lightning_address_hosts
        if self._settings.network == "bitcoin" or not isinstance(hosts, Mapping):
            return {}
        return {str(k).lower(): str(v) for k, v in hosts.items()}

    async def settle(
        self,
        payment_id: str,
        used_msat: int,
        *,
        refund_address: str | None = None,
        reason: str = "unused deposit",
        wait: bool = True,
    ) -> Settlement | None:
        """Bill ``used_msat`` of the deposit paid by ``payment_id`` and refund the rest,
        once: a second call (or one racing this one, or one after a restart) returns the
        first settlement unchanged, whatever its arguments. ``used_msat`` is capped to
        the deposit. The refund goes to ``refund_address`` (a Lightning address) when
        given, else (or when that payout fails) it is an LNURL-withdraw link in
        ``Settlement.refund``. ``wait``: return after the payout attempt (else it runs in
        the background). None when the payment is unknown or was never spent."""
        now = int(time.time())
        refund = Refund(
            refund_id=f"rf_{secrets.token_hex(12)}",
            payment_id=payment_id,
            amount_msat=0,  # the repository sets the unused part
            k1=secrets.token_hex(32),
            status=RefundStatus.OPEN,
            reason=reason[:500],
            created_at=now,
            expires_at=now + self._settings.refund_ttl_s,
            payout_bolt11=None,
            payout_hash=None,
            updated_at=now,
        )
        row, created = await self._store.deposits.settle(
            payment_id, used_msat, refund, refund_address, reason, now
        )
        if row is None:
            return None
        if created:
            log.info(
                "deposit %s settled: %d of %d msat used, %d msat refunded (%s)",
                payment_id,
                row.used_msat,
                row.deposit_msat,
                row.refund_msat,
                row.payout_state,
            )
        if row.payout_state == rows.PENDING:
            if wait:
                await self._pay_address(row)
            else:
                self._spawn(row)
        return await self.get(payment_id)

    async def get(self, payment_id: str) -> Settlement | None:
        """The payment's settlement as it stands now, or None if it was not settled."""
        row = await self._store.deposits.get(payment_id)
        return None if row is None else await self._view(row)

    async def _view(self, row: DepositRow) -> Settlement:
        refund: Refund | None = None
        if row.refund_id is not None:
            for candidate in await self._store.refunds.for_payment(row.payment_id):
                if candidate.refund_id == row.refund_id:
                    refund = candidate
        status = "none"
        if refund is not None:
            status = {
                RefundStatus.OPEN: "claimable",
                RefundStatus.CLAIMING: "claiming",
                RefundStatus.PAID: "paid",
                RefundStatus.EXPIRED: "expired",
            }[refund.status]
            if row.payout_state in (rows.PENDING, rows.PAYING) and status in (
                "claimable",
                "claiming",
            ):
                status = "paying"
        return Settlement(
            payment_id=row.payment_id,
            service=row.service,
            deposit_msat=row.deposit_msat,
            used_msat=row.used_msat,
            refund_msat=row.refund_msat,
            refund_address=row.refund_address,
            payout_state=row.payout_state,
            payout_error=row.payout_error,
            refund_status=status,
            refund=None if refund is None else refund_object(refund, self.base_url),
            settled_at=row.created_at,
        )

    def _spawn(self, row: DepositRow) -> None:
        self._in_flight.add(row.payment_id)  # at once: resume() must not take it up too
        task = asyncio.create_task(self._pay_address(row), name=f"deposit-payout-{row.payment_id}")
        self._payouts.add(task)
        task.add_done_callback(self._payouts.discard)

    async def _pay_address(self, row: DepositRow) -> None:
        """pending -> paying (one caller wins), then the payout: paid, or fallback (the
        link stays open for the payer). An unknown outcome stays paying; the refund's
        claim is reconciled with the node, and :meth:`resume` finishes the row."""
        self._in_flight.add(row.payment_id)
        try:
            await self._pay_address_once(row)
        finally:
            self._in_flight.discard(row.payment_id)

    async def _pay_address_once(self, row: DepositRow) -> None:
        store = self._store.deposits
        if not await store.move(row.payment_id, (rows.PENDING,), rows.PAYING, None, _now()):
            return
        assert row.refund_address is not None and row.refund_id is not None
        refund = await self._refund_of(row)
        if refund is None:
            await store.move(row.payment_id, (rows.PAYING,), rows.FALLBACK, "no refund", _now())
            return
        try:
            bolt11 = await lnurlp_invoice(
                self._http,
                row.refund_address,
                refund.amount_msat,
                self._settings.network,
                self._hosts(),
                self._outbound,
            )
        except (PayoutError, TimeoutError) as exc:
            exc = exc if isinstance(exc, PayoutError) else PayoutError("no answer in time")
            log.warning("deposit %s: Lightning-address payout refused: %s", row.payment_id, exc)
            await store.move(row.payment_id, (rows.PAYING,), rows.FALLBACK, str(exc), _now())
            return
        status, error = await self._refunds.pay_out(refund.k1, bolt11)
        if status is RefundStatus.PAID:
            await store.move(row.payment_id, (rows.PAYING,), rows.PAID, None, _now())
            log.info(
                "deposit %s: %d msat refunded to its Lightning address",
                row.payment_id,
                refund.amount_msat,
            )
        elif status is RefundStatus.OPEN:
            log.warning("deposit %s: Lightning-address payout failed: %s", row.payment_id, error)
            await store.move(row.payment_id, (rows.PAYING,), rows.FALLBACK, error, _now())
        else:  # claiming: outcome unknown; resume() settles the row once reconcile knows
            await store.move(row.payment_id, (rows.PAYING,), rows.PAYING, error, _now())

    async def _refund_of(self, row: DepositRow) -> Refund | None:
        for refund in await self._store.refunds.for_payment(row.payment_id):
            if refund.refund_id == row.refund_id:
                return refund
        return None

    async def resume(self) -> int:
        """Finish the payouts whose outcome was unknown, once the refund's claim is
        resolved (scheduler; ``RefundService.reconcile`` asks the node): the pending ones,
        and those this instance is paying (another instance follows its own). How many
        rows moved."""
        moved = 0
        deposits = self._store.deposits
        for row in await deposits.to_follow():
            if row.payment_id in self._in_flight:
                continue
            refund = await self._refund_of(row)
            if refund is None:
                continue
            if refund.status is RefundStatus.PAID:
                moved += await deposits.move(
                    row.payment_id, (rows.PENDING, rows.PAYING), rows.PAID, None, _now()
                )
            elif refund.status is RefundStatus.EXPIRED:
                moved += await deposits.move(
                    row.payment_id, (rows.PENDING, rows.PAYING), rows.FALLBACK, "expired", _now()
                )
            elif refund.status is RefundStatus.OPEN and row.payout_state == rows.PENDING:
                self._spawn(row)
                moved += 1
            elif refund.status is RefundStatus.OPEN:
                # The claim's outcome became known as failed: the link is the payer's.
                error = await self._refunds.last_payout_error(refund.k1)
                moved += await deposits.move(
                    row.payment_id, (rows.PAYING,), rows.FALLBACK, error or "failed", _now()
                )
        return moved

    async def take_up(self, gone: str) -> int:
        """The payouts the gone instance ``gone`` had under way: one whose refund is still
        unclaimed is tried once more from here; one whose claim was made is followed here
        (``resume``). How many were taken."""
        taken = 0
        deposits = self._store.deposits
        for row in await deposits.paying_of(gone):
            refund = await self._refund_of(row)
            if refund is not None and refund.status is RefundStatus.OPEN:
                # A crash cut the attempt short before its claim: try once more.
                if await deposits.retake(row.payment_id, gone, _now()):
                    self._spawn(row)
                    taken += 1
            elif await deposits.move(row.payment_id, (rows.PAYING,), rows.PAYING, None, _now()):
                taken += 1  # its claim's outcome is followed by this instance now
        return taken

    async def wait_payouts(self) -> None:
        """Let payouts under way finish (shutdown, tests)."""
        while self._payouts:
            await asyncio.gather(*list(self._payouts), return_exceptions=True)


def _now() -> int:
    return int(time.time())
