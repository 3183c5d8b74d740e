"""Melting held ecash into the node (NUT-05): each mint's proofs paid to an invoice of
the node's own, fees bounded, the change kept; a melt whose answer was lost is settled
from the mint's quote state. Every move is recorded before the mint is asked
(``EcashRepository.begin_melt``), so a crash leaves nothing unaccounted.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from typing import Any

from satsgate.config.cashu import CashuConfig
from satsgate.lightning.backend import BackendError, InvoiceState, LightningBackend
from satsgate.payments.cashu_wire import (
    Mint,
    MintError,
    MintUnreachable,
    Proof,
    blank_outputs_count,
    blind,
    quote_state,
    unblind,
)
from satsgate.store.ecash import EcashRepository, HeldProof, Melt

log = logging.getLogger("satsgate.cashu")


class EcashMelter:
    """Melts what each trusted mint holds for this node into the node."""

    def __init__(
        self,
        config: CashuConfig,
        repo: EcashRepository,
        node: LightningBackend,
        mints: Mapping[str, Mint],
    ) -> None:
        self.config = config
        self._repo = repo
        self._node = node
        self._mints = mints

    async def recover(self) -> None:
        """Settle melts whose answer was lost, and look whether the node's invoice of each
        paid melt shows settled."""
        for melt in await self._repo.melts("pending", "unknown"):
            mint = self._mints.get(melt.mint)
            if mint is None:
                continue
            try:
                await self._finish_melt(melt, await mint.melt_quote_state(melt.quote), mint)
            except (MintError, MintUnreachable) as exc:
                log.warning("melt %s: its state is still unknown: %s", melt.melt_id, exc)
        for melt in await self._repo.melts("paid"):
            if not melt.node_settled:
                await self._check_node(melt)

    async def melt_all(self) -> list[str]:
        """Melt each mint's held ecash into the node; the ids of the melts paid."""
        done: list[str] = []
        for mint in self._mints.values():
            try:
                melt_id = await self._melt(mint)
            except (MintError, MintUnreachable, BackendError, OSError) as exc:
                log.warning("melting ecash at %s failed: %s", mint.url, exc)
                continue
            if melt_id is not None:
                done.append(melt_id)
        return done

    async def _melt(self, mint: Mint) -> str | None:
        proofs = await self._repo.meltable(mint.url)
        total = sum(p.amount for p in proofs)
        if total < self.config.melt_min_sat:
            return None
        input_fee = await mint.input_fee([p.keyset_id for p in proofs])
        amount = total - input_fee
        quote: dict[str, Any] = {}
        bolt11 = payment_hash = ""
        reserve = 0
        for _ in range(3):  # NUT-05: amount + fee_reserve (+ input fees) must be covered
            if amount <= 0:
                return None
            invoice = await self._node.create_invoice(
                amount * 1000, "satsgate: ecash melted into this node", 600
            )
            bolt11, payment_hash = invoice.bolt11, invoice.payment_hash
            quote = await mint.melt_quote(bolt11, self.config.unit)
            reserve = int(quote.get("fee_reserve") or 0)
            if amount + reserve + input_fee <= total:
                break
            amount = total - input_fee - reserve
        else:
            return None
        if (reserve + input_fee) * 100 > amount * self.config.melt_max_fee_pct:
            log.info(
                "melt at %s skipped: fees of %d sat on %d sat exceed %.1f%%",
                mint.url,
                reserve + input_fee,
                amount,
                self.config.melt_max_fee_pct,
            )
            return None
        active = await mint.active_keyset(self.config.unit)
        blanks = [
            blind(1, active.keyset_id, "melt_change", i)
            for i in range(blank_outputs_count(reserve))
        ]
        now = int(time.time())
        melt = Melt(
            melt_id=f"melt_{secrets.token_hex(12)}",
            mint=mint.url,
            quote=str(quote["quote"]),
            bolt11=bolt11,
            payment_hash=payment_hash,
            amount=amount,
            fee_reserve=reserve,
            inputs=total,
            input_fee=input_fee,
            change=None,
            state="pending",
            node_settled=False,
        )
        if not await self._repo.begin_melt(melt, [p.y for p in proofs], blanks, now):
            return None
        inputs = [Proof(p.keyset_id, p.amount, p.secret, p.c).wire() for p in proofs]
        try:
            answer = await mint.melt(melt.quote, inputs, blanks)
        except MintError as exc:
            await self._repo.melt_failed(melt.melt_id, exc.detail, int(time.time()))
            log.warning("melt at %s refused: %s", mint.url, exc.detail)
            return None
        except MintUnreachable as exc:
            await self._repo.set_melt(melt.melt_id, int(time.time()), state="unknown")
            log.warning("melt at %s: the answer was lost (%s); asked again later", mint.url, exc)
            return None
        return melt.melt_id if await self._finish_melt(melt, answer, mint) else None

    async def _finish_melt(self, melt: Melt, answer: Mapping[str, Any], mint: Mint) -> bool:
        """Record a melt's outcome from the mint's answer (or its quote's state): True when
        it was paid."""
        state = quote_state(answer)
        now = int(time.time())
        if state == "PAID":
            signatures = list(answer.get("change") or [])
            outputs = await self._repo.outputs(melt.melt_id)
            change: list[HeldProof] = []
            if signatures and outputs:
                keys = await mint.keys(outputs[0].keyset_id)
                for output, sig in zip(outputs, signatures, strict=False):
                    amount = int(sig["amount"])
                    change.append(unblind(output, str(sig["C_"]), amount, keys[amount], mint.url))
            await self._repo.melt_paid(melt.melt_id, mint.url, change, now)
            log.info(
                "melted %d sat of ecash at %s into the node (%d sat back from the fee reserve)",
                melt.amount,
                mint.url,
                sum(p.amount for p in change),
            )
            await self._check_node(melt)
            return True
        if state == "UNPAID":
            await self._repo.melt_failed(melt.melt_id, "the mint did not pay", now)
        else:
            await self._repo.set_melt(melt.melt_id, now, state="unknown")
        return False

    async def _check_node(self, melt: Melt) -> None:
        """Whether the node's own invoice of a paid melt shows settled."""
        try:
            status = await self._node.lookup_invoice(melt.payment_hash)
        except (BackendError, OSError):
            return
        if status.state is InvoiceState.SETTLED:
            await self._repo.set_melt(melt.melt_id, int(time.time()), node_settled=True)
