"""Pruning unpaid payments never holds the write lock for long: small transactions, with
the loop's writes (a spend) and the settlements getting their turn between them."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from satsgate.store import Payment, PaymentStatus, Store
from satsgate.store.payments import PRUNE_BATCH
from satsgate.store.sql import Connection

EXPIRED = 20_000


def stored_payment(status: PaymentStatus, expires_at: int, mode: str = "invoice") -> Payment:
    """A render-card payment row as the store keeps it, made now, in ``status``."""
    now = int(time.time())
    return Payment(
        f"pay_{secrets.token_hex(16)}",
        secrets.token_hex(32),
        "lnbcrt1test",
        "render-card",
        5000,
        status,
        now,
        expires_at,
        None,
        None,
        "00" * 32,
        "11" * 32,
        "d" * 64,
        "t",
        "http",
        mode,
    )


async def test_prune_deletes_in_small_transactions_and_lets_a_spend_through(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "satsgate.db")
    await store.open()
    try:
        now = int(time.time())
        flood = [stored_payment(PaymentStatus.UNPAID, now - 100) for _ in range(EXPIRED)]

        def bulk(conn: Connection) -> None:
            conn.execute("BEGIN")
            conn.executemany(
                f"INSERT INTO payments ({', '.join(Payment._fields)})"
                f" VALUES ({', '.join('?' * len(Payment._fields))})",
                [(*p[:5], str(p.status), *p[6:]) for p in flood],
            )
            conn.execute("COMMIT")

        await store.db.run_sync(bulk)
        paid = stored_payment(PaymentStatus.PAID, now - 100)  # expired invoice, but paid: kept
        recent = stored_payment(PaymentStatus.UNPAID, now + 600)  # still payable: kept
        for p in (paid, recent):
            await store.payments.insert(p)

        order: list[str] = []

        async def prune() -> int:
            pruned = await store.payments.prune_unpaid(now, batch=500)
            order.append("prune")
            return pruned

        async def spend() -> bool:
            await asyncio.sleep(0.005)  # once the prune has begun
            spent = await store.payments.spend(paid.payment_id, now)
            order.append("spend")
            return spent

        pruned, spent = await asyncio.gather(prune(), spend())
        assert pruned == EXPIRED and spent
        assert order == ["spend", "prune"], "the spend waited for the whole prune"
        assert await store.payments.get(recent.payment_id) == recent
        assert await store.payments.prune_unpaid(now) == 0
        counts = await store.db.run_sync(
            lambda c: c.execute("SELECT status, COUNT(*) FROM payments GROUP BY status").fetchall()
        )
        assert dict(counts) == {"serving": 1, "unpaid": 1}
        assert PRUNE_BATCH <= 5000  # milliseconds per transaction at the default
    finally:
        await store.close()
