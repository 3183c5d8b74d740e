"""The Store: the engine and one repository per aggregate, opened and closed together."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

from satsgate.store.ai_calls import AiCallRepository
from satsgate.store.callbacks import CallbackRepository
from satsgate.store.cursors import CursorRepository
from satsgate.store.deliveries import DeliveryRepository
from satsgate.store.deposits import DepositRepository
from satsgate.store.do_not_contact import DoNotContactRepository
from satsgate.store.ecash import EcashRepository
from satsgate.store.engine import Database, Engine
from satsgate.store.esign import ESignRepository
from satsgate.store.faxes import FaxRepository
from satsgate.store.held_requests import HeldRequestRepository
from satsgate.store.holds import HoldRepository
from satsgate.store.instances import DutyLeaseRepository, InstanceRepository
from satsgate.store.jobs import JobRepository
from satsgate.store.ledger import LedgerRepository
from satsgate.store.payments import PaymentRepository
from satsgate.store.payout_fees import PayoutFeeRepository
from satsgate.store.refunds import RefundRepository
from satsgate.store.retention import RetentionRepository
from satsgate.store.rework import ReworkRepository
from satsgate.store.screenings import ScreeningRepository
from satsgate.store.sessions import SessionRepository
from satsgate.store.voice_bridge import VoiceBridgeRepository
from satsgate.store.votes import VoteRepository


def open_engine(path: Path, url: str = "") -> Engine:
    """The engine of the store: PostgreSQL when ``url`` names a database
    (``postgresql://...``), else the SQLite file at ``path``."""
    if not url:
        return Database(path)
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError(f"store url must be a postgresql:// URL, not {url.split(':')[0]!r}")
    from satsgate.store.postgres import PostgresDatabase  # psycopg: only when asked for

    return PostgresDatabase(url)


def new_instance_id() -> str:
    """A new instance's id: the host's name (for the operator) and a random part."""
    host = socket.gethostname().split(".")[0][:24] or "host"
    return f"{host}-{secrets.token_hex(4)}"


class Store:
    """satsgate's database: ``db`` runs the statements (SQLite: connections, group
    commit, store thread, checkpoints; or PostgreSQL: a pool, see
    satsgate/store/postgres.py); each repository owns its aggregate's SQL."""

    def __init__(self, path: Path, url: str = "", instance_id: str | None = None) -> None:
        self.db: Engine = open_engine(path, url)
        # This process among the instances sharing the store (see store/instances.py).
        self.instance_id = instance_id or new_instance_id()
        self.instances = InstanceRepository(self.db)
        self.duty_leases = DutyLeaseRepository(self.db)
        self.payments = PaymentRepository(self.db, self.instance_id)
        self.refunds = RefundRepository(self.db)
        self.payout_fees = PayoutFeeRepository(self.db)
        self.jobs = JobRepository(self.db, self.instance_id)
        self.cursors = CursorRepository(self.db)
        self.votes = VoteRepository(self.db)
        self.ledger = LedgerRepository(self.db)
        self.holds = HoldRepository(self.db)
        self.ecash = EcashRepository(self.db, self.instance_id)
        self.deposits = DepositRepository(self.db, self.instance_id)
        self.voice_bridge = VoiceBridgeRepository(self.db)
        self.deliveries = DeliveryRepository(self.db)
        # Communications (issue 19): held requests, do-not-contact, screenings, retention.
        self.held_requests = HeldRequestRepository(self.db, self.instance_id)
        self.do_not_contact = DoNotContactRepository(self.db)
        self.screenings = ScreeningRepository(self.db)
        self.retention = RetentionRepository(self.db)
        self.faxes = FaxRepository(self.db)
        self.sessions = SessionRepository(self.db, self.instance_id)
        self.ai_calls = AiCallRepository(self.db, self.instance_id)
        self.callbacks = CallbackRepository(self.db)
        self.esign = ESignRepository(self.db)
        # Free-retry windows after an upstream content refusal (CONTENT_FILTERED_RETRY).
        self.rework = ReworkRepository(self.db, self.instance_id)

    async def open(self) -> None:
        """Open the engine's connections and bring the schema up to date."""
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()
