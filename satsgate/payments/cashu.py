"""Cashu ecash payments (NUT-24): a third way to pay a call, beside L402 and MPP.

With ``[cashu] mints = [...]`` every 402 also carries ``X-Cashu: creqA...`` (a NUT-18
payment request: the price, the unit, the trusted mints). A retry carrying ``X-Cashu:
cashuB...`` (a NUT-00 V4 token) pays the call:

1. the token decodes; its mint is one of ours, its unit ours (and every keyset it names is
   that mint's, in that unit); its value less the mint's input fees (NUT-02) covers the
   price. Otherwise 400 (NUT-24), nothing swapped, nothing charged;
2. the receipt, its proofs' Ys and the swap's blinded outputs are recorded in one
   transaction (:meth:`EcashRepository.claim`): a token presented again, at once or later,
   finds its Ys taken and is never swapped by two requests at once;
3. a swap at the mint (NUT-03) turns the payer's proofs into new ones of satsgate's: the
   price (kept) and the change. The mint's own double-spend answer is the second guard;
4. the kept proofs and a payment row (``mode = 'cashu'``, paid) are written in one
   transaction, and the call runs under the spend rule like any other payment;
5. the change comes back as a ``cashuB`` token in ``X-Cashu-Change`` (also on an error
   after the swap); a failure after the spend refunds in ecash: the refund object carries
   a fresh token (``cashu_token``) instead of an LNURL-withdraw link.

A lost swap never burns a token. Its answer lost, proofs pending at the mint, or another
request swapping the same token: 503 ``CASHU_TOKEN_PENDING`` (retry with the same token),
never "nothing was charged". A retry, a refusal of the swap and the schedule all settle
it the same way (:meth:`Ecash.resolve`): the proofs' states at the mint (NUT-07); all
unspent -> released, and the next presentation swaps the SAME saved outputs again; all
spent -> the saved outputs restored (NUT-09): signed, the payment is recorded and serves
the token's call once; not signed, spent elsewhere (only then ``CASHU_TOKEN_SPENT``).

Held ecash is melted into the node's own Lightning balance on a schedule (NUT-05: an
invoice of the node's, the mint's melt pays it; NUT-08 blank outputs take back the
unused fee reserve).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from satsgate.config.cashu import CashuConfig, normalize_mint_url
from satsgate.errors import ApiError, ErrorCode
from satsgate.lightning.backend import LightningBackend
from satsgate.payments.cashu_melt import EcashMelter
from satsgate.payments.cashu_wire import (
    CashuFormatError,
    Mint,
    MintError,
    MintUnreachable,
    Proof,
    Token,
    blind,
    crypto_missing,
    decode_token,
    encode_payment_request,
    encode_token,
    split_amount,
    unblind,
    y_of,
)
from satsgate.services.base import ServiceResult, ServiceSpec, request_digest
from satsgate.store import Payment, PaymentStatus, Refund, RefundStatus
from satsgate.store.ecash import EcashRepository, HeldProof, Output, Receipt

log = logging.getLogger("satsgate.cashu")

CASHU_HEADER = "X-Cashu"  # NUT-24: the request in a 402, the token in a retry
CHANGE_HEADER = "X-Cashu-Change"  # the change token of an overpayment

AnySpec = ServiceSpec[Any]
T = TypeVar("T")


def check_installed() -> None:
    """At start-up with [cashu] configured: Nutshell's BDHKE must import."""
    missing = crypto_missing()
    if missing:
        raise RuntimeError(
            f"[cashu] is configured but {missing}. Install it with "
            "`pip install --no-deps cashu==0.20.2` (scripts/setup.sh does), or remove [cashu]."
        )


# -- the refund object ------------------------------------------------------------------------


def refund_object(refund: Refund, token: str, mint: str) -> dict[str, Any]:
    """A refund paid in ecash: the spec's refund fields, with the token in place of the
    LNURL-withdraw link (the payer's wallet receives it at ``mint``)."""
    amount_sats = refund.amount_msat // 1000
    return {
        "method": "cashu",
        "cashu_token": token,
        "mint": mint,
        "unit": "sat",
        "amount_sats": amount_sats,
        "refund_amount": amount_sats,  # deprecated alias of amount_sats, as for LNURL refunds
        "status": str(refund.status),
        "charge_id": refund.refund_id,
    }


