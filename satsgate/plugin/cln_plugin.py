"""The Core Lightning plugin: lightningd starts satsgate, which sells calls from inside the node.

lightningd runs this with ``LIGHTNINGD_PLUGIN=1`` and talks JSON-RPC over its
stdin/stdout. The flow:

- ``getmanifest``: the options in :data:`satsgate.plugin.options.OPTIONS`, the
  commands ``satsgate-status``, ``satsgate-refund``, ``satsgate-ledger``,
  ``satsgate-operator-token`` and ``satsgate-hold``, the ``shutdown`` subscription.
- ``init``: Settings from the options, the config file and the node's
  network; the service starts on its own thread against ``<lightning-dir>/<rpc-file>``.
  Any problem (network mismatch, port taken, unreadable config) answers
  ``{"disable": reason}`` and is logged; lightningd then stops the plugin.
- ``shutdown`` (or stdin closing, when lightningd is gone): stop the service
  within 20 s and exit; lightningd kills plugins after 30 s.

File descriptor 1 is lightningd's pipe. Before anything else runs, the pipe
is moved to a private, non-inheritable descriptor that only pyln writes to, and
fd 1 is pointed at stderr: a stray write from a library or a child process
lands in lightningd's log instead of corrupting the protocol.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import IO, TYPE_CHECKING, Any

from pyln.client import Plugin, RpcException

from satsgate.procguard import private_umask

from .options import OPTIONS, PluginConfigError, settings_from_init

if TYPE_CHECKING:  # the app's imports happen at init, keeping getmanifest fast
    from .service import ServiceThread

START_TIMEOUT_S = 45.0  # lightningd's init limit is 60 s
STOP_TIMEOUT_S = 20.0  # lightningd kills a plugin 30 s after the shutdown notification

log = logging.getLogger("satsgate.plugin")


def _reserve_stdout() -> IO[str]:
    """Keep lightningd's pipe for pyln alone; fd 1 becomes a copy of stderr."""
    protocol_fd = os.dup(1)  # non-inheritable (PEP 446): child processes never get it
    os.dup2(2, 1)
    return os.fdopen(protocol_fd, "w", encoding="utf-8")


