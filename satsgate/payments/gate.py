"""The gate: the paid-call flow's four collaborators, composed for the faces.

- :mod:`~satsgate.payments.challenger`: quote, invoice, the L402/MPP challenge;
- :mod:`~satsgate.payments.verifier`: the credential's checks, no writes;
- :mod:`~satsgate.payments.settlements`: the node's settlements into the store
  (watch loop and cursor), ``wait_paid``, ``refresh_paid``;
- :mod:`~satsgate.payments.spender`: the spend rule, dispatch to the handler,
  refunds after the spend, dedup, jobs.

Surface-neutral: HTTP (L402 / MPP), MCP (paymentId) and the checkout page all come
through here, so the spend rule, re-pricing and refunds are written once.

Order of checks for a paid call (every one before the spend):
credential decodes -> preimage matches -> macaroon/challenge verifies -> bound to
this service -> invoice settled -> not spent -> re-priced within what was paid.
Then one conditional UPDATE (paid -> serving) decides who is served; the call's
recorded outcome (answer, job result, or refund) moves it to spent. For a macaroon
under its derived root key the last four are conditions of that UPDATE itself,
which also reads the row; when it changes nothing, the row is read to say why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import httpx

from satsgate.config.cashu import parse_config
from satsgate.config.settings import Settings
from satsgate.domain.do_not_contact import OptOuts
from satsgate.edge.ratelimit import ChallengeBudget
from satsgate.engines import CpuRunner, Engines
from satsgate.files import FileStore
from satsgate.jobs.lifecycle import JobRunner
from satsgate.lightning.backend import HoldInvoices, LightningBackend
from satsgate.payments import l402
from satsgate.payments.cashu import Ecash, check_installed
from satsgate.payments.challenger import Challenger, realm_of
from satsgate.payments.holds import Holds
from satsgate.payments.rework import ReworkDesk
from satsgate.payments.session_http import SessionHttp
from satsgate.payments.sessions import SessionConfig, Sessions
from satsgate.payments.settlements import PaidWaiters, Settlements
from satsgate.payments.spender import HeldRequests, Progress, Spender
from satsgate.payments.verifier import Verifier
from satsgate.payouts.refunds import RefundService
from satsgate.services.base import (
    NO_DESKS,
    NO_JOB_STATE,
    Desks,
    JobState,
    PrecheckMemo,
    ServiceContext,
    Votes,
)
from satsgate.services.catalog.rates import Rates
from satsgate.services.comms.ai_call_runner import AI_CALL_RUNNER, AiCallRunner
from satsgate.services.comms.bridge_calls import BRIDGE_CALLS, BridgeCalls
from satsgate.services.comms.faxes import FAX_DESK, FaxDesk
from satsgate.services.comms.screening import SCREENER, Screener
from satsgate.services.documents.esign_desk import ESIGN_DESK, ESignDesk
from satsgate.store import PaymentRepository, Store
from satsgate.store.deliveries import DeliveryRepository


def _no_progress(progress: float, message: str) -> None:
    return None


@dataclass(frozen=True)
class HandlerResources:
    """What every handler's context is made of, shared by all calls."""

    settings: Settings
    files: FileStore
    http: httpx.AsyncClient
    cpu: CpuRunner  # CPU-bound engine work in the process pool, each job under its limit
    votes: Votes
    engines: Engines
    voice_bridge: BridgeCalls | None = None  # voice-bridge sessions (open_voice_bridge)
    esign: ESignDesk | None = None  # the e-signature desk
    deliveries: DeliveryRepository | None = None  # records of sent SMS, calls, faxes
    # The screen of communications (satsgate.outreach.screener.NodeScreener); None: the
    # rules alone (satsgate.services.comms.screening.screen).
    screener: Screener | None = None
    ai_calls: AiCallRunner | None = None  # the node's AI calls (services/comms/ai_call_runner.py)
    faxes: FaxDesk | None = None  # the fax desk (send-fax, receive-fax)
    # The app's BTC rate book (services/catalog/rates.py): quotes and contexts read its book.
    rates: Rates = field(default_factory=Rates)

    @cached_property
    def desks(self) -> Desks:
        """The desks above under their keys, as every call's context hands them out."""
        return (
            NO_DESKS.with_desk(SCREENER, self.screener)
            .with_desk(BRIDGE_CALLS, self.voice_bridge)
            .with_desk(ESIGN_DESK, self.esign)
            .with_desk(AI_CALL_RUNNER, self.ai_calls)
            .with_desk(FAX_DESK, self.faxes)
        )

    def for_call(
        self,
        call_id: str,
        progress: Progress | None = None,
        job_state: JobState | None = None,
        *,
        screener: Screener | None = None,
        service: str | None = None,
    ) -> ServiceContext:
        """The context of one call; with ``service``, a paid call of it: its output
        files are bounded by that service's cap (FileStore.for_call)."""
        return ServiceContext(
            progress=progress or _no_progress,
            call_id=call_id,
            settings=self.settings,
            files=self.files if service is None else self.files.for_call(service),
            http=self.http,
            cpu=self.cpu,
            votes=self.votes,
            engines=self.engines,
            job_state=job_state or NO_JOB_STATE,
            desks=self.desks if screener is None else self.desks.with_desk(SCREENER, screener),
            deliveries=self.deliveries,
            rate_book=self.rates.book,
        )


