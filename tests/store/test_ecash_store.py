"""The ecash receipts' settlements in the store (issue 28, hole 3): each is one conditional
write on the receipt, its swap attempt (op_id) and its state, so a slow request can
never undo a newer retry's claim, outputs are never deleted, and a swap's proofs are
never dropped. The end-to-end races are in tests/payments/test_cashu_lost_swap.py."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from satsgate.store import Payment, PaymentStatus, Store
from satsgate.store.ecash import HeldProof, Output, Receipt


def a_receipt(op_id: str) -> Receipt:
    return Receipt(
        receipt_id=secrets.token_hex(32), service="vote", request_digest="d",
        mint="http://mint", unit="sat", amount=5, fee=0, price=4, change=1,
        status="swapping", payment_id=None, change_token=None, error=None, op_id=op_id,
    )  # fmt: skip


def outputs_of(amounts: list[int]) -> list[Output]:
    return [
        Output(secrets.token_hex(33), "00aa", amount, secrets.token_hex(32), "11", role, i)
        for i, (amount, role) in enumerate(zip(amounts, ["keep", "change"], strict=False))
    ]


def proof(amount: int) -> HeldProof:
    return HeldProof(secrets.token_hex(33), "http://mint", "00aa", amount, "s", "c")


def payment_of(receipt: Receipt) -> Payment:
    now = int(time.time())
    return Payment(
        f"pay_{secrets.token_hex(16)}", receipt.receipt_id, "", "vote", 4000,
        PaymentStatus.PAID, now, now, now, None, "", "", "d", "x", "http", "cashu",
    )  # fmt: skip


async def test_a_stale_settlement_never_undoes_a_newer_claim(store: Store) -> None:
    repo, now = store.ecash, int(time.time())
    first = a_receipt("swap_a")
    saved = outputs_of([4, 1])
    assert await repo.claim(first, ["y1", "y2"], saved, now)
    assert await repo.settle_attempt(first, "unknown", "lost", now)
    # Two retries both saw the proofs unspent: one releases, then claims it again.
    assert await repo.settle_attempt(first, "released", None, now)
    again = await repo.reclaim(first.receipt_id, "swap_b", "vote", "d2", now)
    assert again is not None and (again.status, again.op_id) == ("swapping", "swap_b")
    assert await repo.reclaim(first.receipt_id, "swap_c", "vote", "d3", now) is None
    # The other retry's release (and any other settlement of the old attempt) is stale.
    for status in ("released", "rejected", "unknown"):
        assert not await repo.settle_attempt(first, status, None, now)
    current = await repo.get_receipt(first.receipt_id)
    assert current is not None and (current.status, current.op_id) == ("swapping", "swap_b")
    assert await repo.outputs(first.receipt_id) == saved  # the same outputs, never deleted
    assert sorted(await repo.inputs_of(first.receipt_id)) == ["y1", "y2"]


async def test_redeemed_is_final_and_keeps_every_swap_proof(store: Store) -> None:
    repo, now = store.ecash, int(time.time())
    receipt = a_receipt("swap_a")
    assert await repo.claim(receipt, ["y3"], outputs_of([4, 1]), now)
    # A refusal read as "spent elsewhere" was wrong: the mint's signatures are the truth.
    assert await repo.settle_attempt(receipt, "rejected", "spent", now)
    kept, change = [proof(4)], [proof(1)]
    payment = payment_of(receipt)
    assert await repo.redeemed(receipt.receipt_id, kept, change, "cashuB...", payment, now)
    # A second settlement of the same swap (a restore at the same moment) records nothing
    # twice; a proof it holds that is not stored yet is kept, under the receipt's payment.
    late = [proof(4)]
    other = payment_of(receipt)  # another payment id
    assert not await repo.redeemed(receipt.receipt_id, [*kept, *late], change, None, other, now)
    assert await repo.payment(other.payment_id) is None
    held = await repo.payment_proofs(payment.payment_id)
    assert sorted(p.y for p in held) == sorted(p.y for p in [*kept, *late])
    assert [p.y for p in await repo.payment_proofs(payment.payment_id, "change")] == [change[0].y]
    settled = await repo.get_receipt(receipt.receipt_id)
    assert settled is not None and settled.status == "redeemed"
    assert not await repo.settle_attempt(settled, "released", None, now)


async def test_a_swap_a_live_instance_waits_on_is_settled_by_another_only_once_it_is_gone(
    tmp_path: Path, store_url: str
) -> None:
    """Two instances on one store: the swap A sent and still waits on is not a crash's
    leftover for B (B would ask the mint while A's request is under way); once A is
    gone it is, at once; and after its request's time it is either way."""
    a = Store(tmp_path / "satsgate.db", store_url, instance_id="inst_a")
    b = Store(tmp_path / "satsgate.db", store_url, instance_id="inst_b")
    await a.open()
    await b.open()
    try:
        now = int(time.time())
        for store in (a, b):
            await store.instances.register(store.instance_id, "host", (1, ""), "tag", now)
        receipt = a_receipt("swap_a")
        assert await a.ecash.claim(receipt, ["y9"], outputs_of([4, 1]), now)
        long_ago = now - 600  # what B's sweep takes for "its request gave up"
        assert await b.ecash.unresolved(long_ago) == []
        seen = await b.ecash.get_receipt(receipt.receipt_id)
        assert seen is not None and not seen.sender_gone
        assert [r.receipt_id for r in await b.ecash.unresolved(now + 1)] == [receipt.receipt_id]
        assert await b.instances.expire(now + 1, now, but=b.instance_id) == ["inst_a"]
        (left,) = await b.ecash.unresolved(long_ago)
        assert left.receipt_id == receipt.receipt_id and left.sender_gone
        # A retry's swap claimed by B is B's: not a leftover while B lives.
        assert await b.ecash.settle_attempt(left, "released", None, now)
        assert await b.ecash.reclaim(receipt.receipt_id, "swap_b", "vote", "d", now)
        assert await b.ecash.unresolved(long_ago) == []
    finally:
        await b.close()
        await a.close()
