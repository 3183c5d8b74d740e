"""Pre-create paid credentials in bulk, directly in the store (for the paid scenarios).

Each row is what the gate would hold after a real invoice was paid: a real
macaroon minted by ``l402.mint`` (per-token root key and id), a random preimage
whose sha256 is the payment hash, status ``paid``. Only the BOLT11 string is a
placeholder (never decoded on the paid path); creating and signing real
invoices costs ~1-5 ms each, which would dominate seeding. The 402 scenario
uses the real dev-node invoice path instead.

Writes one ``<macaroon_b64>:<preimage_hex>`` line per credential.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import secrets
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from satsgate.config.settings import Settings, ensure_server_secret
from satsgate.payments import l402
from satsgate.services.base import request_digest
from satsgate.store import Payment, PaymentStatus, Store
from satsgate.store.sql import Connection

_COLUMNS = Payment._fields


@dataclasses.dataclass(frozen=True)
class SeedSpec:
    slug: str
    title: str
    amount_msat: int
    digest: str


def spec_for(slug: str, title: str, amount_msat: int, params: BaseModel) -> SeedSpec:
    return SeedSpec(slug, title, amount_msat, request_digest(slug, params))


def _make_rows(
    spec: SeedSpec, count: int, credential_ttl_s: int, server_secret: str
) -> list[tuple[Any, ...]]:
    root_keys = l402.RootKeys(server_secret)  # as the gate derives them
    now = int(time.time())
    expires_at = now + 3600
    description = f"satsgate: {spec.title} ({spec.amount_msat // 1000} sat)"
    rows = []
    for _ in range(count):
        preimage = secrets.token_bytes(32)
        payment_hash = hashlib.sha256(preimage).hexdigest()
        token_id = secrets.token_bytes(32)
        root_key = root_keys.for_token(token_id)
        token = l402.mint(
            payment_hash, spec.slug, expires_at + credential_ttl_s, root_key, token_id
        )
        payment = Payment(
            payment_id=f"pay_{secrets.token_hex(16)}",
            payment_hash=payment_hash,
            bolt11=f"lnbcrt-bench-placeholder-{payment_hash[:16]}",
            service=spec.slug,
            amount_msat=spec.amount_msat,
            status=PaymentStatus.PAID,
            created_at=now,
            expires_at=expires_at,
            paid_at=now,
            spent_at=None,
            root_key=token.root_key,
            token_id=token.token_id,
            request_digest=spec.digest,
            description=description,
            via="http",
        )
        values = [getattr(payment, c) for c in _COLUMNS]
        values[_COLUMNS.index("status")] = str(payment.status)
        rows.append((*values, spec.amount_msat, f"{token.macaroon_b64}:{preimage.hex()}"))
    return rows


def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def make_rows(spec: SeedSpec, count: int, settings: Settings) -> list[tuple[Any, ...]]:
    """``count`` rows for :func:`insert_rows`; each row's last item is its credential."""
    settings = ensure_server_secret(settings)
    return _make_rows(spec, count, settings.credential_ttl_s, settings.server_secret)


async def insert_rows(store: Store, rows: Sequence[tuple[Any, ...]]) -> None:
    """One transaction, through the store's own connection and thread."""
    sql = (
        f"INSERT INTO payments ({', '.join(_COLUMNS)}, received_msat)"
        f" VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})"
    )

    def go(conn: Connection) -> None:
        conn.executemany(sql, (row[:-1] for row in rows))

    await store.db.run_in_transaction(go)


async def _insert(db_path: Path, rows: Sequence[tuple[Any, ...]], store_url: str = "") -> None:
    # The store's own migrations; on SQLite WAL, so the server may be running.
    store = Store(db_path, store_url)
    await store.open()
    try:
        await insert_rows(store, rows)
        if not store_url:
            # Copy the WAL into the database now and empty it: left for the server, the
            # tens of thousands of pages written here made its first checkpoint in the
            # timed run copy them all (a PASSIVE step of seconds on its store thread).
            await store.db.run_sync(
                lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            )
    finally:
        await store.close()


def seed(
    settings: Settings,
    spec: SeedSpec,
    count: int,
    out: Path,
    pool: ProcessPoolExecutor | None = None,
) -> float:
    """Insert ``count`` paid payments for ``spec`` into the store of ``settings`` (its
    SQLite file, or ``settings.store_url``); write their credentials to ``out``.

    Returns the seconds it took. Minting (~70 us each) is spread over ``pool``.
    """
    started = time.perf_counter()
    sizes = _chunks(count, 5000)
    settings = ensure_server_secret(settings)  # the server's own, from its data dir
    keys = (settings.credential_ttl_s, settings.server_secret)
    if pool is None:
        batches = [_make_rows(spec, n, *keys) for n in sizes]
    else:
        futures = [pool.submit(_make_rows, spec, n, *keys) for n in sizes]
        batches = [f.result() for f in futures]
    rows = [row for batch in batches for row in batch]
    asyncio.run(_insert(settings.db_path, rows, getattr(settings, "store_url", "")))
    out.write_text("".join(row[-1] + "\n" for row in rows))
    return time.perf_counter() - started
