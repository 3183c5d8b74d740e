"""The store's numbered migrations, and databases made before they were files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from satsgate.store import Payment, PaymentStatus, Store
from satsgate.store.migrations import Migration, available

# The schema the store made up to commit 0264561 (migrations in code, counted in
# PRAGMA user_version alone), as that code left it: user_version 4.
LEGACY_SCHEMA = """
CREATE TABLE "payments" (
   "payment_id" TEXT PRIMARY KEY,
   "payment_hash" TEXT NOT NULL,
   "bolt11" TEXT NOT NULL,
   "service" TEXT NOT NULL,
   "amount_msat" INTEGER NOT NULL,
   "status" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL,
   "expires_at" INTEGER NOT NULL,
   "paid_at" INTEGER,
   "spent_at" INTEGER,
   "root_key" TEXT NOT NULL,
   "token_id" TEXT NOT NULL,
   "request_digest" TEXT NOT NULL,
   "description" TEXT,
   "via" TEXT NOT NULL,
   "received_msat" INTEGER
);
CREATE UNIQUE INDEX "idx_payments_payment_hash"
    ON "payments" ("payment_hash");
CREATE TABLE "refunds" (
   "refund_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL REFERENCES "payments"("payment_id"),
   "amount_msat" INTEGER NOT NULL,
   "k1" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "reason" TEXT,
   "created_at" INTEGER NOT NULL,
   "expires_at" INTEGER NOT NULL,
   "payout_bolt11" TEXT,
   "payout_hash" TEXT,
   "updated_at" INTEGER NOT NULL
);
CREATE UNIQUE INDEX "idx_refunds_k1"
    ON "refunds" ("k1");
CREATE INDEX "idx_refunds_payment_id"
    ON "refunds" ("payment_id");
CREATE INDEX "idx_refunds_status"
    ON "refunds" ("status");
CREATE TABLE "cursors" (
   "name" TEXT PRIMARY KEY,
   "value" INTEGER
);
CREATE TABLE "jobs" (
   "job_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL REFERENCES "payments"("payment_id"),
   "service" TEXT NOT NULL,
   "job_type" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "result_json" TEXT,
   "error_json" TEXT,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_jobs_status"
    ON "jobs" ("status");
CREATE TABLE "votes" (
   "call_id" TEXT PRIMARY KEY,
   "slug" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL
);
CREATE INDEX "idx_votes_slug"
    ON "votes" ("slug");
CREATE INDEX idx_payments_unpaid_expiry ON payments (expires_at) WHERE status = 'unpaid';
PRAGMA user_version = 4;
"""


def _schema(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"
            " AND name != 'schema_migrations'"
        ).fetchall()
        return {str(name): str(sql) for name, sql in rows}
    finally:
        conn.close()


def _versions(path: Path) -> tuple[list[int], int]:
    conn = sqlite3.connect(path)
    try:
        applied = [int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")]
        return sorted(applied), int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _legacy_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY_SCHEMA)
    now = int(time.time())
    conn.execute(
        "INSERT INTO payments VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "pay_old",
            "ab" * 32,
            "lnbcrt1old",
            "vote",
            5000,
            "paid",
            now,
            now + 600,
            now,
            None,
            "00" * 32,
            "11" * 32,
            "d" * 64,
            "old",
            "http",
            5000,
        ),
    )
    conn.execute("INSERT INTO cursors VALUES ('settle:dev', 7)")
    conn.commit()
    conn.close()


def test_migration_files_are_numbered_without_gaps_and_split_into_statements() -> None:
    migrations = available()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert all(m.statements() for m in migrations)
    two = Migration(
        9,
        "t",
        "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT ';');\nDROP TABLE t;",
    )
    assert two.statements() == [
        "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT ';');",
        "DROP TABLE t;",
    ]


async def test_a_new_database_gets_the_legacy_schema_and_records_every_migration(
    tmp_path: Path,
) -> None:
    legacy, fresh = tmp_path / "legacy.db", tmp_path / "fresh.db"
    _legacy_database(legacy)
    conn = sqlite3.connect(legacy)  # and the migrations written after the legacy code
    for migration in available()[4:]:
        for statement in migration.statements():
            conn.execute(statement)
    conn.commit()
    conn.close()
    store = Store(fresh)
    await store.open()
    await store.close()
    assert _schema(fresh) == _schema(legacy)
    assert _versions(fresh) == (list(range(1, len(available()) + 1)), len(available()))


async def test_a_database_made_before_migration_files_opens_and_keeps_working(
    tmp_path: Path,
) -> None:
    path = tmp_path / "legacy.db"
    _legacy_database(path)
    before = _schema(path)
    store = Store(path)
    await store.open()
    try:
        old = await store.payments.get("pay_old")
        assert old is not None and old.status is PaymentStatus.PAID
        assert old.mode == "invoice"  # a payment from before hold invoices
        assert await store.cursors.get("settle:dev") == 7
        assert await store.payments.serving("before-instances") == []
        assert await store.payments.spend("pay_old", int(time.time())) is True
        assert await store.payments.spend("pay_old", int(time.time())) is False
        assert await store.votes.record("send-letter", "pay_old") == 1
    finally:
        await store.close()
    # Nothing of 1-4 re-ran; what came after the legacy code was added to it (5: hold
    # invoices on payments; 6: refund payouts; 7: the jobs' resume state).
    after = _schema(path)
    altered = ("payments", "refunds", "jobs")  # columns added by later migrations
    assert {k: v for k, v in after.items() if k in before and k not in altered} == {
        k: v for k, v in before.items() if k not in altered
    }
    assert after["payments"].startswith(before["payments"][:-1])
    assert after["refunds"].startswith(before["refunds"][:-1])
    assert "payout_fee_msat" in after["refunds"] and "payout_error" in after["refunds"]
    assert "holds" in after and "holds" not in before
    assert after["jobs"].startswith(before["jobs"].rstrip(")\n "))
    assert "resume_json" in after["jobs"]
    latest = len(available())
    assert _versions(path) == (list(range(1, latest + 1)), latest)
    store = Store(path)  # and it opens again as it is
    await store.open()
    await store.close()


async def test_a_database_part_way_through_the_legacy_versions_gets_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path)
    for migration in available()[:2]:
        for statement in migration.statements():
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    store = Store(path)
    await store.open()
    try:
        now = int(time.time())
        payment = Payment(
            "pay_new",
            "cd" * 32,
            "lnbcrt1",
            "vote",
            1000,
            PaymentStatus.UNPAID,
            now,
            now - 10,
            None,
            None,
            "00",
            "11",
            "d",
            "",
            "http",
        )
        await store.payments.insert(payment)
        assert await store.payments.prune_unpaid(now) == 1
        assert await store.votes.counts() == {}
    finally:
        await store.close()
    assert "idx_payments_unpaid_expiry" in _schema(path)
    assert "idx_payments_status_created_at" not in _schema(path)
    latest = len(available())
    assert _versions(path) == (list(range(1, latest + 1)), latest)


def test_an_unterminated_statement_is_refused() -> None:
    with pytest.raises(ValueError):
        Migration(9, "t", "CREATE TABLE t (x TEXT DEFAULT 'a;b);").statements()
