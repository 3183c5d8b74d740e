"""AI calls from payment to refund: the ``ai-call`` handler, the confirmation of a
``pending_confirm`` call, the watch of each placed call, the redial, the billing and the
settlement of the deposit.

The life of one call (``ai_calls`` rows, satsgate/store/ai_calls.py; every move one
conditional UPDATE):

1. The paid request is screened (satsgate/services/comms/screening.py: a flagged task is held by
   the gate, nothing is placed). When the task lacks what the call cannot do without
   (satsgate/services/comms/ai_call_prompt.py) the call waits in ``pending_confirm`` with
   clarification questions and a ``session_id``; ``confirm_ai_call`` lets it proceed once
   (a second confirmation finds nothing). Unconfirmed after ``CONFIRM_TTL_S`` it expires
   and the deposit is refunded in full.
2. ``placing`` -> ``calling``: the platform places the call (``ai_call`` engine). A
   placement that fails refunds the whole payment (in the error's ``refund``).
3. The call is watched by the instance that placed it: its platform's verified webhooks
   wake the watch, which reads the call (``get_call``); without webhooks it is polled
   every ``poll_interval_s``. A webhook that reaches another instance (several instances
   on PostgreSQL) is announced to every instance, and wakes the watch where it runs.
4. When it ends: the connected time is billed by the started minute (a connected attempt
   at least one minute). The Limits table's redial: one redial ``redial_delay_s`` (the
   spec's 2 minutes) later, on the deposit's unused minutes, when nobody answered, the
   line was busy, a voicemail answered (and no message was left) or the call dropped
   within 30 s before the person spoke; never after the person spoke and hung up, asked
   not to be called again (then the number goes on the do-not-contact list), or a
   voicemail message was left; none when no minute is left.
5. At the end: ``ended`` (or ``failed`` when nothing ever connected and the platform
   failed) with transcript and results; the deposit is settled once
   (satsgate/payouts/deposits.py): billed ``max(minimum, minutes x rate)`` when something
   connected, nothing otherwise; the rest to ``refund_address`` or claimable
   (``POST /api/claim-refund``).

Calls in flight survive a restart: :meth:`AiCallRunner.resume` takes up every watch, every
scheduled redial and every overdue confirmation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import secrets
import time
from collections.abc import Mapping
from typing import Any

from satsgate.cluster.events import ClusterEvents
from satsgate.config.settings import Settings
from satsgate.domain.do_not_contact import asks_not_to_be_contacted, opt_out
from satsgate.domain.screening_rules import check_text
from satsgate.engines import EngineError, Engines
from satsgate.engines.ai_call import AiCallEngine, AiCallReport, AiCallRequest
from satsgate.engines.registry import (
    UPSTREAM_MOVED,
    Binding,
    read_upstream_moved,
    upstream_moved,
)
from satsgate.errors import ApiError, ErrorCode
from satsgate.payouts.deposits import DepositSettler, Settlement
from satsgate.services.base import DeskKey, ServiceContext, ServiceResult
from satsgate.services.catalog.pricing import (
    AI_CALL_MIN_SATS,
    MSAT,
    ai_call_msat,
    ai_call_per_minute_msat,
)
from satsgate.services.comms import ai_call_prompt
from satsgate.services.comms.ai_calls import AiCallRecord, poll_url
from satsgate.store import RefundStatus, Store
from satsgate.store.ai_calls import AiCallRow

log = logging.getLogger(__name__)

ENGINE = "ai_call"
CONFIRM_TTL_S = 30 * 60
REDIAL_DELAY_S = 120.0  # the Limits table: one redial 2 minutes later
POLL_INTERVAL_S = 10.0
# How long an ended call waits for the platform's analysis (summary, success) to come.
ANALYSIS_WAIT_S = 30.0
DROP_WITHIN_S = 30.0  # a call that drops within 30 s (before the person spoke) is redialed
# A call the platform never reports as ended is given up this long after its deadline.
GIVE_UP_AFTER_S = 15 * 60
MIN_BILL_MSAT = AI_CALL_MIN_SATS * MSAT

ACTIVE = ("placing", "calling", "redial_scheduled")
REDIAL_OUTCOMES = ("no_answer", "busy", "voicemail")


def _provider_name(binding: Binding) -> str:
    """The operator's name of the provider behind an ai_call binding."""
    return binding.provider.name if binding.provider is not None else binding.label


