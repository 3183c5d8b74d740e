"""The ledger's equation, checked against the database itself after a money scenario."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from satsgate.store.sql import Connection, snapshot

FIELDS = ("received_msat", "earned_msat", "refunded_msat", "held_msat", "open_msat")


def assert_ledger_balances(server: Any) -> dict[str, Any]:
    """received = earned + refunded + held + open, in total and for every day, and each
    figure agrees with the rows themselves. Returns the report.

    A payout of an earlier test may still be moving: the report is compared with the rows
    read just before and just after it, once those two reads agree."""
    if server.settings.store_url:  # PostgreSQL: the rows through the server's own store

        def read_rows() -> Rows:
            return server.call(lambda: server.store.db.run_sync(_rows_of))  # type: ignore[no-any-return]

    else:

        def read_rows() -> Rows:
            return _rows(Path(server.settings.db_path))

    return _balances(read_rows, lambda: server.call(server.store.ledger.report))


def assert_ledger_balances_at(
    db: Path, read_report: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """:func:`assert_ledger_balances` for a satsgate in another process: its database and
    a way to read its report (``satsgate ledger --json``)."""
    return _balances(lambda: _rows(db), read_report)


def _balances(
    read_rows: Callable[[], Rows], read_report: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    for _ in range(100):
        before = read_rows()
        report: dict[str, Any] = read_report()
        if read_rows() == before:
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the store never stood still for the ledger check")
    t = report["totals"]
    assert t["received_msat"] == (
        t["earned_msat"] + t["refunded_msat"] + t["held_msat"] + t["open_msat"]
    ), t
    assert all(t[f] >= 0 for f in FIELDS), t
    for day in report["per_day"]:
        assert day["received_msat"] == (
            day["earned_msat"] + day["refunded_msat"] + day["held_msat"] + day["open_msat"]
        ), day
    for field in (*FIELDS, "refund_fees_msat", "payout_fees_msat", "payments"):
        assert sum(d[field] for d in report["per_day"]) == t[field], field
    by_state = sum(t[f"refunds_{s}_msat"] for s in ("open", "claiming", "paid"))
    assert t["refunded_msat"] == by_state + t["session_refunds_msat"]
    _against_rows(before, t)
    return report


Rows = tuple[list[Any], list[Any], list[Any]]


def _rows(db: Path) -> Rows:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return _rows_of(conn)
    finally:
        conn.close()


def _rows_of(conn: Connection) -> Rows:
    with snapshot(conn):
        payments = conn.execute(
            "SELECT p.payment_id, p.amount_msat, p.status, p.mode, h.decision FROM payments p"
            " LEFT JOIN holds h ON h.payment_hash = p.payment_hash"
            " WHERE p.status != 'unpaid' ORDER BY p.payment_id"
        ).fetchall()
        refunds = conn.execute(
            "SELECT payment_id, amount_msat, status, payout_fee_msat FROM refunds"
            " ORDER BY refund_id"
        ).fetchall()
        sessions = conn.execute(
            "SELECT session_id, deposit_msat, spent_msat, refund_msat, payout_status, held_msat,"
            " payout_fee_msat FROM sessions ORDER BY session_id"
        ).fetchall()
    return [tuple(r) for r in payments], [tuple(r) for r in refunds], [tuple(r) for r in sessions]


def _against_rows(rows: Rows, t: dict[str, Any]) -> None:
    """The figures from the rows, counted here in Python rather than in SQL."""
    payments, refunds, sessions = rows
    received = held = open_ = 0
    amount_of: dict[str, int] = {}
    for payment_id, amount, status, mode, decision in payments:
        amount_of[payment_id] = amount
        if status not in ("paid", "serving", "spent", "refunded"):
            continue
        received += amount
        if status == "paid":
            open_ += amount
        elif status == "serving" or (mode == "hold" and decision != "settled"):
            held += amount
    refunded = sum(amount for _, amount, status, _ in refunds if status != "expired")
    # Payment sessions: an undecided balance is held, a decided refund (unless skipped)
    # is refunded; a session never spends more than was deposited nor less than nothing.
    session_fees = 0
    for _, deposit, spent, refund, payout_status, in_flight, fee in sessions:
        session_fees += fee or 0
        assert 0 <= in_flight <= spent <= deposit
        if refund is None:
            held += deposit - spent + in_flight
        else:
            assert refund == deposit - spent
            if payout_status != "skipped":
                refunded += refund
    owed: dict[str, int] = {}
    for payment_id, amount, status, _ in refunds:
        if status != "expired":
            owed[payment_id] = owed.get(payment_id, 0) + amount
    for payment_id, total in owed.items():  # never more back than was paid
        assert total <= amount_of[payment_id], payment_id
    fees = sum(fee or 0 for *_, fee in refunds)
    assert (t["received_msat"], t["held_msat"], t["open_msat"], t["refunded_msat"]) == (
        received,
        held,
        open_,
        refunded,
    )
    assert t["earned_msat"] == received - refunded - held - open_
    assert t["refund_fees_msat"] == fees
    assert t["payout_fees_msat"] == fees + session_fees  # the operator's cost, every payout