def _refused(code: ErrorCode, message: str, **extra: Any) -> ApiError:
    return ApiError(code, f"{message} Nothing was charged.", extra=extra)


PENDING_RETRY_S = 5  # CASHU_TOKEN_PENDING's retry_after_seconds (satsgate/errors.py)


def _pending(message: str) -> ApiError:
    """503: the token's swap is not settled yet. Never "nothing was charged": the mint
    may hold our swap; a retry with the same token serves the call or frees the token."""
    return ApiError(
        ErrorCode.CASHU_TOKEN_PENDING,
        message,
        headers={"Retry-After": str(PENDING_RETRY_S)},
    )


def _attempt_id() -> str:
    """A swap attempt's id (the receipt's op_id while it is the one swapping)."""
    return f"swap_{secrets.token_hex(12)}"


Execute = Callable[[Payment], Awaitable[ServiceResult]]


@dataclass(frozen=True)
class _Redeemed:
    payment: Payment
    change_token: str | None


@dataclass(frozen=True)
class _Checked:
    """A token as the mint knows it, before the swap."""

    token: Token  # its proofs with full keyset ids
    fee: int  # the mint's input fee for them, sat
    ys: list[str]  # the proofs' Y points (hex): their ids at the mint and in the store
    keyset_id: str  # the active keyset the outputs are blinded for
    keys: Mapping[int, str]  # its public keys by amount


