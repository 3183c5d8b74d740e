"""Persistent state in SQLite (WAL), or in PostgreSQL when ``[store] url`` names one.

- :mod:`~satsgate.store.engine`: the connection-and-commit engine (the event loop's
  connection with its group commit, the store thread, the WAL checkpoints), and
  :class:`~satsgate.store.engine.Engine`, what the repositories ask of an engine;
- :mod:`~satsgate.store.postgres`: the PostgreSQL engine, and
  :mod:`~satsgate.store.dialect`: every difference of SQL between the two;
- one repository per aggregate, each the only place its SQL is written:
  :mod:`~satsgate.store.payments` (the spend rule), :mod:`~satsgate.store.refunds`
  (the refund race guard), :mod:`~satsgate.store.jobs`, :mod:`~satsgate.store.cursors`
  (the node's settlement cursor), :mod:`~satsgate.store.votes`,
  :mod:`~satsgate.store.ledger` (read-only totals), :mod:`~satsgate.store.holds` (hold
  invoices' preimages and decisions), :mod:`~satsgate.store.callbacks` (the outbox of
  signed callbacks to callers), :mod:`~satsgate.store.ecash` (Cashu tokens taken, the
  proofs held, change and refund tokens, melts);
- :mod:`~satsgate.store.migrations`: numbered SQL files, recorded in
  ``schema_migrations``;
- :class:`Store` holds them all.

Every state change that moves money is one conditional UPDATE (or an INSERT on
a unique key) whose rowcount is checked: spend (paid -> serving), settle
(unpaid -> paid), refund (paid -> refunded), refund claim (open -> claiming). A
lost race therefore shows up as rowcount 0, never as a double spend or a double
payout. A spent call stays ``serving`` until its outcome is recorded (its answer,
its job's result, or its refund: then ``spent``), so a crash leaves it visible to
the start-up sweep that refunds it. No SQL is written outside this package.
"""

from satsgate.store.callbacks import CallbackRepository
from satsgate.store.cursors import CursorRepository
from satsgate.store.engine import Database
from satsgate.store.holds import HoldRepository
from satsgate.store.jobs import JobRepository
from satsgate.store.ledger import LedgerRepository
from satsgate.store.payments import PaymentRepository
from satsgate.store.refunds import RefundRepository
from satsgate.store.rows import (
    CallbackDelivery,
    Job,
    JobCallback,
    JobStatus,
    Payment,
    PaymentStatus,
    Refund,
    RefundStatus,
)
from satsgate.store.store import Store
from satsgate.store.votes import VoteRepository

__all__ = [
    "CallbackDelivery",
    "CallbackRepository",
    "CursorRepository",
    "Database",
    "HoldRepository",
    "Job",
    "JobCallback",
    "JobRepository",
    "JobStatus",
    "LedgerRepository",
    "Payment",
    "PaymentRepository",
    "PaymentStatus",
    "Refund",
    "RefundRepository",
    "RefundStatus",
    "Store",
    "VoteRepository",
]
