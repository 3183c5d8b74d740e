"""lightningd's JSON-RPC socket, called from asyncio without blocking the loop.

pyln's ``LightningRpc`` is synchronous and its request counter is not locked,
so every thread gets its own instance (``threading.local``). Short calls run
in a small thread pool; calls that may block for long (``waitanyinvoice``,
``xpay``) run on a fresh daemon thread each, so a stuck call never occupies
the pool and never delays interpreter exit.

Errors are translated once, here: :class:`ClnRpcError` when lightningd
answered with a JSON-RPC error (``code`` is CLN's error code),
:class:`ClnConnectionError` when the socket could not be used. Both are
:class:`~satsgate.lightning.backend.BackendError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyln.client import LightningRpc, RpcError

from satsgate.lightning.backend import BackendError

# JSON-RPC and CLN error codes this package branches on (common/jsonrpc_errors.h).
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INVOICE_WAIT_TIMED_OUT = 904

_log = logging.getLogger("satsgate.cln_backend.rpc")


class ClnRpcError(BackendError):
    """lightningd answered a call with a JSON-RPC error object."""

    def __init__(self, method: str, code: int | None, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class ClnConnectionError(BackendError):
    """The socket was missing, refused the connection, or closed mid-call."""


def parse_msat(value: Any) -> int:
    """An msat field as int: CLN writes integers; nodes before 23.x wrote ``"123msat"``."""
    if isinstance(value, bool):
        raise ValueError(f"not an msat amount: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("msat") and value[:-4].isdigit():
        return int(value[:-4])
    return int(value)  # pyln Millisatoshi, or a plain numeric string


class ClnRpc:
    """Thread-confined access to one lightningd socket; safe to call from the event loop."""

    def __init__(self, rpc_path: str, max_workers: int = 8) -> None:
        self.rpc_path = rpc_path
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="cln-rpc")
        self._closed = False

    def _thread_rpc(self) -> Any:
        rpc = getattr(self._local, "rpc", None)
        if rpc is None:
            rpc = LightningRpc(self.rpc_path, logger=_log)
            self._local.rpc = rpc
        return rpc

    def _call_sync(
        self, rpc: Any, method: str, params: Mapping[str, Any], filter_: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        try:
            result = rpc.call(method, dict(params), filter=filter_)
        except RpcError as exc:
            err = exc.error
            if isinstance(err, dict):
                code = err.get("code")
                raise ClnRpcError(
                    method,
                    code if isinstance(code, int) else None,
                    str(err.get("message", "")),
                    err.get("data"),
                ) from None
            # pyln reports a connection closed mid-call as a string error.
            raise ClnConnectionError(f"{method}: {err}") from None
        except OSError as exc:
            raise ClnConnectionError(
                f"{method}: cannot use lightningd socket {self.rpc_path}: {exc}"
            ) from None
        except ValueError as exc:  # malformed or mismatched response
            raise ClnConnectionError(f"{method}: bad response from lightningd: {exc}") from None
        if not isinstance(result, dict):
            raise ClnConnectionError(f"{method}: result is not an object: {result!r}")
        return result

    async def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        filter_: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One short call on a pool thread."""
        if self._closed:
            raise ClnConnectionError(f"{method}: backend is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: self._call_sync(self._thread_rpc(), method, params or {}, filter_)
        )

    async def call_blocking(
        self, method: str, params: Mapping[str, Any], wait_s: float | None = None
    ) -> dict[str, Any]:
        """A call that may block for long, on its own daemon thread and connection.

        Raises TimeoutError after ``wait_s``: the call then keeps running in
        lightningd and its result is dropped, so the caller must treat the
        outcome as unknown.
        """
        if self._closed:
            raise ClnConnectionError(f"{method}: backend is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()

        def deliver(settle: Callable[[], None]) -> None:
            # A closed loop means nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle)

        def run() -> None:
            rpc = LightningRpc(self.rpc_path, logger=_log)
            try:
                result = self._call_sync(rpc, method, params, None)
            except Exception as exc:  # handed to the awaiting task
                error = exc
                deliver(lambda: None if fut.done() else fut.set_exception(error))
            else:
                deliver(lambda: None if fut.done() else fut.set_result(result))

        threading.Thread(target=run, name=f"cln-{method}", daemon=True).start()
        if wait_s is None:
            return await fut
        return await asyncio.wait_for(fut, wait_s)

    def close(self) -> None:
        """Refuse new calls; threads still inside lightningd finish on their own."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
