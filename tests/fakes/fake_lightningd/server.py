"""lightningd's JSON-RPC server on a unix socket, in front of a :class:`FakeNode`.

Wire as lightningd speaks it: requests are JSON objects read from a stream
(no framing from the client, several per connection allowed), each answer is
one JSON object followed by a blank line (``\\n\\n``), errors carry CLN's codes,
parameters are checked like lightningd's ``param()`` (unknown or missing ->
-32602), a request-level ``filter`` trims the result, and unknown commands
answer -32601. One extra command, ``dev-fake-pay``, pays one of this node's
invoices as if from another node; real lightningd has no such command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .node import INVALID_PARAMS, METHOD_NOT_FOUND, FakeNode, RpcFailure

# Parameter names per command, in lightningd's positional order; "*" marks required.
_PARAMS: dict[str, tuple[str, ...]] = {
    "getinfo": (),
    "invoice": (
        "*amount_msat",
        "*label",
        "*description",
        "expiry",
        "fallbacks",
        "preimage",
        "exposeprivatechannels",
        "cltv",
        "deschashonly",
    ),
    "listinvoices": ("label", "invstring", "payment_hash", "offer_id", "index", "start", "limit"),
    "delinvoice": ("*label", "*status", "desconly"),
    "waitanyinvoice": ("lastpay_index", "timeout"),
    "decode": ("*string",),
    "xpay": (
        "*invstring",
        "amount_msat",
        "maxfee",
        "layers",
        "retry_for",
        "partial_msat",
        "maxdelay",
    ),
    "pay": (
        "*bolt11",
        "amount_msat",
        "label",
        "riskfactor",
        "maxfeepercent",
        "retry_for",
        "maxdelay",
        "exemptfee",
        "localinvreqid",
        "exclude",
        "maxfee",
        "description",
        "partial_msat",
    ),
    "listpays": ("bolt11", "payment_hash", "status", "index", "start", "limit"),
    "dev-fake-pay": ("*bolt11", "amount_msat"),
}


def apply_filter(value: Any, flt: Any) -> Any:
    """lightningd's reply filter: ``true`` keeps a member, ``[x]`` applies x to each element."""
    if flt is True:
        return value
    if isinstance(flt, dict) and isinstance(value, dict):
        return {k: apply_filter(value[k], f) for k, f in flt.items() if k in value}
    if isinstance(flt, list) and flt and isinstance(value, list):
        return [apply_filter(v, flt[0]) for v in value]
    return value


def _bind_params(method: str, params: Any) -> dict[str, Any]:
    spec = _PARAMS[method]
    names = [n.lstrip("*") for n in spec]
    if isinstance(params, list):
        if len(params) > len(names):
            raise RpcFailure(
                INVALID_PARAMS, f"too many parameters: got {len(params)}, expected {len(names)}"
            )
        bound = {n: v for n, v in zip(names, params, strict=False) if v is not None}
    elif isinstance(params, dict):
        for key in params:
            if key not in names:
                raise RpcFailure(
                    INVALID_PARAMS,
                    f"unknown parameter: {key}, this may be caused"
                    " by a failure to autodetect key=value-style parameters."
                    " Please try using the -k flag and explicit key=value pairs"
                    " of parameters.",
                )
        bound = {k: v for k, v in params.items() if v is not None}
    else:
        raise RpcFailure(INVALID_PARAMS, "Expected array or object for params")
    for name in spec:
        if name.startswith("*") and name[1:] not in bound:
            raise RpcFailure(INVALID_PARAMS, f"missing required parameter: {name[1:]}")
    return bound


class FakeLightningd:
    """A FakeNode served on ``<lightning_dir>/lightning-rpc``, like lightningd's netdir."""

    rpc_file = "lightning-rpc"

    def __init__(self, lightning_dir: Path | str, node: FakeNode | None = None) -> None:
        self.lightning_dir = Path(lightning_dir)
        self.node = node or FakeNode()
        self.rpc_path = str(self.lightning_dir / self.rpc_file)
        self.calls: list[str] = []  # every command received, in order
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> FakeLightningd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.lightning_dir.mkdir(parents=True, exist_ok=True)
        if os.path.exists(self.rpc_path):
            os.unlink(self.rpc_path)
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                fake._serve_connection(self.request)

        server = socketserver.ThreadingUnixStreamServer(self.rpc_path, Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fake-lightningd", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Shut down: waiting commands end, open connections close, the socket goes away."""
        self.node.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if os.path.exists(self.rpc_path):
            os.unlink(self.rpc_path)

    def pay_from_outside(self, bolt11: str) -> str:
        """Another node pays our invoice; returns the preimage hex."""
        return str(self.node.pay_from_outside(bolt11)["payment_preimage"])

    # -- wire -----------------------------------------------------------------------------

    def _commands(self) -> dict[str, Callable[..., dict[str, Any]]]:
        node = self.node
        return {
            "getinfo": lambda: node.getinfo(str(self.lightning_dir)),
            "invoice": node.invoice,
            "listinvoices": node.listinvoices,
            "delinvoice": node.delinvoice,
            "waitanyinvoice": node.waitanyinvoice,
            "decode": node.decode,
            "xpay": node.xpay,
            "pay": node.pay,
            "listpays": node.listpays,
            "dev-fake-pay": lambda bolt11, amount_msat=None: node.pay_from_outside(
                bolt11, amount_msat
            ),
        }

    def _serve_connection(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)
        decoder = json.JSONDecoder()
        buf = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while True:
                    try:
                        text = buf.decode("utf-8")
                    except UnicodeDecodeError:
                        break  # a multi-byte character split across reads
                    stripped = text.lstrip()
                    if not stripped:
                        buf = b""
                        break
                    try:
                        request, end = decoder.raw_decode(stripped)
                    except json.JSONDecodeError:
                        break  # incomplete: read more
                    buf = stripped[end:].encode("utf-8")
                    conn.sendall(json.dumps(self._answer(request)).encode("utf-8") + b"\n\n")
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _answer(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict) or "method" not in request:
            return {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Expected object with method"},
            }
        req_id = request.get("id")
        method = str(request["method"])
        self.calls.append(method)
        try:
            handler = self._commands().get(method)
            if handler is None:
                raise RpcFailure(METHOD_NOT_FOUND, f"Unknown command '{method}'")
            result = handler(**_bind_params(method, request.get("params", {})))
        except RpcFailure as exc:
            return {"jsonrpc": "2.0", "id": req_id, "error": exc.to_json()}
        if "filter" in request:
            result = apply_filter(result, request["filter"])
        return {"jsonrpc": "2.0", "id": req_id, "result": result}


@contextlib.contextmanager
def running_lightningd(network: str = "regtest") -> Iterator[FakeLightningd]:
    """A started FakeLightningd in a fresh short directory (unix socket paths max ~107 bytes)."""
    base = tempfile.mkdtemp(prefix="fake-ln-")
    lightningd = FakeLightningd(Path(base) / network, FakeNode(network=network))
    lightningd.start()
    try:
        yield lightningd
    finally:
        lightningd.stop()
        shutil.rmtree(base, ignore_errors=True)