class SatsgatePlugin:
    """The pyln Plugin with satsgate's options, commands and lifecycle."""

    def __init__(self, protocol_out: IO[str] | None = None) -> None:
        # pyln turns sys.stdout/sys.stderr writes into log notifications.
        self.plugin: Any = Plugin()
        if protocol_out is not None:
            self.plugin.stdout = protocol_out
        self.service: ServiceThread | None = None  # set once init succeeded
        for opt in OPTIONS:
            self.plugin.add_option(opt.name, opt.default, opt.description, opt_type=opt.opt_type)
        self.plugin.init()(self._make_init())
        # pyln reads a method's description from its docstring.
        for name, func in (
            ("satsgate-status", self._make_status()),
            ("satsgate-refund", self._make_refund()),
            ("satsgate-ledger", self._make_ledger()),
            ("satsgate-operator-token", self._make_operator_token()),
            ("satsgate-hold", self._make_hold()),
        ):
            self.plugin.add_method(name, func, background=True, description=func.__doc__)
        self.plugin.add_subscription("shutdown", self._make_shutdown())

    def run(self) -> None:
        self.plugin.run()
        # stdin closed: lightningd is gone without a shutdown notification.
        self.stop_and_exit()

    def stop_and_exit(self) -> None:
        if self.service is not None:
            if not self.service.stop(STOP_TIMEOUT_S):
                log.warning("satsgate did not stop within %.0f s; exiting anyway", STOP_TIMEOUT_S)
            self.service = None
            log.info("satsgate stopped")
        for stream in (self.plugin.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        # os._exit: threads still inside a blocking node call must not hold the
        # process past lightningd's 30 s; the store is closed (or crash-safe).
        os._exit(0)

    def _disable(self, reason: str) -> dict[str, str]:
        log.error("satsgate disabled: %s", reason)
        return {"disable": reason}

    # pyln binds parameters by name and shows them as usage: plain functions, not methods.

    def _make_init(self) -> Any:
        def init(
            options: dict[str, Any], configuration: dict[str, Any], plugin: Any, **kwargs: Any
        ) -> dict[str, str] | None:
            try:
                cfg = settings_from_init(options, configuration)
            except PluginConfigError as exc:
                return self._disable(str(exc))
            from satsgate.server.runner import freeze_startup_heap

            from .service import ServiceThread

            service = ServiceThread(cfg.settings)
            try:
                url = service.start(START_TIMEOUT_S)
            except Exception as exc:
                return self._disable(f"cannot start satsgate: {exc}")
            self.service = service
            freeze_startup_heap()
            log.info(
                "satsgate started: listening on %s, public address %s (network %s,"
                " data %s); operator dashboard at %s/operator (token: lightning-cli"
                " satsgate-operator-token)",
                url,
                cfg.settings.public_base_url,
                cfg.settings.network,
                cfg.settings.data_dir,
                cfg.settings.public_base_url,
            )
            return None

        return init

    def _answer(
        self, request: Any, coro_factory: Callable[[ServiceThread], Awaitable[dict[str, Any]]]
    ) -> None:
        from .service import OperatorError, reply_when_done

        service = self.service
        if service is None:
            request.set_exception(RpcException("satsgate is not running"))
            return

        def on_error(exc: BaseException) -> None:
            if not isinstance(exc, OperatorError):
                log.error("%s failed: %r", request.method, exc)
            request.set_exception(RpcException(str(exc)))

        reply_when_done(service.submit(coro_factory(service)), request.set_result, on_error)

    def _make_status(self) -> Any:
        def status(plugin: Any = None, request: Any = None, **kwargs: Any) -> None:
            """Where satsgate listens, payments today, sats earned, refunds open."""
            self._answer(request, lambda service: service.status())

        return status

    def _make_refund(self) -> Any:
        # plugin and request first: pyln injects them by position, and a missing
        # payment_id must not shift them (lightning-cli satsgate-refund with no argument).
        def refund(
            plugin: Any = None, request: Any = None, payment_id: str = "", **kwargs: Any
        ) -> None:
            """Refund a payment by its payment id, as a one-time LNURL-withdraw link."""
            if not str(payment_id).strip():
                request.set_exception(
                    RpcException(
                        "usage: satsgate-refund <payment_id> (the id is in the call's refund "
                        "object, its 402 body and satsgate-status)"
                    )
                )
                return
            self._answer(request, lambda service: service.refund(str(payment_id)))

        return refund

    def _make_ledger(self) -> Any:
        def ledger(plugin: Any = None, request: Any = None, **kwargs: Any) -> None:
            """The ledger in msat: received = earned + refunded + held + open, per day and
            in total; refunds by state, routing fees on refunds, payouts to look at."""
            self._answer(request, lambda service: service.ledger())

        return ledger

    def _make_operator_token(self) -> Any:
        def operator_token(
            plugin: Any = None, request: Any = None, rotate: Any = False, **kwargs: Any
        ) -> None:
            """The operator token that opens the dashboard at /operator; rotate=true
            replaces it first (the old token and every dashboard session end)."""
            service = self.service
            if service is None:
                request.set_exception(RpcException("satsgate is not running"))
                return
            try:
                request.set_result(service.operator_token(rotate=_truthy(rotate)))
            except Exception as exc:
                request.set_exception(RpcException(str(exc)))

        return operator_token

    def _make_hold(self) -> Any:
        def hold(
            plugin: Any = None,
            request: Any = None,
            action: str = "list",
            target: str = "",
            **kwargs: Any,
        ) -> None:
            """Held communications: list, release ID, refund ID (exactly once); the
            do-not-contact list: dnc-list, dnc-add ADDRESS, dnc-remove ADDRESS."""
            self._answer(request, lambda service: service.hold(str(action), str(target)))

        return hold

    def _make_shutdown(self) -> Any:
        def on_shutdown(plugin: Any = None, **kwargs: Any) -> None:
            log.info("shutdown requested by lightningd")
            self.stop_and_exit()

        return on_shutdown


def _truthy(value: Any) -> bool:
    """A boolean parameter as lightning-cli passes it (true, "true", 1, "1", ...)."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def main() -> None:
    """Entry point for lightningd (``plugin=`` line) and the ``satsgate-plugin`` command."""
    protocol_out = _reserve_stdout() if os.environ.get("LIGHTNINGD_PLUGIN") == "1" else None
    private_umask()  # every file the plugin writes is 0600, its directories 0700
    logging.getLogger("satsgate").setLevel(logging.INFO)
    SatsgatePlugin(protocol_out).run()
