"""The gate: quote, invoice, verify, spend once, dispatch, refund on failure.

Surface-neutral: HTTP (L402 / MPP) and MCP (paymentId) both come through here,
so the spend rule, re-pricing and refunds are written once.

Order of checks for a paid call (every one before the spend):
credential decodes -> preimage matches -> macaroon/challenge verifies -> bound to
this service -> invoice settled -> not spent -> re-priced within what was paid.
Then one conditional UPDATE (paid -> spent) decides who is served. For a macaroon
under its derived root key the last four are conditions of that UPDATE itself,
which also reads the row; when it changes nothing, the row is read to say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from satsgate.config import Settings
from satsgate.engines import CpuRunner, EngineError, Engines
from satsgate.errors import ApiError, invalid_params
from satsgate.files import FileStore
from satsgate.jobs import JobRunner
from satsgate.lightning import BackendError, InvoiceState, LightningBackend
from satsgate.payments import l402, mpp
from satsgate.payments.dedup import DedupCache
from satsgate.refunds import RefundService, refund_object
from satsgate.services.base import (
    ServiceContext,
    ServiceResult,
    ServiceSpec,
    request_digest,
)
from satsgate.store import Job, Payment, PaymentStatus, Store

log = logging.getLogger(__name__)

AnySpec = ServiceSpec[Any]


@dataclass(frozen=True)
class Challenge:
    """What a client needs to pay for one call."""

    payment: Payment
    macaroon_b64: str
    mpp: mpp.Challenge

    @property
    def amount_sats(self) -> int:
        return self.payment.amount_msat // 1000

    def www_authenticate(self) -> list[str]:
        return [*l402.challenge_headers(self.macaroon_b64, self.payment.bolt11), self.mpp.header()]

    def body_fields(self, base_url: str) -> dict[str, Any]:
        return {
            "paymentId": self.payment.payment_id,
            "invoice": self.payment.bolt11,
            "lightningInvoice": self.payment.bolt11,
            "paymentHash": self.payment.payment_hash,
            "macaroon": self.macaroon_b64,
            "amountSats": self.amount_sats,
            "expiresAt": mpp.rfc3339(self.payment.expires_at),
            "service": self.payment.service,
            "hostedCheckoutUrl": f"{base_url}/checkout/{self.payment.payment_id}",
        }


@dataclass(frozen=True)
class Verified:
    """A credential that verified. ``payment`` is None when the macaroon verified
    under its derived root key: the row is then read by the spend itself (one
    statement), see :meth:`Gate.execute_credential`."""

    payment_hash: str
    scheme: str  # "L402" or "Payment"
    payment: Payment | None = None
    token_id: str = ""
    mpp_challenge_id: str | None = None


def validate_params(spec: AnySpec, body: Any) -> BaseModel:
    """Schema check before any invoice: L402_INVALID_PARAMS lists every bad field."""
    if not isinstance(body, dict):
        raise ApiError(
            "L402_INVALID_PARAMS", "The request body must be a JSON object.", example=_example(spec)
        )
    try:
        params: BaseModel = spec.params.model_validate(body)
    except ValidationError as exc:
        raise invalid_params(exc, example=_example(spec)) from None
    return params


def _example(spec: AnySpec) -> str:
    return mpp.canonical_json(dict(spec.example)) if spec.example else ""


def _no_progress(progress: float, message: str) -> None:
    return None


class Gate:
    def __init__(
        self,
        *,
        settings: Settings,
        backend: LightningBackend,
        store: Store,
        refunds: RefundService,
        jobs: JobRunner,
        files: FileStore,
        http: httpx.AsyncClient,
        cpu_pool: Executor,
        engines: Engines,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.store = store
        self.refunds = refunds
        self.jobs = jobs
        self.files = files
        self._http = http
        self._cpu_pool = cpu_pool
        self._cpu = CpuRunner(cpu_pool, settings.cpu_job_time_limit_s)
        self.engines = engines
        self.dedup = DedupCache(settings.dedup_window_s)
        self._paid_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._network = settings.network
        self.root_keys = l402.RootKeys(settings.server_secret)

    # -- quoting and invoicing --------------------------------------------------------------

    def ensure_available(self, spec: AnySpec, params: BaseModel | None = None) -> None:
        """Refuse, before any invoice, a service (or a model) no engine serves here."""
        reason = spec.unavailable_reason(self.engines, params)
        if reason is not None:
            raise ApiError("SERVICE_UNAVAILABLE", f"{reason}; nothing was charged.")

    async def prevalidate(self, spec: AnySpec, params: BaseModel) -> None:
        """Checks beyond the schema, before any invoice (e.g. a PDF that must parse),
        and that an engine serves the model the request chose."""
        self.ensure_available(spec, params)
        if spec.prevalidate is not None:
            await spec.prevalidate(params)

    def quote_sats(self, spec: AnySpec, params: BaseModel) -> int:
        return spec.quote_sats(params)

    async def create_payment(
        self,
        spec: AnySpec,
        *,
        amount_sats: int,
        digest: str,
        via: str,
    ) -> Challenge:
        """Create the invoice and store the payment as unpaid; nothing else is charged."""
        amount_msat = amount_sats * 1000
        description = f"satsgate: {spec.title} ({amount_sats} sat)"
        try:
            invoice = await self.backend.create_invoice(
                amount_msat, description, self.settings.invoice_expiry_s
            )
        except (BackendError, OSError) as exc:
            log.error("invoice creation failed: %s", exc)
            raise ApiError(
                "SERVICE_ERROR",
                "The Lightning node could not create an invoice; nothing was charged.",
            ) from exc
        now = int(time.time())
        token_id = secrets.token_bytes(32)
        payment = Payment(
            payment_id=f"pay_{secrets.token_hex(16)}",
            payment_hash=invoice.payment_hash,
            bolt11=invoice.bolt11,
            service=spec.slug,
            amount_msat=amount_msat,
            status=PaymentStatus.UNPAID,
            created_at=now,
            expires_at=invoice.expires_at,
            paid_at=None,
            spent_at=None,
            root_key=self.root_keys.for_token(token_id).hex(),  # per-token macaroon root key
            token_id=token_id.hex(),
            request_digest=digest,
            description=description,
            via=via,
        )
        await self.store.insert_payment(payment)
        return self.challenge_of(payment)

    def challenge_of(self, payment: Payment) -> Challenge:
        """The challenge for a stored payment: the same macaroon and invoice every time."""
        token = l402.mint(
            payment.payment_hash,
            payment.service,
            payment.expires_at + self.settings.credential_ttl_s,
            bytes.fromhex(payment.root_key),
            bytes.fromhex(payment.token_id),
        )
        challenge = mpp.make_challenge(
            secret=self.settings.server_secret,
            realm=self._realm(),
            amount_sats=payment.amount_msat // 1000,
            bolt11=payment.bolt11,
            payment_hash=payment.payment_hash,
            network=self._network,
            expires_at=payment.expires_at,
            description=payment.description,
        )
        return Challenge(payment, token.macaroon_b64, challenge)

    async def challenge_for(self, spec: AnySpec, params: BaseModel, via: str) -> Challenge:
        return await self.create_payment(
            spec,
            amount_sats=self.quote_sats(spec, params),
            digest=request_digest(spec.slug, params),
            via=via,
        )

    def _realm(self) -> str:
        url = self.settings.public_base_url
        return url.split("://", 1)[-1].split("/", 1)[0]

    # -- credentials ------------------------------------------------------------------------

    async def verify_authorization(self, values: list[str], spec: AnySpec) -> Verified:
        """Verify one Authorization header; raises MalformedCredential / CredentialError."""
        if len(values) != 1:
            raise l402.MalformedCredential("send exactly one Authorization header")
        scheme, _, rest = values[0].strip().partition(" ")
        scheme_l = scheme.lower()
        if scheme_l in ("l402", "lsat"):
            cred = l402.parse_credential(rest)
            decoded = l402.decode_macaroon(cred.macaroon)
            l402.check_preimage(decoded.payment_hash, cred.preimage)
            now = int(time.time())
            if l402.signature_matches(decoded, self.root_keys.for_token(decoded.identifier[34:])):
                l402.check_caveats(decoded, spec.slug, now)
                return Verified(decoded.payment_hash, "L402", token_id=decoded.token_id)
            # Not under a derived key: a macaroon minted with a stored random root key.
            payment = await self.store.get_payment_by_hash(decoded.payment_hash)
            if payment is None or payment.token_id != decoded.token_id:
                raise l402.CredentialError("unknown or revoked macaroon")
            if not l402.signature_matches(decoded, bytes.fromhex(payment.root_key)):
                raise l402.CredentialError("the macaroon signature does not verify")
            l402.check_caveats(decoded, spec.slug, now)
            return Verified(payment.payment_hash, "L402", payment, payment.token_id)
        if scheme_l == "payment":
            mcred = mpp.parse_credential(rest, secret=self.settings.server_secret)
            l402.check_preimage(mcred.payment_hash, mcred.preimage)
            payment = await self.store.get_payment_by_hash(mcred.payment_hash)
            if payment is None:
                raise l402.CredentialError("unknown payment")
            if payment.service != spec.slug:
                raise l402.CredentialError(
                    f"this credential was issued for {payment.service}, not {spec.slug}"
                )
            return Verified(
                payment.payment_hash, "Payment", payment, mpp_challenge_id=mcred.challenge_id
            )
        raise l402.MalformedCredential(f"unsupported authorization scheme {scheme!r}")

    # -- settlement -------------------------------------------------------------------------

    def _cursor_name(self) -> str:
        return f"settle:{self.backend.name}"

    async def init_settlement_cursor(self) -> int:
        """The persisted settlement cursor; on first start, the node's current one, saved.

        Saved before any invoice is issued, so a settlement that happens while satsgate
        is down is always after the cursor and is applied on the next start.
        """
        cursor = await self.store.get_cursor(self._cursor_name())
        if cursor is None:
            initial = getattr(self.backend, "initial_cursor", None)
            cursor = int(await initial()) if initial is not None else 0
            await self.store.set_cursor(self._cursor_name(), cursor)
        return cursor

    async def watch_settlements(self) -> None:
        """Apply the node's settlements to the store forever, resuming from the cursor."""
        name = self._cursor_name()
        cursor = await self.init_settlement_cursor()
        backoff = 1.0
        while True:
            try:
                stream: AsyncIterator[Any] = self.backend.settlements(cursor)
                async for s in stream:
                    await self.store.mark_paid(
                        s.payment_hash, s.amount_received_msat, s.settled_at, (name, s.cursor)
                    )
                    cursor = s.cursor
                    self._notify_paid(s.payment_hash)
                    backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the node went away: retry, never give up
                log.warning("settlement stream failed (%s); retrying in %.0f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    def _notify_paid(self, payment_hash: str) -> None:
        for fut in self._paid_waiters.pop(payment_hash, []):
            if not fut.done():
                fut.set_result(None)

    async def wait_paid(self, payment: Payment, timeout_s: float) -> Payment:
        """Wait until the payment is settled (or the timeout); returns the fresh row."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._paid_waiters.setdefault(payment.payment_hash, []).append(fut)
        try:
            fresh = await self.store.get_payment(payment.payment_id)
            if fresh is not None and fresh.status is not PaymentStatus.UNPAID:
                return fresh
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout_s)
        finally:
            waiters = self._paid_waiters.get(payment.payment_hash, [])
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._paid_waiters.pop(payment.payment_hash, None)
        return await self.store.get_payment(payment.payment_id) or payment

    async def refresh_paid(self, payment: Payment) -> Payment:
        """An unpaid row may lag the node by a moment: ask the node before refusing."""
        if payment.status is not PaymentStatus.UNPAID:
            return payment
        try:
            status = await self.backend.lookup_invoice(payment.payment_hash)
        except (BackendError, OSError):
            return payment
        if status.state is InvoiceState.SETTLED:
            await self.store.mark_paid(
                payment.payment_hash, status.amount_received_msat, int(time.time())
            )
            self._notify_paid(payment.payment_hash)
            return await self.store.get_payment(payment.payment_id) or payment
        return payment

    # -- the paid call ----------------------------------------------------------------------

    def context(
        self, call_id: str, progress: Callable[[float, str], None] | None = None
    ) -> ServiceContext:
        return ServiceContext(
            progress=progress or _no_progress,
            call_id=call_id,
            settings=self.settings,
            files=self.files,
            http=self._http,
            cpu=self._cpu,
            store=self.store,
            engines=self.engines,
        )

    async def execute_deduplicated(
        self, payment: Payment, spec: AnySpec, params: BaseModel, *, use_cache: bool = True
    ) -> tuple[ServiceResult, bool]:
        """:meth:`execute` behind the 30 s dedup cache; returns (result, replayed)."""
        return await self._deduplicated(
            payment.payment_hash, spec, params, lambda: self.execute(payment, spec, params),
            use_cache,
        )

    async def execute_credential(
        self, verified: Verified, spec: AnySpec, params: BaseModel, *, use_cache: bool = True
    ) -> tuple[ServiceResult, bool]:
        """The call a verified credential pays for, behind the dedup cache.

        A macaroon verified under its derived root key is spent by one statement that
        also reads its row (paid, this token, this service, enough paid -> spent); only
        when that finds nothing is the row read to say why (or to refresh an unpaid one
        from the node), through :meth:`execute`. Raises CredentialError for a token
        whose row is gone.
        """

        async def run() -> ServiceResult:
            if verified.payment is not None:
                return await self.execute(verified.payment, spec, params)
            price_msat = self.quote_sats(spec, params) * 1000
            spent = await self.store.spend_token(
                verified.payment_hash, verified.token_id, spec.slug, price_msat, int(time.time())
            )
            if spent is not None:
                return await self._dispatch(spent, spec, params, price_msat)
            payment = await self.store.get_payment_by_hash(verified.payment_hash)
            if payment is None or payment.token_id != verified.token_id:
                raise l402.CredentialError("unknown or revoked macaroon")
            return await self.execute(payment, spec, params)

        return await self._deduplicated(verified.payment_hash, spec, params, run, use_cache)

    async def _deduplicated(
        self,
        payment_hash: str,
        spec: AnySpec,
        params: BaseModel,
        run: Callable[[], Awaitable[ServiceResult]],
        use_cache: bool,
    ) -> tuple[ServiceResult, bool]:
        """``run()`` behind the 30 s dedup cache; returns (result, replayed).

        The same request with the same payment within the window gets the first
        outcome again (a result, or an error with its refund) with no second spend;
        a repeat that arrives while the first is running waits for it. Keyed by the
        payment hash, so only the payer can ever see a cached outcome.
        """
        key = (payment_hash, request_digest(spec.slug, params))
        if use_cache:
            earlier = self.dedup.lookup(key)
            if earlier is not None:
                try:
                    return await asyncio.shield(earlier), True
                except asyncio.CancelledError:
                    if not earlier.cancelled():
                        raise
                    use_cache = False  # the first attempt never ran; the spend rule decides
                except ApiError as exc:
                    exc.headers = {**exc.headers, "X-Dedup": "hit"}
                    raise
            else:
                self.dedup.begin(key)
        try:
            result = await run()
        except ApiError as exc:
            if use_cache:
                # Cache only what followed a spend (it carries a refund); the rest never ran.
                if exc.refund is not None:
                    self.dedup.fail(key, exc)
                else:
                    self.dedup.forget(key)
            raise
        except BaseException:
            if use_cache:
                self.dedup.forget(key)
            raise
        if use_cache:
            self.dedup.finish(key, result)
        return result, False

    async def execute(self, payment: Payment, spec: AnySpec, params: BaseModel) -> ServiceResult:
        """Spend ``payment`` on one call of ``spec`` and run it. Raises ApiError.

        After the spend, every failure carries a refund of the whole payment; a
        call that prices below what was paid is refunded the difference.
        """
        if payment.service != spec.slug:
            raise ApiError(
                "PAYMENT_INVALID", f"This payment is for {payment.service}, not {spec.slug}."
            )
        payment = await self.refresh_paid(payment)
        if payment.status is PaymentStatus.UNPAID:
            if payment.expires_at <= time.time():
                raise ApiError("PAYMENT_EXPIRED", "The invoice expired before it was paid.")
            raise ApiError(
                "PAYMENT_PENDING",
                "The invoice is not paid yet.",
                extra={"paymentId": payment.payment_id},
            )
        if payment.status is PaymentStatus.SPENT:
            raise ApiError("PAYMENT_ALREADY_USED", "Service already used.")
        if payment.status is PaymentStatus.REFUNDED:
            raise ApiError(
                "PAYMENT_ALREADY_USED", "Service already used: this payment was refunded."
            )

        price_msat = self.quote_sats(spec, params) * 1000
        if price_msat > payment.amount_msat:
            refund = await self.refunds.refund_unspent(
                payment,
                f"request prices at {price_msat // 1000} sat, "
                f"{payment.amount_msat // 1000} sat were paid",
            )
            if refund is None:  # lost a race with another use: it was served or refunded
                raise ApiError("PAYMENT_ALREADY_USED", "Service already used.")
            raise ApiError(
                "PAYMENT_INSUFFICIENT",
                f"This request costs {price_msat // 1000} sat but {payment.amount_msat // 1000}"
                " sat were paid for it. The payment was refunded in full.",
                refund=refund,
                extra={"amountSats": price_msat // 1000},
            )

        if not await self.store.spend(payment.payment_id, int(time.time())):
            raise ApiError("PAYMENT_ALREADY_USED", "Service already used.")
        return await self._dispatch(payment, spec, params, price_msat)

    async def _dispatch(
        self, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> ServiceResult:
        """Run a just-spent call (or submit it as a job)."""
        if spec.mode == "job":
            return await self._submit_job(payment, spec, params, price_msat)
        return await self._run_handler(
            payment, spec, params, price_msat, self.context(payment.payment_id)
        )

    async def _run_handler(
        self,
        payment: Payment,
        spec: AnySpec,
        params: BaseModel,
        price_msat: int,
        ctx: ServiceContext,
    ) -> ServiceResult:
        """Run a spent call's handler: any failure refunds the whole payment."""
        try:
            result = await spec.handler(ctx, params)
        except ApiError as exc:
            exc.refund = await self._refund_after_spend(payment, payment.amount_msat, exc.message)
            raise
        except EngineError as exc:
            refund = await self._refund_after_spend(payment, payment.amount_msat, exc.message)
            raise ApiError(
                exc.code, exc.message, refund=refund, extra=exc.envelope_extra(),
                headers=exc.http_headers(),
            ) from exc
        except asyncio.CancelledError:
            # The client went away mid-call; the money is still owed back.
            await asyncio.shield(
                self._refund_after_spend(payment, payment.amount_msat, "call cancelled")
            )
            raise
        except Exception as exc:
            log.exception("service %s failed after payment", spec.slug)
            refund = await self._refund_after_spend(payment, payment.amount_msat, repr(exc))
            raise ApiError(
                "L402_UPSTREAM_FAILED",
                "The service failed after payment; the payment was refunded.",
                refund=refund,
            ) from exc

        if spec.untrusted_output and isinstance(result.body, dict):
            result = replace(result, body={**result.body, "untrusted_output": True})
        # One refund link for all that was not earned: what was paid beyond the quote,
        # plus what the service did not deliver of it.
        earned_msat, field, reason = price_msat, "refund", "paid more than the request costs"
        if result.charged_msat is not None and result.charged_msat < price_msat:
            earned_msat = max(0, result.charged_msat)
            field, reason = "partial_refund", "the call delivered less than was quoted"
        unearned_msat = payment.amount_msat - earned_msat
        if unearned_msat > 0:
            refund = await self._refund_after_spend(payment, unearned_msat, reason)
            if refund is not None and isinstance(result.body, dict):
                result = replace(result, body={**result.body, field: refund})
        return result

    async def _submit_job(
        self, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> ServiceResult:
        async def work(report: Callable[[float, str], None]) -> dict[str, Any]:
            ctx = self.context(payment.payment_id, progress=report)
            result = await self._run_handler(payment, spec, params, price_msat, ctx)
            if isinstance(result.body, dict):
                return result.body
            return {"content": result.body if isinstance(result.body, str) else None}

        async def refund(reason: str) -> dict[str, Any] | None:
            issued = await self._refund_after_spend(payment, payment.amount_msat, reason)
            if issued is None:  # already refunded (e.g. on cancellation): show that refund
                earlier = await self.store.refunds_for_payment(payment.payment_id)
                if earlier:
                    issued = refund_object(earlier[-1], self.settings.public_base_url)
            return issued

        job = await self.jobs.submit(
            payment_id=payment.payment_id,
            service=spec.slug,
            job_type=spec.job_type or spec.slug,
            work=work,
            refund_on_failure=refund,
        )
        return ServiceResult(
            self.jobs.accepted_body(job), status=202, headers=self.jobs.accepted_headers(job)
        )

    async def refund_orphaned_job(self, job: Job) -> dict[str, Any] | None:
        payment = await self.store.get_payment(job.payment_id)
        if payment is None:
            return None
        return await self._refund_after_spend(payment, payment.amount_msat, "job lost in restart")

    async def _refund_after_spend(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        return await self.refunds.refund_spent(payment, amount_msat, reason[:500])