def _now() -> int:
    return int(time.time())


class AiCallRunner:
    """The node's AI calls (the :class:`satsgate.services.comms.ai_calls.AiCallRecords` seam, and
    the handler's, the watches' and the claims' work)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        engines: Engines,
        deposits: DepositSettler,
        events: ClusterEvents | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._engines = engines
        self._deposits = deposits
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}  # by the platform's call id
        self._closing = asyncio.Event()
        # When each redial scheduled by this process is due, to the sub-second (next_at in
        # the row is whole seconds: what a restart goes by).
        self._redial_due: dict[str, float] = {}
        self._placing: set[str] = set()  # calls whose placement this process is making
        self._events = events
        for binding in engines.bindings(ENGINE):
            # Looked up on the class: a method the adapter defines, not what a proxy answers.
            if callable(getattr(type(binding.engine), "on_update", None)):
                updated = functools.partial(self._on_update, _provider_name(binding))
                binding.engine.on_update(updated)  # type: ignore[attr-defined]
        if events is not None:
            events.on(UPSTREAM_MOVED, self._heard)

    # -- the engine and its timing ------------------------------------------------------

    def _binding_options(
        self, provider: str | None
    ) -> tuple[AiCallEngine | None, Mapping[str, Any]]:
        for binding in self._engines.bindings(ENGINE):
            if provider is None or _provider_name(binding) == provider:
                options = binding.provider.options if binding.provider is not None else {}
                engine: AiCallEngine = binding.engine  # type: ignore[assignment]
                return engine, options
        return None, {}

    def _timing(self, provider: str | None, key: str, default: float) -> float:
        _, options = self._binding_options(provider)
        value = options.get(key, default)
        return float(value) if isinstance(value, int | float) and value >= 0 else default

    def _on_update(self, provider: str, provider_call_id: str) -> None:
        """A verified webhook says the call moved: its watch reads it now, here or (the
        webhook announced: engines.registry.UPSTREAM_MOVED) at the instance watching it."""
        event = self._wake.get(provider_call_id)
        if event is not None:
            event.set()
        elif self._events is not None:
            self._events.publish(UPSTREAM_MOVED, upstream_moved(provider, provider_call_id))

    def _heard(self, payload: str) -> None:
        """Another instance heard a webhook: this instance's watch of the call, if any,
        reads it now."""
        moved = read_upstream_moved(payload)
        event = self._wake.get(moved[1]) if moved is not None else None
        if event is not None:
            event.set()

    # -- the paid call ------------------------------------------------------------------

    async def start(self, ctx: ServiceContext, request: dict[str, Any]) -> ServiceResult:
        """The handler's work after the screen: pending_confirm with questions, or the
        call placed. Run again for the same payment (a held call released), it answers
        the call made the first time."""
        payment_id = ctx.call_id
        if await self._store.payments.get(payment_id) is None:
            # A call paid from a payment session's balance (payments/sessions.py) has no
            # deposit payment of its own to settle: refused, and the session credited.
            raise ApiError(
                ErrorCode.PAYMENT_INVALID,
                "An AI call is paid by a deposit of its own (L402 or the charge intent), not "
                "from a session's balance: its unused minutes are refunded when it ends. "
                "Nothing was charged.",
            )
        earlier = await self._store.ai_calls.by_payment(payment_id)
        if earlier is not None:
            return ServiceResult(await self._body(earlier))
        phone, minutes = str(request["phone_number"]), int(request["duration_minutes"])
        deposit = ai_call_msat(ctx.rate_book, phone, minutes)
        per_minute = min(ai_call_per_minute_msat(ctx.rate_book, phone), deposit // minutes)
        questions = await ai_call_prompt.clarification_questions(ctx, request)
        now = _now()
        row = AiCallRow(
            call_id=f"ac_{secrets.token_hex(12)}",
            payment_id=payment_id,
            status="pending_confirm" if questions else "placing",
            deposit_msat=deposit,
            minutes=minutes,
            per_minute_msat=per_minute,
            created_at=now,
            updated_at=now,
            session_id=f"acs_{secrets.token_hex(16)}" if questions else None,
            request=request,
            questions=questions or None,
            next_at=now + CONFIRM_TTL_S if questions else None,
            refund_address=request.get("refund_address"),
        )
        row, created = await self._store.ai_calls.create(row)
        if not created or questions:
            return ServiceResult(await self._body(row))
        try:
            row = await self._place(row, attempt=1)
        except EngineError as exc:
            # The gate refunds the whole payment and puts the refund in the error.
            await self._store.ai_calls.move(
                row.call_id, ("placing",), {"status": "failed", "outcome": "failed"}, _now()
            )
            log.warning("ai call %s: placement failed: %s", row.call_id, exc.code)
            raise
        self._spawn(row.call_id)
        return ServiceResult(await self._body(row))

    async def _place(self, row: AiCallRow, *, attempt: int) -> AiCallRow:
        """Place attempt ``attempt`` of a ``placing`` call: ``calling`` with the
        platform's call id. The first attempt may fall back along the configured
        platforms; a redial goes to the platform of the first. Raises EngineError."""
        self._placing.add(row.call_id)
        try:
            return await self._place_now(row, attempt)
        finally:
            self._placing.discard(row.call_id)

    async def _place_now(self, row: AiCallRow, attempt: int) -> AiCallRow:
        request = row.request or {}
        used_minutes = sum(int(a.get("billed_minutes", 0)) for a in row.attempts)
        call = AiCallRequest(
            to_number=str(request.get("phone_number")),
            prompt=ai_call_prompt.build_prompt(request, row.answers),
            begin_message=ai_call_prompt.begin_message(request),
            language=str(request.get("language") or "en-US"),
            voice=request.get("voice"),
            voicemail_message=ai_call_prompt.voicemail_message(request),
            max_duration_s=max(1, row.minutes - used_minutes) * 60,
            reference=f"{row.call_id}#{attempt}",
        )
        placed_by: list[str] = []
        if attempt == 1:

            async def place(engine: AiCallEngine, _model: str | None) -> AiCallReport:
                report = await engine.place_call(call)
                placed_by.append(self._provider_of(engine))
                return report

            report = await self._engines.run(ENGINE, AiCallEngine, place)
        else:
            engine, _ = self._binding_options(row.provider)
            if engine is None:
                raise EngineError(
                    ErrorCode.SERVICE_ERROR, "The call service is no longer configured."
                )
            report = await engine.place_call(call)
            placed_by.append(row.provider or "")
        if not report.provider_call_id:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The call service gave no call id.", may_fall_back=False
            )
        changes = {
            "status": "calling",
            "attempt": attempt,
            "provider": placed_by[0],
            "provider_call_id": report.provider_call_id,
            "next_at": None,
        }
        if not await self._store.ai_calls.move(row.call_id, ("placing",), changes, _now()):
            log.error("ai call %s: placed, but its row moved meanwhile", row.call_id)
        fresh = await self._store.ai_calls.get(row.call_id)
        assert fresh is not None
        log.info("ai call %s: attempt %d placed", row.call_id, attempt)
        return fresh

    def _provider_of(self, engine: object) -> str:
        for binding in self._engines.bindings(ENGINE):
            if binding.engine is engine:
                return binding.provider.name if binding.provider is not None else binding.label
        return ""

    # -- confirmation and poll (the AiCallRecords seam) ------------------------------------

    async def record(self, call_id: str) -> AiCallRecord | None:
        row = await self._store.ai_calls.get(call_id)
        return None if row is None else await self._record(row)

    async def confirm(self, session_id: str, answers: Mapping[str, Any]) -> AiCallRecord | None:
        row = await self._store.ai_calls.confirm(session_id, answers, "placing", _now())
        if row is None:
            return None
        text = "\n".join(f"{q}: {a}" for q, a in (answers or {}).items())
        if text and check_text(text):
            # Answers the screen flags: the call is not placed and the deposit goes back.
            await self._finish(row, refused=True)
            fresh = await self._store.ai_calls.get(row.call_id)
            assert fresh is not None
            return await self._record(fresh)
        try:
            row = await self._place(row, attempt=1)
        except EngineError as exc:
            await self._finish(row, placement_failed=True)
            settled = await self._deposits.get(row.payment_id)
            refund = (
                settled.refund
                if settled is not None and settled.refund_status == "claimable"
                else None
            )
            raise exc.api_error(refund=refund) from exc
        self._spawn(row.call_id)
        return await self._record(row)

    # -- the watch ----------------------------------------------------------------------

    def _spawn(self, call_id: str) -> None:
        if call_id in self._watches or call_id in self._placing or self._closing.is_set():
            return
        task = asyncio.create_task(self._watch(call_id), name=f"ai-call-{call_id}")
        self._watches[call_id] = task
        task.add_done_callback(lambda _t: self._watches.pop(call_id, None))

    async def _watch(self, call_id: str) -> None:
        try:
            while not self._closing.is_set():
                row = await self._store.ai_calls.get(call_id)
                if row is None or row.status not in ACTIVE:
                    return
                if row.status == "redial_scheduled":
                    await self._redial(row)
                elif row.status == "placing" and call_id in self._placing:
                    return  # the placement under way spawns the watch when it is done
                elif row.status == "placing":
                    # A restart came during a placement: whether the call went out is
                    # unknown; the payer is not charged for it.
                    await self._finish(row, placement_failed=True)
                else:
                    report = await self._until_ended(row)
                    if report is None:
                        return  # closing
                    await self._attempt_ended(row, report)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ai call %s: the watch failed; it resumes at the next start", call_id)

    async def _sleep(self, seconds: float, event: asyncio.Event | None = None) -> None:
        waiters = [asyncio.ensure_future(self._closing.wait())]
        if event is not None:
            waiters.append(asyncio.ensure_future(event.wait()))
        try:
            await asyncio.wait(waiters, timeout=max(0.0, seconds), return_when="FIRST_COMPLETED")
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _until_ended(self, row: AiCallRow) -> AiCallReport | None:
        engine, _ = self._binding_options(row.provider)
        assert row.provider_call_id is not None
        if engine is None:
            return AiCallReport(row.provider_call_id, "ended", "failed", "not configured")
        interval = self._timing(row.provider, "poll_interval_s", POLL_INTERVAL_S)
        event = self._wake.setdefault(row.provider_call_id, asyncio.Event())
        deadline = time.time() + row.minutes * 60 + GIVE_UP_AFTER_S
        last: AiCallReport | None = None
        # A burst of webhooks (live transcript updates) reads the call at most this often.
        min_gap = min(interval, 1.0)
        fetched_at = 0.0
        analysis_by: float | None = None  # ended, waiting for the analysis until then
        try:
            while not self._closing.is_set():
                gap = min_gap - (time.time() - fetched_at)
                if gap > 0:
                    await self._sleep(gap)
                event.clear()
                fetched_at = time.time()
                try:
                    report = await engine.get_call(row.provider_call_id)
                    last = report
                    if report.ended:
                        if report.analysed:
                            return report
                        if analysis_by is None:
                            wait = self._timing(row.provider, "analysis_wait_s", ANALYSIS_WAIT_S)
                            analysis_by = time.time() + wait
                        if time.time() >= analysis_by:
                            return report
                except EngineError as exc:
                    log.info("ai call %s: status not read (%s)", row.call_id, exc.code)
                if time.time() > deadline:
                    # Seen connected: the whole deposit's time may have been used (the
                    # platform charges it); never seen connected: nothing is billed.
                    talked = last is not None and last.state == "in_progress"
                    log.error("ai call %s: never reported ended; given up", row.call_id)
                    return AiCallReport(
                        row.provider_call_id,
                        "ended",
                        "completed" if talked else "failed",
                        "never reported ended",
                        connected_s=float(row.minutes * 60) if talked else 0.0,
                    )
                await self._sleep(interval, event)
            return None
        finally:
            self._wake.pop(row.provider_call_id, None)

    async def _attempt_ended(self, row: AiCallRow, report: AiCallReport) -> None:
        request = row.request or {}
        outcome = report.outcome or "failed"
        connected = report.connected_s > 0 and outcome not in ("no_answer", "busy")
        if outcome == "voicemail" and request.get("voicemail") == "message":
            outcome = "voicemail_left"
        billed = max(1, math.ceil(report.connected_s / 60)) if connected else 0
        person_text = report.person_text()
        opted_out = bool(person_text) and asks_not_to_be_contacted(person_text)
        if opted_out:
            await self._opt_out(row, str(request.get("phone_number")))
        dropped = (
            connected
            and report.connected_s < DROP_WITHIN_S
            and not report.person_spoke
            and outcome in ("completed", "failed")
        )
        attempts = [
            *row.attempts,
            {
                "attempt": row.attempt,
                "outcome": "dropped" if dropped else outcome,
                "connected_seconds": round(report.connected_s, 1),
                "billed_minutes": billed,
                "person_spoke": report.person_spoke,
            },
        ]
        used_minutes = sum(int(a["billed_minutes"]) for a in attempts)
        transcript = _joined_transcript(row.transcript, report.transcript, row.attempt)
        results = {
            "outcome": "opted_out" if opted_out else ("dropped" if dropped else outcome),
            "summary": report.summary,
            "successful": report.successful,
            "data": dict(report.data),
        }
        redial = (
            row.attempt == 1
            and row.minutes - used_minutes > 0
            and not opted_out
            and (outcome in REDIAL_OUTCOMES or dropped)
        )
        log.info(
            "ai call %s: attempt %d ended (%s, %s, %.0f s connected)%s",
            row.call_id,
            row.attempt,
            outcome,
            report.ended_reason,
            report.connected_s,
            "; redial scheduled" if redial else "",
        )
        if redial:
            delay = self._timing(row.provider, "redial_delay_s", REDIAL_DELAY_S)
            self._redial_due[row.call_id] = time.time() + delay
            moved = await self._store.ai_calls.move(
                row.call_id,
                ("calling",),
                {
                    "status": "redial_scheduled",
                    "attempts": attempts,
                    "next_at": _now() + math.ceil(delay),
                    "transcript": transcript,
                    "results": results,
                },
                _now(),
            )
            if not moved:
                self._redial_due.pop(row.call_id, None)
            return
        await self._finish(
            row, attempts=attempts, transcript=transcript, results=results, opted_out=opted_out
        )

    async def _redial(self, row: AiCallRow) -> None:
        due = self._redial_due.pop(row.call_id, None)
        wait = (float(row.next_at or 0) if due is None else due) - time.time()
        if wait > 0:
            await self._sleep(wait)
            if self._closing.is_set():
                return
        if not await self._store.ai_calls.move(
            row.call_id, ("redial_scheduled",), {"status": "placing"}, _now()
        ):
            return
        try:
            await self._place(row, attempt=2)
        except EngineError as exc:
            log.warning("ai call %s: the redial could not be placed (%s)", row.call_id, exc.code)
            await self._finish(row, attempts=row.attempts, transcript=row.transcript,
                               results=row.results)  # fmt: skip

    async def _opt_out(self, row: AiCallRow, number: str) -> None:
        engine, _ = self._binding_options(row.provider)
        opt_outs = getattr(engine, "opt_outs", None)
        if opt_outs is None or not callable(getattr(opt_outs, "add", None)):
            log.error("ai call %s: the person opted out but no list is wired", row.call_id)
            return
        try:
            await opt_out(opt_outs, number, source="ai-call")
        except ValueError:
            log.warning("ai call %s: opt-out of an unreadable number", row.call_id)

    async def _finish(
        self,
        row: AiCallRow,
        *,
        attempts: list[dict[str, Any]] | None = None,
        transcript: str | None = None,
        results: Mapping[str, Any] | None = None,
        opted_out: bool = False,
        placement_failed: bool = False,
        refused: bool = False,
        expired: bool = False,
    ) -> Settlement | None:
        """The call's end, once (from whichever active state it is in), and the
        settlement of its deposit."""
        attempts = list(attempts if attempts is not None else row.attempts)
        billed_minutes = sum(int(a.get("billed_minutes", 0)) for a in attempts)
        body = dict(results or {})
        if refused:
            status, outcome = "failed", "refused"
            body["outcome"] = outcome
        elif expired:
            status, outcome = "expired", "expired"
            body["outcome"] = outcome
        elif billed_minutes == 0 and (placement_failed or all(
            a.get("outcome") == "failed" for a in attempts
        )):  # fmt: skip
            status, outcome = "failed", "failed"
            body["outcome"] = body.get("outcome") or "failed"
        else:
            status, outcome = "ended", str(body.get("outcome") or "completed")
        body.update(
            {
                "attempts": attempts,
                "billed_minutes": billed_minutes,
                "opted_out": opted_out,
            }
        )
        body.setdefault("outcome", outcome)
        # The end and the settlement go together even when the watch is cancelled (a
        # shutdown); a crash between them is repaired by sweep().
        return await asyncio.shield(self._end_and_settle(row, status, attempts, transcript, body))

    async def _end_and_settle(
        self,
        row: AiCallRow,
        status: str,
        attempts: list[dict[str, Any]],
        transcript: str | None,
        body: dict[str, Any],
    ) -> Settlement | None:
        billed_minutes = int(body["billed_minutes"])
        moved = await self._store.ai_calls.move(
            row.call_id,
            (*ACTIVE, "pending_confirm"),
            {
                "status": status,
                "outcome": body["outcome"],
                "attempts": attempts,
                "transcript": transcript,
                "results": body,
                "next_at": None,
            },
            _now(),
        )
        if not moved:
            return await self._deposits.get(row.payment_id)
        settled = await self._settle(row, attempts, str(body["outcome"]))
        used = 0 if settled is None else settled.used_msat
        log.info(
            "ai call %s: %s, %d minute(s) billed, %d msat used",
            row.call_id,
            body["outcome"],
            billed_minutes,
            used,
        )
        return settled

    async def _settle(
        self, row: AiCallRow, attempts: list[dict[str, Any]], outcome: str
    ) -> Settlement | None:
        """Bill the started minutes (at least the spec's minimum when anything connected,
        nothing otherwise) and refund the rest of the deposit, once."""
        billed_minutes = sum(int(a.get("billed_minutes", 0)) for a in attempts)
        used = 0
        if billed_minutes > 0:
            used = min(row.deposit_msat, max(MIN_BILL_MSAT, billed_minutes * row.per_minute_msat))
        # The ledger groups refunds by their reason: no ids in it.
        reason = f"AI call: {billed_minutes} of {row.minutes} minute(s) used ({outcome})"
        # The payout to a Lightning address runs in the settler's own tasks (awaited at
        # shutdown); the settlement itself is written before this returns.
        return await self._deposits.settle(
            row.payment_id, used, refund_address=row.refund_address, reason=reason, wait=False
        )

    # -- maintenance --------------------------------------------------------------------

    async def resume(self, gone: str) -> int:
        """Take up the watch of every call in flight of the gone instance ``gone`` (each
        taken by one instance); how many were taken up here."""
        count = 0
        for row in await self._store.ai_calls.in_status(ACTIVE, served_by=gone):
            if await self._store.payments.adopt(row.payment_id, gone):
                self._spawn(row.call_id)
                count += 1
        return count

    async def sweep(self) -> int:
        """Expire confirmations past their deadline (the deposit refunded in full) and
        settle ended calls whose settlement is missing. How many confirmations expired."""
        expired = 0
        now = _now()
        for row in await self._store.ai_calls.in_status(("pending_confirm",)):
            if row.next_at is not None and row.next_at <= now:
                await self._finish(row, expired=True)
                expired += 1
        for row in await self._store.ai_calls.unsettled():
            if row.status == "failed" and not row.attempts and row.results is None:
                continue  # refunded with its placement's error by the gate
            log.warning("ai call %s: ended without its settlement; settling now", row.call_id)
            await self._settle(row, row.attempts, str(row.outcome or "ended"))
        return expired

    async def rewatch(self) -> int:
        """Restart the watch of any call of this instance's that stopped (each instance
        watches only the calls it serves: the instance placing a call owns it, see
        ``AiCallRepository.confirm``); how many calls are in flight here."""
        rows = await self._store.ai_calls.in_status(ACTIVE, self._store.instance_id)
        for row in rows:
            self._spawn(row.call_id)
        return len(rows)

    async def close(self) -> None:
        """Shutdown: the watches stop (the calls stay in flight, resumed at the next
        start)."""
        self._closing.set()
        tasks = list(self._watches.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- answers ------------------------------------------------------------------------

    async def _refund_view(self, row: AiCallRow) -> dict[str, Any] | None:
        settled = await self._deposits.get(row.payment_id)
        if settled is not None:
            return settled.body()
        if row.status == "failed":  # refunded by the gate with the placement's error
            refunds = await self._store.refunds.for_payment(row.payment_id)
            if refunds:
                status = {
                    RefundStatus.OPEN: "claimable",
                    RefundStatus.CLAIMING: "claiming",
                    RefundStatus.PAID: "paid",
                    RefundStatus.EXPIRED: "expired",
                }[refunds[-1].status]
                return {"refundableSats": refunds[-1].amount_msat // 1000, "refund_status": status}
        return None

    async def _record(self, row: AiCallRow) -> AiCallRecord:
        refund = await self._refund_view(row)
        results: dict[str, Any] | None = None
        if row.status not in ("pending_confirm", "placing"):
            results = dict(row.results or {})
            results.setdefault("attempts", row.attempts)
            results["depositSats"] = row.deposit_msat // 1000
            results["perMinuteSats"] = row.per_minute_msat / 1000
            if refund is not None:
                results.update({k: v for k, v in refund.items() if k != "refund_status"})
        extra: dict[str, Any] = {}
        if row.status == "pending_confirm":
            extra = {
                "session_id": row.session_id,
                "confirm_before": row.next_at,
                "depositSats": row.deposit_msat // 1000,
            }
        if row.status == "redial_scheduled":
            extra["redial_at"] = row.next_at
        return AiCallRecord(
            call_id=row.call_id,
            status=row.status,
            questions=tuple(row.questions or ()) if row.status == "pending_confirm" else (),
            transcript=row.transcript,
            results=results,
            refund_status=None if refund is None else str(refund["refund_status"]),
            extra=extra,
        )

    async def _body(self, row: AiCallRow) -> dict[str, Any]:
        return (await self._record(row)).body(self._settings.public_base_url)

    async def claim(
        self, call_id: str | None, payment_id: str | None
    ) -> tuple[AiCallRow, Settlement | None]:
        """The call (by its id or its payment's) and its settlement, for claim-refund."""
        row = None
        if call_id is not None:
            row = await self._store.ai_calls.get(call_id)
        elif payment_id is not None:
            row = await self._store.ai_calls.by_payment(payment_id)
        if row is None:
            raise ApiError(ErrorCode.AI_CALL_NOT_FOUND, "No AI call found for this id.")
        return row, await self._deposits.get(row.payment_id)

    def poll_url(self, call_id: str) -> str:
        return poll_url(self._settings.public_base_url, call_id)


# The AI calls in a handler's context: ``ctx.desk(AI_CALL_RUNNER)``.
AI_CALL_RUNNER: DeskKey[AiCallRunner] = DeskKey("AI calls")


def _joined_transcript(earlier: str | None, latest: str | None, attempt: int) -> str | None:
    if not latest:
        return earlier
    if not earlier:
        return latest if attempt == 1 else f"[redial]\n{latest}"
    return f"{earlier}\n\n[redial]\n{latest}"