class Gate:
    """The four collaborators, and their methods the faces call, bound here once: a
    face's call goes straight to the collaborator's method (no extra hop on the 402
    and paid paths). ``public_base_url`` and ``max_body_bytes`` are what the faces
    need of the settings."""

    def __init__(
        self,
        *,
        challenger: Challenger,
        verifier: Verifier,
        settlements: Settlements,
        spender: Spender,
        payments: PaymentRepository,
        public_base_url: str,
        max_body_bytes: int,
        holds: Holds | None = None,
        sessions: Sessions | None = None,
        session_http: SessionHttp | None = None,
        cashu: Ecash | None = None,
    ) -> None:
        self.challenger = challenger
        self.sessions = sessions  # the session intent (payments/sessions.py)
        self.session_http = session_http  # its HTTP face (payments/session_http.py)
        self.cashu = cashu  # Cashu ecash payments (NUT-24), when [cashu] names mints
        self.holds = holds  # charge only on success (hold invoices), when configured
        self.verifier = verifier
        self.settlements = settlements
        self.spender = spender
        self.public_base_url = public_base_url
        self.max_body_bytes = max_body_bytes
        # quote and invoice (the 402)
        self.ensure_available = challenger.ensure_available
        self.validate_params = challenger.validate_params
        self.prevalidate = challenger.prevalidate
        self.create_payment = challenger.create_payment
        self.challenge_for = challenger.challenge_for
        self.quote_sats = challenger.quote_sats
        self.challenge_of = challenger.challenge_of
        self.checkout_url = challenger.checkout_url
        self.checkout_payment_hash = challenger.checkout_payment_hash
        # the credential
        self.verify_authorization = verifier.verify_authorization
        # settlement
        self.get_payment = payments.get
        self.get_payment_by_hash = payments.get_by_hash
        self.init_settlement_cursor = settlements.init_cursor
        self.watch_settlements = settlements.watch
        self.wait_paid = settlements.wait_paid
        self.refresh_paid = settlements.refresh_paid
        self.preimage_of = settlements.preimage_of
        # the paid call
        self.execute = spender.execute
        self.execute_credential = spender.execute_credential
        self.execute_deduplicated = spender.execute_deduplicated
        self.refund_orphaned_job = spender.refund_orphaned_job
        self.resume_job = spender.resume_job
        self.refund_unanswered = spender.refund_unanswered
        self.run_released = spender.run_released


def _holds(
    settings: Settings, backend: LightningBackend, store: Store, paid: PaidWaiters
) -> Holds | None:
    """The hold-invoice desk, wherever the node has hold invoices: deciding holds runs
    whenever it has them (holds issued before hold_invoices was turned off are still
    decided); issuing them needs the setting."""
    if settings.hold_invoices and not isinstance(backend, HoldInvoices):
        raise ValueError(f"hold_invoices: the {backend.name} backend has no hold invoices")
    if not isinstance(backend, HoldInvoices):
        return None
    return Holds(
        node=backend,
        payments=store.payments,
        holds=store.holds,
        on_paid=paid.notify,
        max_unused_s=settings.hold_max_unused_s,
        instance_id=store.instance_id,
    )


