"""satsgate's service on its own thread and event loop, driven from pyln's dispatch thread.

pyln's ``Plugin.run()`` owns the main thread (it blocks reading stdin), so
the aiohttp service lives on a daemon thread with its own loop. The dispatch
thread only hands coroutines over (:meth:`ServiceThread.submit`) and never
waits on them, except during ``init`` and ``shutdown`` where lightningd
expects the plugin to take its time (60 s and 30 s limits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from satsgate.backends import make_backend
from satsgate.config.settings import Settings
from satsgate.payments.refund_request import NotRefundable, operator_refund
from satsgate.server import eventloop
from satsgate.server.app import GATE, REFUNDS, SETTINGS
from satsgate.server.runner import ServiceHandle, start_service
from satsgate.store import PaymentStatus

T = TypeVar("T")


class OperatorError(Exception):
    """An operator command that cannot be carried out; the message says why."""


class ServiceThread:
    """One satsgate service against lightningd's socket, on a thread of its own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings  # backend "cln", cln_rpc lightningd's socket
        self.handle: ServiceHandle | None = None
        self._loop = eventloop.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="satsgate-service", daemon=True
        )

    def start(self, timeout_s: float) -> str:
        """Start listening; returns the service URL. Raises whatever start-up raised."""
        self._thread.start()
        backend = make_backend(self.settings)
        try:
            self.handle = self.submit(start_service(self.settings, backend)).result(timeout_s)
        except BaseException:
            self._stop_loop(5.0)
            raise
        return self.handle.url

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the service loop; safe from any thread."""

        async def run() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def stop(self, timeout_s: float) -> bool:
        """Stop the server, the settlement stream, the backend and the store.

        Returns False if that did not finish within ``timeout_s`` (the caller
        exits anyway: every money-moving write is one SQLite transaction).
        """
        finished = True
        if self.handle is not None:
            try:
                self.submit(self.handle.stop()).result(timeout_s)
            except concurrent.futures.TimeoutError:
                finished = False
            self.handle = None
        self._stop_loop(2.0)
        return finished

    def _stop_loop(self, join_s: float) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(join_s)

    # -- operator commands (run on the service loop) ----------------------------------------

    async def status(self) -> dict[str, Any]:
        handle = self._running()
        stats = await handle.store.ledger.stats()
        return {
            "listening": handle.url,
            "network": handle.app[SETTINGS].network,
            "data_dir": str(handle.app[SETTINGS].data_dir),
            **stats,
        }

    async def refund(self, payment_id: str) -> dict[str, Any]:
        """Refund a paid payment in full, or what is left of a spent one, as an
        LNURL-withdraw; a hold invoice not yet decided is canceled instead
        (satsgate.payments.refund_request.operator_refund)."""
        handle = self._running()
        store = handle.store
        payment = await store.payments.get(payment_id)
        if payment is None:
            raise OperatorError(f"no payment {payment_id}")
        if payment.status is PaymentStatus.UNPAID:
            raise OperatorError(f"payment {payment_id} is {payment.status}: nothing to refund")
        try:
            done = await operator_refund(
                handle.app[GATE], handle.app[REFUNDS], store.sessions, payment
            )
        except NotRefundable as refused:
            raise OperatorError(str(refused)) from None
        return {"payment_id": payment_id, **done}

    async def ledger(self) -> dict[str, Any]:
        """The ledger: received = earned + refunded + held + open, per day and in total."""
        from satsgate.operator import operator_report

        handle = self._running()
        report = await operator_report(handle.store, None)
        report["equation"] = "received = earned + refunded + held + open (msat)"
        return report

    def operator_token(self, rotate: bool = False) -> dict[str, Any]:
        """The operator token for /operator and /api/operator/ledger; ``rotate``: a new one
        first (the old token and every dashboard session end at once)."""
        from satsgate.operator import ensure_operator_token, rotate_operator_token, token_path

        handle = self._running()
        data_dir = handle.app[SETTINGS].data_dir
        return {
            "operator_token": (
                rotate_operator_token(data_dir) if rotate else ensure_operator_token(data_dir)
            ),
            "file": str(token_path(data_dir)),
            "dashboard": f"{handle.app[SETTINGS].public_base_url}/operator",
        }

    async def hold(self, action: str, target: str) -> dict[str, Any]:
        """Held communications: list, release ID, refund ID; the do-not-contact list:
        dnc-list, dnc-add ADDRESS, dnc-remove ADDRESS."""
        from satsgate.appkeys import HELD_REQUESTS
        from satsgate.domain.addresses import normalise_address
        from satsgate.outreach.held_requests import HoldError
        from satsgate.web.operator_held import hold_document

        handle = self._running()
        desk = handle.app[HELD_REQUESTS]
        try:
            if action == "list":
                holds = await desk.listing()
                return {"holds": [hold_document(h, desk.appeal_url(h.hold_id)) for h in holds]}
            if action in ("release", "refund") and target:
                if action == "release":
                    return (await desk.release(target, by="operator")).as_dict()
                return (await desk.refund(target, by="operator")).as_dict()
            repo = handle.store.do_not_contact
            if action == "dnc-list":
                return {"entries": await repo.listing()}
            if action in ("dnc-add", "dnc-remove") and target:
                address = normalise_address(target)
                if action == "dnc-add":
                    return {"address": address, "added": await repo.add(address, "operator")}
                return {"address": address, "removed": await repo.remove(address)}
        except (HoldError, ValueError) as exc:
            raise OperatorError(str(exc)) from None
        raise OperatorError(
            "usage: satsgate-hold list | release ID | refund ID | dnc-list | dnc-add ADDRESS"
            " | dnc-remove ADDRESS"
        )

    def _running(self) -> ServiceHandle:
        if self.handle is None:
            raise OperatorError("satsgate is not running")
        return self.handle


def reply_when_done(
    fut: concurrent.futures.Future[T],
    on_result: Callable[[T], None],
    on_error: Callable[[BaseException], None],
) -> None:
    """Call back from the service thread once ``fut`` settles."""

    def done(f: concurrent.futures.Future[T]) -> None:
        exc = f.exception()
        if exc is not None:
            on_error(exc)
        else:
            on_result(f.result())

    fut.add_done_callback(done)
