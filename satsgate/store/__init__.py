"""Persistent state in SQLite (WAL), through sqlite-utils for the schema.

Every state change that moves money is one conditional UPDATE (or an INSERT on
a unique key) whose rowcount is checked: spend (paid -> spent), settle
(unpaid -> paid), refund claim (open -> claiming). A lost race therefore shows
up as rowcount 0, never as a double spend or a double payout.

All statements run on one dedicated thread, so the event loop never waits on
the disk and SQLite never sees two writers from this process.
"""

from satsgate.store.db import Store
from satsgate.store.models import Job, JobStatus, Payment, PaymentStatus, Refund, RefundStatus

__all__ = ["Job", "JobStatus", "Payment", "PaymentStatus", "Refund", "RefundStatus", "Store"]