def _ecash(settings: Settings, backend: LightningBackend, store: Store) -> Ecash | None:
    """The Cashu rail when [cashu] is configured (its wallet library checked installed)."""
    config = parse_config(settings.cashu)
    if config is None:
        return None
    check_installed()
    return Ecash(config, store.ecash, backend)


def _session_config(settings: Settings, refunds: RefundService) -> SessionConfig:
    return SessionConfig(
        secret=settings.server_secret,
        realm=realm_of(settings.public_base_url),
        network=settings.network,
        invoice_expiry_s=settings.invoice_expiry_s,
        deposit_multiplier=settings.session_deposit_multiplier,
        max_deposit_sat=settings.session_max_deposit_sat,
        idle_timeout_s=settings.session_idle_timeout_s,
        pay_timeout_s=settings.refund_pay_timeout_s,
        fees=refunds.fees,
    )


def build_gate(
    *,
    settings: Settings,
    backend: LightningBackend,
    store: Store,
    refunds: RefundService,
    jobs: JobRunner,
    handlers: HandlerResources,
    opt_outs: OptOuts | None = None,
    prechecks: PrecheckMemo | None = None,
    held: HeldRequests | None = None,
) -> Gate:
    """Wire the four collaborators to the node, the store's repositories, the refund
    service and the job runner."""
    root_keys = l402.RootKeys(settings.server_secret)
    paid = PaidWaiters()
    holds = _holds(settings, backend, store, paid)
    settlements = Settlements(
        node=backend, payments=store.payments, cursors=store.cursors, paid=paid, holds=holds
    )
    cashu = _ecash(settings, backend, store)
    # The node's bound on unpaid invoices: the calls' challenges and the session
    # deposits offered with them draw on the one budget.
    budget = ChallengeBudget(settings.max_unpaid_challenges, store.payments.outstanding_unpaid)
    challenger = Challenger(
        node=backend,
        payments=store.payments,
        engines=handlers.engines,
        rates=handlers.rates,
        prechecks=prechecks,
        root_keys=root_keys,
        server_secret=settings.server_secret,
        network=settings.network,
        public_base_url=settings.public_base_url,
        invoice_expiry_s=settings.invoice_expiry_s,
        credential_ttl_s=settings.credential_ttl_s,
        holds=holds if settings.hold_invoices else None,
        opt_outs=opt_outs,
        budget=budget,
    )
    sessions = Sessions(
        config=_session_config(settings, refunds),
        node=backend,
        payments=store.payments,
        sessions=store.sessions,
        settlements=settlements,
        contexts=handlers,
        budget=budget,
    )
    return Gate(
        sessions=sessions,
        session_http=SessionHttp(
            sessions,
            challenger,
            public_base_url=settings.public_base_url,
            max_body_bytes=settings.max_body_bytes,
        ),
        challenger=challenger,
        verifier=Verifier(
            payments=store.payments, root_keys=root_keys, server_secret=settings.server_secret
        ),
        settlements=settlements,
        spender=Spender(
            payments=store.payments,
            refunds=refunds,
            settlements=settlements,
            jobs=jobs,
            contexts=handlers,
            dedup_window_s=settings.dedup_window_s,
            holds=holds,
            ecash=cashu,
            held=held,
            # A content refusal keeps the payment for a free retry (CONTENT_FILTERED_RETRY).
            rework=ReworkDesk(
                windows=store.rework,
                payments=store.payments,
                refunds=refunds,
                window_s=settings.rework_window_s,
                retries_max=settings.rework_retries_max,
            ),
        ),
        payments=store.payments,
        public_base_url=settings.public_base_url,
        max_body_bytes=settings.max_body_bytes,
        holds=holds,
        cashu=cashu,
    )