class Ecash:
    """Takes ecash for calls, refunds in ecash, and melts what it holds into the node."""

    def __init__(self, config: CashuConfig, repo: EcashRepository, node: LightningBackend) -> None:
        self.config = config
        self._repo = repo
        self._node = node
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.mint_timeout_s, connect=min(10.0, config.mint_timeout_s)),
            follow_redirects=False,
        )
        self._mints = {url: Mint(url, self._http) for url in config.mints}
        self._melter = EcashMelter(config, repo, node, self._mints)
        self.melt_all = self._melter.melt_all
        self._requests: dict[int, str] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    def payment_request(self, amount_sats: int) -> str:
        """The 402's ``X-Cashu`` value for a price (NUT-18, CBOR)."""
        found = self._requests.get(amount_sats)
        if found is None:
            found = encode_payment_request(amount_sats, self.config.unit, self.config.mints)
            if len(self._requests) < 4096:
                self._requests[amount_sats] = found
        return found

    # -- paying a call ------------------------------------------------------------------------

    async def pay(
        self,
        values: Sequence[str],
        spec: AnySpec,
        params: BaseModel,
        price: int,
        execute: Execute,
    ) -> ServiceResult:
        """Redeem the token in ``values`` (the request's X-Cashu headers) for one call of
        ``spec`` quoted at ``price`` sats and run it with ``execute`` (the spender's spend
        rule). Raises ApiError."""
        if len(values) != 1:
            raise _refused(ErrorCode.CASHU_TOKEN_INVALID, "Send exactly one X-Cashu token.")
        try:
            token = decode_token(values[0])
        except CashuFormatError as exc:
            raise _refused(
                ErrorCode.CASHU_TOKEN_INVALID, f"The X-Cashu token does not decode: {exc}."
            ) from None
        redeemed = await self._redeem(token, spec, params, price)
        change = redeemed.change_token
        try:
            result = await execute(redeemed.payment)
        except ApiError as exc:
            if change:
                exc.headers = {**exc.headers, CHANGE_HEADER: change}
            raise
        if change:
            result = replace(result, headers={**result.headers, CHANGE_HEADER: change})
        return result

    async def _redeem(
        self, token: Token, spec: AnySpec, params: BaseModel, price: int
    ) -> _Redeemed:
        """Check the token against this node and its mint, claim its proofs together with
        the outputs of the swap to come, and swap them; a token claimed before is taken
        up where that claim left it (:meth:`_claimed_before`)."""
        mint_url, mint = self._mint_of(token)
        checked = await self._checked(mint_url, mint, token, price)
        change = checked.token.amount - checked.fee - price
        parts = [(price, "keep"), (change, "change")]
        outputs = await _off_loop(_pieces(parts), self._outputs, checked.keyset_id, parts)
        receipt = Receipt(
            receipt_id=hashlib.sha256("".join(sorted(checked.ys)).encode()).hexdigest(),
            service=spec.slug,
            request_digest=request_digest(spec.slug, params),
            mint=mint_url,
            unit=self.config.unit,
            amount=checked.token.amount,
            fee=checked.fee,
            price=price,
            change=change,
            status="swapping",
            payment_id=None,
            change_token=None,
            error=None,
            op_id=_attempt_id(),
        )
        if not await self._repo.claim(receipt, checked.ys, outputs, int(time.time())):
            return await self._claimed_before(mint, checked, receipt, spec)
        return await self._swap(mint, checked.token, receipt, outputs, checked.keys)

    def _mint_of(self, token: Token) -> tuple[str, Mint]:
        """The token's mint, if this node accepts it and the token's unit."""
        mint_url = normalize_mint_url(token.mint)
        mint = self._mints.get(mint_url)
        if mint is None:
            raise _refused(
                ErrorCode.CASHU_MINT_NOT_ACCEPTED,
                f"Tokens of {mint_url[:200]} are not accepted here.",
                mints=list(self.config.mints),
            )
        unit = self.config.unit
        if token.unit != unit:
            raise _refused(
                ErrorCode.CASHU_UNIT_NOT_ACCEPTED,
                f"The token is in {token.unit[:20]!r}; this node takes {unit!r}.",
                unit=unit,
            )
        return mint_url, mint

    async def _checked(self, mint_url: str, mint: Mint, token: Token, price: int) -> _Checked:
        """What the mint says of the token before any swap: its keysets (ids made full,
        in this node's unit), its input fee (the rest must cover ``price``), no proof
        twice, and the keys of the keyset the outputs are blinded for."""
        unit = self.config.unit
        full_ids: dict[str, str] = {}
        try:
            for keyset_id in {p.keyset_id for p in token.proofs}:
                keyset = await mint.keyset(keyset_id)
                if keyset is None:
                    raise _refused(
                        ErrorCode.CASHU_TOKEN_INVALID,
                        f"The token names keyset {keyset_id[:80]}, which its mint does not have.",
                    )
                if keyset.unit != unit:
                    raise _refused(
                        ErrorCode.CASHU_UNIT_NOT_ACCEPTED,
                        f"The token's keyset {keyset_id} is in {keyset.unit!r}, not {unit!r}.",
                        unit=unit,
                    )
                full_ids[keyset_id] = keyset.keyset_id
            token = replace(
                token,
                proofs=tuple(replace(p, keyset_id=full_ids[p.keyset_id]) for p in token.proofs),
            )
            fee = await mint.input_fee([p.keyset_id for p in token.proofs])
            if token.amount - fee < price:
                raise _refused(
                    ErrorCode.CASHU_AMOUNT_TOO_SMALL,
                    f"This request costs {price} sat; the token is worth {token.amount} sat"
                    + (f", {token.amount - fee} sat after the mint's input fee" if fee else "")
                    + ".",
                    amountSats=price,
                    inputFeeSats=fee,
                )
            ys = await _off_loop(len(token.proofs), _ys_of, token.proofs)
            if len(set(ys)) != len(ys):
                raise _refused(
                    ErrorCode.CASHU_TOKEN_INVALID, "The token holds the same proof twice."
                )
            active = await mint.active_keyset(unit)
            keys = await mint.keys(active.keyset_id)
        except MintUnreachable as exc:
            log.warning("mint %s unreachable before a swap: %s", mint_url, exc)
            raise _refused(
                ErrorCode.CASHU_MINT_UNAVAILABLE, "The token's mint did not answer; retry later."
            ) from None
        except MintError as exc:
            raise _refused(
                ErrorCode.CASHU_TOKEN_INVALID, f"The mint refused: {exc.detail}."
            ) from None
        return _Checked(token, fee, ys, active.keyset_id, keys)

    async def _claimed_before(
        self, mint: Mint, checked: _Checked, receipt: Receipt, spec: AnySpec
    ) -> _Redeemed:
        """A token whose proofs were claimed before: that claim's outcome, or, when the
        mint proved them unspent, the same claim swapped again with its SAME saved
        outputs, so whichever attempt the mint signs, restore finds it."""
        taken = await self._presented_before(checked.ys, receipt, spec)
        if isinstance(taken, _Redeemed):
            return taken
        outputs = await self._repo.outputs(taken.receipt_id)
        try:
            keys = await mint.keys(outputs[0].keyset_id)
        except (MintUnreachable, MintError) as exc:
            log.warning("mint %s unreachable before a swap: %s", mint.url, exc)
            await self._repo.settle_attempt(taken, "released", str(exc), int(time.time()))
            raise _refused(
                ErrorCode.CASHU_MINT_UNAVAILABLE,
                "The token's mint did not answer; retry later.",
            ) from None
        return await self._swap(mint, checked.token, taken, outputs, keys)

    def _outputs(self, keyset_id: str, parts: Sequence[tuple[int, str]]) -> list[Output]:
        outputs: list[Output] = []
        for amount, role in parts:
            for piece in split_amount(amount):
                outputs.append(blind(piece, keyset_id, role, len(outputs)))
        return outputs

    async def _swap(
        self,
        mint: Mint,
        token: Token,
        receipt: Receipt,
        outputs: Sequence[Output],
        keys: Mapping[int, str],
    ) -> _Redeemed:
        """Swap the token's proofs for the receipt's saved outputs (NUT-03) and record the
        payment. A refusal is never taken at its word: the proofs' states decide
        (:meth:`resolve`), so a spent answer to a swap of our own is restored, not lost."""
        try:
            signatures = await mint.swap([p.wire() for p in token.proofs], outputs)
        except MintUnreachable as exc:
            log.warning("mint %s: the swap's answer was lost: %s", mint.url, exc)
            await self._repo.settle_attempt(receipt, "unknown", str(exc), int(time.time()))
            raise _pending(
                "The mint did not answer the swap. Retry with the same token: satsgate asks "
                "the mint whether it took the token, and serves the call or swaps it again."
            ) from None
        except MintError as exc:
            return await self._after_refusal(receipt, exc)
        if len(signatures) != len(outputs):  # the outputs are saved: restore settles it
            log.warning("mint %s answered a swap with %d signatures", mint.url, len(signatures))
            await self._repo.settle_attempt(
                receipt,
                "unknown",
                "a swap answer with the wrong number of signatures",
                int(time.time()),
            )
            raise _pending(
                "The mint's answer to the swap was incomplete; retry with the same token."
            )
        try:
            return await self._record(receipt, outputs, signatures, keys, mint.url)
        except (KeyError, ValueError, TypeError) as exc:  # signatures that do not unblind
            log.error("mint %s: a swap's signatures could not be read: %r", mint.url, exc)
            await self._repo.settle_attempt(receipt, "unknown", repr(exc)[:300], int(time.time()))
            raise _pending(
                "The mint's answer to the swap could not be read; its outputs are kept for "
                "recovery. Retry with the same token."
            ) from None

    async def _after_refusal(self, receipt: Receipt, refusal: MintError) -> _Redeemed:
        """The mint refused the swap. Unspent proofs: nothing moved (the token is freed, it
        may be presented again). Spent: by this node's own earlier attempt when the saved
        outputs are signed (restored: the call is served), else by someone else."""
        outcome = await self.resolve(receipt, refusal.detail)
        if outcome == "redeemed":
            return await self._redeemed_of(receipt.receipt_id)
        if outcome == "released" and refusal.pending:
            raise _pending(
                "The mint holds this token's proofs pending in another operation; retry with "
                "the same token."
            )
        if outcome == "released":
            # Refused as invalid with its proofs unspent: no swap of these outputs can be
            # signed, so nothing of the token needs keeping.
            await self._repo.forget(receipt)
            raise _refused(
                ErrorCode.CASHU_TOKEN_INVALID, f"The mint refused the token: {refusal.detail}."
            )
        if outcome == "rejected":
            raise _refused(
                ErrorCode.CASHU_TOKEN_SPENT,
                "The mint says this token was already spent, and not by this node.",
            )
        if outcome in ("pending", "unreachable"):
            await self._repo.settle_attempt(receipt, "unknown", refusal.detail, int(time.time()))
        raise _pending(
            f"The mint refused the swap ({refusal.detail[:200]}) and the token's proofs are "
            "not settled at the mint yet."
        )

    async def _record(
        self,
        receipt: Receipt,
        outputs: Sequence[Output],
        signatures: Sequence[Mapping[str, Any]],
        keys: Mapping[int, str],
        mint_url: str,
    ) -> _Redeemed:
        """Unblind the mint's signatures on the receipt's outputs and record the kept
        proofs, the change and the call's payment (one transaction)."""
        proofs = await _off_loop(len(outputs), _unblind_all, outputs, signatures, keys, mint_url)
        kept = [p for o, p in zip(outputs, proofs, strict=True) if o.role == "keep"]
        change = [p for o, p in zip(outputs, proofs, strict=True) if o.role != "keep"]
        change_token = encode_token(mint_url, receipt.unit, change) if change else None
        now = int(time.time())
        payment = Payment(
            payment_id=f"pay_{secrets.token_hex(16)}",
            payment_hash=receipt.receipt_id,
            bolt11="",
            service=receipt.service,
            amount_msat=receipt.price * 1000,
            status=PaymentStatus.PAID,
            created_at=now,
            expires_at=now,
            paid_at=now,
            spent_at=None,
            root_key="",
            token_id="",
            request_digest=receipt.request_digest,
            description=f"satsgate: {receipt.service} ({receipt.price} sat in ecash)",
            via="http",
            mode="cashu",
        )
        if not await self._repo.redeemed(
            receipt.receipt_id, kept, change, change_token, payment, now
        ):
            # Settled at the same moment by another request (or the schedule): its payment.
            return await self._redeemed_of(receipt.receipt_id)
        return _Redeemed(payment, change_token)

    async def _redeemed_of(self, receipt_id: str) -> _Redeemed:
        """The payment a redeemed receipt recorded, with its change."""
        earlier = await self._repo.get_receipt(receipt_id)
        found = None
        if earlier is not None and earlier.payment_id is not None:
            found = await self._repo.payment(earlier.payment_id)
        if earlier is None or found is None:  # not redeemed after all: ask again later
            raise _pending("This token's swap is being recorded; retry with the same token.")
        return _Redeemed(found, earlier.change_token)

    async def _presented_before(
        self, ys: Sequence[str], receipt: Receipt, spec: AnySpec
    ) -> _Redeemed | Receipt:
        """A token whose proofs were presented before. Its earlier swap's outcome unknown:
        the mint is asked first. Redeemed and its payment never used (the swap's answer
        had been lost): that payment serves this call. Released (the mint proved it
        unspent): claimed again by this request (the receipt returned: swap it). Being
        swapped by another request, or not settled at the mint: 503, retry. Otherwise it
        is spent: 400, with the refund of the call it paid for, if it had one."""
        earlier = await self._repo.receipt_of_inputs(ys)
        if earlier is not None and self._unsettled(earlier):
            outcome = await self.resolve(earlier)
            if outcome in ("pending", "unreachable"):
                raise _pending("This token's earlier swap is not settled with its mint yet.")
            earlier = await self._repo.get_receipt(earlier.receipt_id)
        if earlier is None or earlier.status == "swapping" or self._unsettled(earlier):
            raise _pending("Another request is redeeming this token at this moment.")
        if earlier.status == "released":
            if earlier.receipt_id != receipt.receipt_id:
                raise _refused(
                    ErrorCode.CASHU_TOKEN_INVALID,
                    "Some of this token's proofs were presented before in another token, "
                    "which its mint never took: present that token as it was, or swap the "
                    "proofs in your wallet first.",
                )
            again = await self._repo.reclaim(
                receipt.receipt_id,
                receipt.op_id,
                receipt.service,
                receipt.request_digest,
                int(time.time()),
            )
            if again is None:
                raise _pending("Another request is redeeming this token at this moment.")
            return again
        if earlier.status == "rejected":
            raise _refused(
                ErrorCode.CASHU_TOKEN_SPENT,
                "The mint says this token was already spent, and not by this node.",
            )
        if earlier.payment_id is not None:
            payment = await self._repo.payment(earlier.payment_id)
            if payment is not None and payment.status is PaymentStatus.PAID:
                if payment.service == spec.slug:
                    return _Redeemed(payment, earlier.change_token)
                raise ApiError(
                    ErrorCode.CASHU_TOKEN_SPENT,
                    f"This token paid for a call of {payment.service} that has not run yet: "
                    f"send it again with that {payment.service} request to use it. Nothing "
                    "was charged for this request.",
                )
            found = await self._repo.refund_of_payment(earlier.payment_id)
            if found is not None:
                raise ApiError(
                    ErrorCode.CASHU_TOKEN_SPENT,
                    "This token was presented before and paid for one call, which failed: "
                    "its refund is attached. Nothing was charged for this request.",
                    refund=refund_object(*found),
                )
        raise ApiError(
            ErrorCode.CASHU_TOKEN_SPENT,
            "This token was presented before: it paid for one call. Nothing was charged for "
            "this request.",
        )

    def _unsettled(self, receipt: Receipt) -> bool:
        """Whether a receipt's swap outcome is unknown and no request waits on it: its
        answer was lost ('unknown'), or a crash (its instance is gone) or a timeout left
        it 'swapping'."""
        if receipt.status == "unknown":
            return True
        return receipt.status == "swapping" and (
            receipt.sender_gone or receipt.updated_at < self._in_flight_since()
        )

    def _in_flight_since(self) -> int:
        """A swap last changed before this is no longer in flight: its request has given
        up long since."""
        return int(time.time()) - 2 * int(self.config.mint_timeout_s) - 30

    async def resolve(self, receipt: Receipt, refusal: str | None = None) -> str:
        """Settle a receipt's swap attempt by asking the mint (NUT-07 states of its
        inputs): all unspent -> 'released' (nothing moved: the token may be presented
        again, its saved outputs swapped again); all spent and the saved outputs signed
        (NUT-09 restore) -> 'redeemed' (the payment recorded, paid and unused); spent
        without our outputs signed -> 'rejected'; pending at the mint -> 'pending'; the
        mint not answering -> 'unreachable'; the receipt taken over by another request
        meanwhile -> 'moved' (read it again). ``refusal``: the mint's refusal of the
        attempt, kept as the receipt's error."""
        mint = self._mints.get(receipt.mint)
        ys = await self._repo.inputs_of(receipt.receipt_id)
        if mint is None or not ys:
            return "unreachable"  # its mint is no longer configured: left as it is
        try:
            states = await mint.check_state(ys)
            found = {states.get(y) for y in ys}
            now = int(time.time())
            if found == {"UNSPENT"}:
                released = await self._repo.settle_attempt(receipt, "released", refusal, now)
                return "released" if released else "moved"
            if not found <= {"UNSPENT", "SPENT"}:
                return "pending"  # PENDING at the mint (a swap of its proofs under way)
            if "UNSPENT" in found:  # partly spent: a swap of ours spends all of them
                rejected = await self._repo.settle_attempt(
                    receipt, "rejected", "partly spent elsewhere", now
                )
                return "rejected" if rejected else "moved"
            outputs = await self._repo.outputs(receipt.receipt_id)
            restored = await mint.restore(outputs) if outputs else {}
            signed = [o for o in outputs if o.b_ in restored]
            if not signed:
                rejected = await self._repo.settle_attempt(
                    receipt, "rejected", "spent, not by this node's swap", now
                )
                return "rejected" if rejected else "moved"
            if len(signed) != len(outputs):
                log.error(
                    "ecash receipt %s: the mint restored part of its outputs", receipt.receipt_id
                )
                return "pending"
            keys = await mint.keys(outputs[0].keyset_id)
        except MintUnreachable:
            return "unreachable"
        except MintError as exc:
            log.warning("resolving ecash receipt %s: %s", receipt.receipt_id, exc)
            return "unreachable"
        current = await self._repo.get_receipt(receipt.receipt_id)
        await self._record(
            current or receipt, outputs, [restored[o.b_] for o in outputs], keys, mint.url
        )
        log.info("ecash receipt %s restored after a lost swap answer", receipt.receipt_id)
        return "redeemed"

    # -- refunds ------------------------------------------------------------------------------

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        """Refund part or all of a spent ecash payment as a fresh token (never more in total
        than was paid). None when there is nothing to refund in ecash (the caller then
        refunds through LNURL-withdraw, e.g. when the mint is down). Ecash is whole sats:
        a part of a sat owed is rounded up, in the payer's favor (the payment itself was
        whole sats, so the total still fits under it)."""
        sats = -(-amount_msat // 1000)
        if sats <= 0:
            return None
        held = await self._repo.payment_proofs(payment.payment_id)
        if sum(p.amount for p in held) < sats:
            return None  # more than is left of it in ecash (refunded, or melted already)
        mint_url = held[0].mint
        mint = self._mints.get(mint_url)
        exact = _exact_subset(held, sats)
        now = int(time.time())
        refund_id = f"rf_{secrets.token_hex(12)}"
        fee = 0
        kept_back: list[HeldProof] = []
        if exact is not None:
            given = exact
        elif mint is None:
            return None
        else:
            try:
                given, kept_back, fee = await self._swap_for_refund(mint, held, sats, refund_id)
            except (MintError, MintUnreachable) as exc:
                log.warning("ecash refund of %s: the swap failed: %s", payment.payment_id, exc)
                return None
            sats = sum(p.amount for p in given)
            if sats <= 0:
                return None
        token = encode_token(mint_url, self.config.unit, given)
        refund = Refund(
            refund_id=refund_id,
            payment_id=payment.payment_id,
            amount_msat=sats * 1000,
            k1=secrets.token_hex(32),  # never a link: the token is handed over at once
            status=RefundStatus.PAID,
            reason=f"ecash: {reason}"[:500],
            created_at=now,
            expires_at=now,
            payout_bolt11=None,
            payout_hash=None,
            updated_at=now,
        )
        if not await self._repo.add_refund(refund, mint_url, token, fee, given, kept_back, now):
            return None
        return refund_object(refund, token, mint_url)

    async def _swap_for_refund(
        self, mint: Mint, held: Sequence[HeldProof], sats: int, op_id: str
    ) -> tuple[list[HeldProof], list[HeldProof], int]:
        """Split the payment's held proofs at the mint into the refund and the rest; the
        mint's input fee comes out of the part kept (or of the refund when nothing is)."""
        fee = await mint.input_fee([p.keyset_id for p in held])
        total = sum(p.amount for p in held)
        refund = min(sats, total - fee)
        active = await mint.active_keyset(self.config.unit)
        keys = await mint.keys(active.keyset_id)
        parts = [(refund, "refund"), (total - fee - refund, "keep")]
        outputs = await _off_loop(_pieces(parts), self._outputs, active.keyset_id, parts)
        if not await self._repo.swap_for_refund(op_id, [p.y for p in held], outputs):
            raise MintError(409, None, "the payment's proofs are in use")
        inputs = [Proof(p.keyset_id, p.amount, p.secret, p.c).wire() for p in held]
        try:
            signatures = await mint.swap(inputs, outputs)
        except MintError:
            await self._repo.unswap(op_id)  # refused: nothing moved
            raise
        # (MintUnreachable: the inputs stay 'swapped' until the schedule asks the mint.)
        proofs = await _off_loop(len(outputs), _unblind_all, outputs, signatures, keys, mint.url)
        given = [p for o, p in zip(outputs, proofs, strict=True) if o.role == "refund"]
        kept = [p for o, p in zip(outputs, proofs, strict=True) if o.role != "refund"]
        return given, kept, fee

    # -- the schedule: lost answers, melts ------------------------------------------------------

    async def maintain(self) -> None:
        """The scheduled job: settle swaps and melts whose answers were lost, then melt
        what each mint holds into the node (when ``melt`` is on)."""
        try:
            await self.recover()
            if self.config.melt:
                await self._melter.melt_all()
        except Exception:  # a scheduled job: log, and try again next time
            log.exception("ecash maintenance failed")

    async def recover(self) -> None:
        now = int(time.time())
        # A swap still 'swapping' whose instance is gone, or this long after its last
        # change, is not in flight: a crash (or a timeout) left it.
        for receipt in await self._repo.unresolved(self._in_flight_since()):
            outcome = await self.resolve(receipt)
            log.info("ecash receipt %s: %s", receipt.receipt_id, outcome)
        for op_id, payment_id in await self._repo.stale_swaps(
            now - 2 * int(self.config.mint_timeout_s) - 30
        ):
            await self._settle_swap(op_id, payment_id)
        await self._melter.recover()

    async def _settle_swap(self, op_id: str, payment_id: str | None) -> None:
        """A refund's swap whose answer was lost: its inputs unspent at the mint -> held
        again; spent -> its saved outputs restored (NUT-09) and held. The refund itself
        went out another way (LNURL-withdraw) when the swap failed."""
        outputs = await self._repo.outputs(op_id)
        ys = await self._repo.swapped_inputs(op_id)
        proofs = await self._repo.payment_proofs(payment_id or "", "swapped")
        mint = self._mints.get(proofs[0].mint) if proofs else None
        if mint is None or not ys or not outputs:
            return
        try:
            states = await mint.check_state(ys)
            if all(states.get(y) == "UNSPENT" for y in ys):
                await self._repo.unswap(op_id)
                return
            if any(states.get(y) != "SPENT" for y in ys):
                return
            restored = await mint.restore(outputs)
            keys = await mint.keys(outputs[0].keyset_id)
        except (MintError, MintUnreachable) as exc:
            log.warning("refund swap %s: still unsettled: %s", op_id, exc)
            return
        made = [
            unblind(o, str(restored[o.b_]["C_"]), o.amount, keys[o.amount], mint.url)
            for o in outputs
            if o.b_ in restored
        ]
        await self._repo.swap_restored(op_id, payment_id, made, int(time.time()))
        log.info("refund swap %s restored: %d sat held again", op_id, sum(p.amount for p in made))

    async def figures(self) -> dict[str, int]:
        return await self._repo.figures()


# Elliptic-curve work per proof (hash_to_curve, blinding, unblinding) runs on a thread
# when there is more than this much of it:
# coincurve's C calls release the GIL, so the event loop keeps serving meanwhile.
_INLINE_POINTS = 2


async def _off_loop(count: int, fn: Callable[..., T], *args: Any) -> T:
    if count <= _INLINE_POINTS:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def _unblind_all(
    outputs: Sequence[Output],
    signatures: Sequence[Mapping[str, Any]],
    keys: Mapping[int, str],
    mint_url: str,
) -> list[HeldProof]:
    """The proofs of ``outputs`` from the mint's signatures on them, in order."""
    proofs = []
    for output, sig in zip(outputs, signatures, strict=True):
        amount = int(sig.get("amount", output.amount))
        proofs.append(unblind(output, str(sig["C_"]), amount, keys[amount], mint_url))
    return proofs


def _ys_of(proofs: Sequence[Proof]) -> list[str]:
    return [y_of(p.secret) for p in proofs]


def _pieces(parts: Sequence[tuple[int, str]]) -> int:
    """How many outputs these amounts split into."""
    return sum(amount.bit_count() for amount, _ in parts)


def _exact_subset(proofs: Sequence[HeldProof], sats: int) -> list[HeldProof] | None:
    """Proofs summing to exactly ``sats``, largest first (powers of two: greedy finds one
    whenever one exists among distinct denominations), or None."""
    chosen: list[HeldProof] = []
    left = sats
    for proof in sorted(proofs, key=lambda p: -p.amount):
        if proof.amount <= left:
            chosen.append(proof)
            left -= proof.amount
    return chosen if left == 0 else None
