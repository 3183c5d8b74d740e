"""The state of a fake Core Lightning node: its invoices and its outgoing payments.

Each public method named like a CLN command takes that command's parameters
and returns its result object with CLN's field names, or raises
:class:`RpcFailure` with CLN's error code and message. Invoices are real
BOLT11, signed with the node's secp256k1 key. Nodes reach each other through
:meth:`FakeNode.connect`: paying a connected node's invoice settles it there,
exactly once, and the payer learns the preimage.

Thread-safe: the socket server calls in from one thread per connection.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Any

import coincurve

from satsgate.lightning.invoices import InvalidInvoice, decode_invoice, sign_invoice

# common/jsonrpc_errors.h
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
PLUGIN_ERROR = -3
LIGHTNINGD_SHUTDOWN = -5
PAY_IN_PROGRESS = 200
PAY_RHASH_ALREADY_USED = 201
PAY_DESTINATION_PERM_FAIL = 203
PAY_ROUTE_NOT_FOUND = 205
PAY_ROUTE_TOO_EXPENSIVE = 206
PAY_INVOICE_EXPIRED = 207
PAY_ALREADY_PAID = 219
INVOICE_LABEL_ALREADY_EXISTS = 900
INVOICE_PREIMAGE_ALREADY_EXISTS = 901
INVOICE_WAIT_TIMED_OUT = 904
INVOICE_NOT_FOUND = 905
INVOICE_STATUS_UNEXPECTED = 906

DEFAULT_INVOICE_EXPIRY_S = 7 * 24 * 3600  # lightningd's default: one week


class RpcFailure(Exception):
    """A JSON-RPC error object lightningd would answer with."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def parse_msat_param(name: str, value: Any) -> int:
    """lightningd's msat parameter: an integer, or a string ending in msat or sat."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        if value.endswith("msat") and value[:-4].isdigit():
            return int(value[:-4])
        if value.endswith("sat") and value[:-3].isdigit():
            return int(value[:-3]) * 1000
        if value.isdigit():
            return int(value)
    raise RpcFailure(INVALID_PARAMS, f"{name}: should be a millisatoshi amount: invalid token")


class FakeNode:
    """One node's invoices and payments. Network names are CLN's (``regtest``, ``bitcoin``)."""

    def __init__(self, network: str = "regtest", alias: str = "fake-cln") -> None:
        self.network = network
        self.alias = alias
        self._key = coincurve.PrivateKey()
        self.node_id: str = self._key.public_key.format().hex()
        self._cond = threading.Condition()
        self._invoices: dict[str, dict[str, Any]] = {}  # by label
        self._pays: list[dict[str, Any]] = []
        self._peers: dict[str, FakeNode] = {}
        self._pay_index = 0
        self._created_index = 0
        self._updated_index = 0
        self._pay_created_index = 0
        self._stopping = False
        # Knobs for tests.
        self.route_fee_msat = 1_000  # fee to reach any connected node
        self.has_xpay = True  # False: a node from before xpay (v24.11)
        # True: outgoing HTLCs get stuck at a hop until release_held() is called.
        self.hold_outgoing = False

    # -- test-side controls ---------------------------------------------------------------

    def connect(self, other: FakeNode) -> None:
        """A channel both ways: each node can pay the other's invoices."""
        self._peers[other.node_id] = other
        other._peers[self.node_id] = self

    def pay_from_outside(self, bolt11: str, amount_msat: int | None = None) -> dict[str, Any]:
        """Settle one of our invoices as if another node paid it; returns the paid invoice."""
        try:
            decoded = decode_invoice(bolt11)
        except InvalidInvoice as exc:
            raise RpcFailure(INVALID_PARAMS, f"Invalid bolt11: {exc}") from None
        if decoded.payee != self.node_id:
            raise RpcFailure(INVALID_PARAMS, "invoice is not from this node")
        preimage = self._receive(decoded.payment_hash, amount_msat or decoded.amount_msat or 0)
        with self._cond:
            inv = self._by_hash(decoded.payment_hash)
            assert inv is not None and inv["payment_preimage"] == preimage
            return self._invoice_json(inv)

    def release_held(self, succeed: bool = True) -> int:
        """Resolve every stuck outgoing payment; returns how many were released."""
        with self._cond:
            held = [p for p in self._pays if p["status"] == "pending"]
            for pay in held:
                pay["release"] = "succeed" if succeed else "fail"
            self._cond.notify_all()
            return len(held)

    def stop(self) -> None:
        """lightningd is shutting down: every waiting command ends."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    # -- invoices -------------------------------------------------------------------------

    def _now(self) -> int:
        return int(time.time())

    def _status(self, inv: dict[str, Any]) -> str:
        if inv["status"] == "unpaid" and self._now() >= inv["expires_at"]:
            return "expired"
        return str(inv["status"])

    def _invoice_json(self, inv: dict[str, Any]) -> dict[str, Any]:
        """The fields lightningd's json_add_invoice_fields writes, in its order."""
        status = self._status(inv)
        out: dict[str, Any] = {
            "label": inv["label"],
            "bolt11": inv["bolt11"],
            "payment_hash": inv["payment_hash"],
            "status": status,
        }
        if inv["amount_msat"] is not None:  # lightningd leaves it out for "any"
            out = {**out, "amount_msat": inv["amount_msat"]}
        if status == "paid":
            out["pay_index"] = inv["pay_index"]
            out["amount_received_msat"] = inv["amount_received_msat"]
            out["paid_at"] = inv["paid_at"]
            out["payment_preimage"] = inv["payment_preimage"]
        out["description"] = inv["description"]
        out["expires_at"] = inv["expires_at"]
        out["created_index"] = inv["created_index"]
        if inv.get("updated_index"):
            out["updated_index"] = inv["updated_index"]
        return out

    def _by_hash(self, payment_hash: str) -> dict[str, Any] | None:
        for inv in self._invoices.values():
            if inv["payment_hash"] == payment_hash:
                return inv
        return None

    def invoice(
        self,
        amount_msat: Any,
        label: Any,
        description: str,
        expiry: int = DEFAULT_INVOICE_EXPIRY_S,
        preimage: str | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        # "any": an amountless invoice (the payer names the amount), as lightningd makes.
        msat = 0 if amount_msat == "any" else parse_msat_param("amount_msat", amount_msat)
        if msat == 0 and amount_msat != "any":
            raise RpcFailure(INVALID_PARAMS, "amount_msat: should be positive msat or 'any'")
        label = str(label)
        pre = bytes.fromhex(preimage) if preimage else secrets.token_bytes(32)
        payment_hash = hashlib.sha256(pre).hexdigest()
        payment_secret = secrets.token_hex(32)
        now = self._now()
        bolt11 = sign_invoice(
            network=self.network,
            amount_msat=msat,
            payment_hash=payment_hash,
            payment_secret=payment_secret,
            description=description,
            expiry_s=int(expiry),
            private_key_hex=self._key.secret.hex(),
            created_at=now,
        )
        with self._cond:
            if label in self._invoices:
                raise RpcFailure(INVOICE_LABEL_ALREADY_EXISTS, f"Duplicate label '{label}'")
            if self._by_hash(payment_hash) is not None:
                raise RpcFailure(INVOICE_PREIMAGE_ALREADY_EXISTS, "preimage already used")
            self._created_index += 1
            self._invoices[label] = {
                "label": label,
                "bolt11": bolt11,
                "payment_hash": payment_hash,
                "amount_msat": msat or None,
                "status": "unpaid",
                "description": description,
                "expires_at": now + int(expiry),
                "created_index": self._created_index,
                "payment_preimage": pre.hex(),
                "payment_secret": payment_secret,
            }
            return {
                "payment_hash": payment_hash,
                "expires_at": now + int(expiry),
                "bolt11": bolt11,
                "payment_secret": payment_secret,
                "created_index": self._created_index,
            }

    def listinvoices(
        self,
        label: Any = None,
        invstring: str | None = None,
        payment_hash: str | None = None,
        offer_id: str | None = None,
        index: str | None = None,
        start: int = 0,
        limit: int | None = None,
    ) -> dict[str, Any]:
        if sum(x is not None for x in (label, invstring, payment_hash, offer_id)) > 1:
            raise RpcFailure(
                INVALID_PARAMS,
                "Can only specify one of {label}, {invstring}, {payment_hash} or {offer_id}",
            )
        if start and index is None:
            raise RpcFailure(INVALID_PARAMS, "Can only specify {start} with {index}")
        if limit is not None and index is None:
            raise RpcFailure(INVALID_PARAMS, "Can only specify {limit} with {index}")
        if invstring is not None:
            try:
                payment_hash = decode_invoice(invstring).payment_hash
            except InvalidInvoice:
                raise RpcFailure(INVALID_PARAMS, "Invalid invstring") from None
        with self._cond:
            rows = sorted(self._invoices.values(), key=lambda i: i["created_index"])
            if label is not None:
                rows = [i for i in rows if i["label"] == str(label)]
            if payment_hash is not None:
                rows = [i for i in rows if i["payment_hash"] == payment_hash.lower()]
            if index is not None:
                key = "created_index" if index == "created" else "updated_index"
                rows = sorted(
                    (i for i in rows if i.get(key, 0) >= start), key=lambda i: i.get(key, 0)
                )
                if limit is not None:
                    rows = rows[:limit]
            return {"invoices": [self._invoice_json(i) for i in rows]}

    def delinvoice(self, label: Any, status: str, desconly: bool = False) -> dict[str, Any]:
        with self._cond:
            inv = self._invoices.get(str(label))
            if inv is None:
                raise RpcFailure(INVOICE_NOT_FOUND, "Unknown invoice")
            current = self._status(inv)
            if current != status:
                raise RpcFailure(
                    INVOICE_STATUS_UNEXPECTED,
                    f"Invoice status is {current} not {status}",
                    {"current_status": current, "expected_status": status},
                )
            out = self._invoice_json(inv)
            del self._invoices[str(label)]
            self._cond.notify_all()
            return out

    def waitanyinvoice(self, lastpay_index: int = 0, timeout: int | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + int(timeout)
        with self._cond:
            while True:
                paid = [
                    i
                    for i in self._invoices.values()
                    if i["status"] == "paid" and i["pay_index"] > int(lastpay_index)
                ]
                if paid:
                    return self._invoice_json(min(paid, key=lambda i: i["pay_index"]))
                if self._stopping:
                    raise RpcFailure(LIGHTNINGD_SHUTDOWN, "lightningd is shutting down")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise RpcFailure(
                        INVOICE_WAIT_TIMED_OUT, "Timed out while waiting for invoice to be paid"
                    )
                self._cond.wait(remaining)

    def _receive(self, payment_hash: str, amount_msat: int) -> str:
        """An incoming HTLC set for one of our invoices; returns the preimage or refuses."""
        with self._cond:
            inv = self._by_hash(payment_hash)
            if (
                inv is None
                or self._status(inv) != "unpaid"
                or amount_msat < (inv["amount_msat"] or 0)
            ):
                # A node refuses unknown, paid, expired or underpaid invoices alike.
                raise RpcFailure(
                    PAY_DESTINATION_PERM_FAIL,
                    "Destination said it doesn't know invoice: "
                    "incorrect_or_unknown_payment_details",
                )
            self._pay_index += 1
            self._updated_index += 1
            inv.update(
                status="paid",
                pay_index=self._pay_index,
                amount_received_msat=amount_msat,
                paid_at=self._now(),
                updated_index=self._updated_index,
            )
            self._cond.notify_all()
            return str(inv["payment_preimage"])

    # -- outgoing -------------------------------------------------------------------------

    def _pay_json(self, pay: dict[str, Any]) -> dict[str, Any]:
        out = {
            k: pay[k]
            for k in (
                "created_index",
                "payment_hash",
                "status",
                "destination",
                "created_at",
                "bolt11",
            )
        }
        if pay["status"] == "complete":
            out["completed_at"] = pay["completed_at"]
        # v26.06 lists a failed payment without amount_msat, and amount_sent_msat 0
        if pay["status"] != "failed":
            out["amount_msat"] = pay["amount_msat"]
        out["amount_sent_msat"] = 0 if pay["status"] == "failed" else pay["amount_sent_msat"]
        if pay["status"] == "complete":
            out["preimage"] = pay["preimage"]
        return out

    def listpays(
        self,
        bolt11: str | None = None,
        payment_hash: str | None = None,
        status: str | None = None,
        index: str | None = None,
        start: int = 0,
        limit: int | None = None,
    ) -> dict[str, Any]:
        if bolt11 is not None and payment_hash is not None:
            raise RpcFailure(INVALID_PARAMS, "Can only specify one of {bolt11} or {payment_hash}")
        with self._cond:
            rows = [
                p
                for p in self._pays
                if (bolt11 is None or p["bolt11"] == bolt11)
                and (payment_hash is None or p["payment_hash"] == payment_hash.lower())
                and (status is None or p["status"] == status)
            ]
            return {"pays": [self._pay_json(p) for p in rows]}

    def _send(
        self, bolt11: str, maxfee_msat: int | None, *, xpay: bool, amount_msat: Any = None
    ) -> dict[str, Any]:
        """One payment attempt through a channel; blocks while the HTLC is held."""
        try:
            decoded = decode_invoice(bolt11)
        except InvalidInvoice:
            raise RpcFailure(INVALID_PARAMS, "invstring: Invalid bolt11") from None
        if decoded.network != self.network:
            raise RpcFailure(
                INVALID_PARAMS, f"invstring: Invalid bolt11: wrong network ({decoded.network})"
            )
        given = None if amount_msat is None else parse_msat_param("amount_msat", amount_msat)
        if decoded.amount_msat is None and given is None:
            raise RpcFailure(INVALID_PARAMS, "amount_msat required")  # v26.06's xpay
        if decoded.amount_msat is not None and given is not None:
            raise RpcFailure(INVALID_PARAMS, "amount_msat unnecessary")
        if decoded.expired():
            raise RpcFailure(PAY_INVOICE_EXPIRED, "Invoice expired")
        amount_msat = decoded.amount_msat if given is None else given
        with self._cond:
            previous = [p for p in self._pays if p["payment_hash"] == decoded.payment_hash]
            done = next((p for p in previous if p["status"] == "complete"), None)
            if done is not None:
                if xpay and done["amount_msat"] != amount_msat:
                    # v26.06, amountless invoice paid before with another amount: xpay's
                    # injectpaymentonion refuses with 201, xpay reports it as -3.
                    raise RpcFailure(
                        PLUGIN_ERROR,
                        f"Unexpected injectpaymentonion error {PAY_RHASH_ALREADY_USED}:"
                        f' {{"code":{PAY_RHASH_ALREADY_USED},"message":"Already succeeded with'
                        f' amount {done["amount_msat"]}msat (not {amount_msat}msat)"}}',
                    )
                if xpay:
                    raise RpcFailure(PAY_ALREADY_PAID, "Already paid this invoice successfully")
                return self._pay_result(done, xpay=False)  # pay returns the earlier success
            if any(p["status"] == "pending" for p in previous):
                if xpay:  # xpay's injectpaymentonion is refused, xpay reports it as -3
                    raise RpcFailure(
                        PLUGIN_ERROR,
                        f"Unexpected injectpaymentonion error {PAY_IN_PROGRESS}:"
                        " Already have payment in progress",
                    )
                raise RpcFailure(PAY_IN_PROGRESS, "Payment already in progress")
            peer = self._peers.get(decoded.payee)
            if peer is None:
                raise RpcFailure(
                    PAY_ROUTE_NOT_FOUND, f"Failed: Unknown destination node {decoded.payee}"
                )
            fee = self.route_fee_msat
            if maxfee_msat is not None and fee > maxfee_msat:
                raise RpcFailure(
                    PAY_ROUTE_TOO_EXPENSIVE, "Failed: Could not find route without excessive cost"
                )
            self._pay_created_index += 1
            pay: dict[str, Any] = {
                "created_index": self._pay_created_index,
                "payment_hash": decoded.payment_hash,
                "status": "pending",
                "destination": decoded.payee,
                "created_at": self._now(),
                "bolt11": bolt11,
                "amount_msat": amount_msat,
                "amount_sent_msat": amount_msat + fee,
            }
            self._pays.append(pay)
            while self.hold_outgoing and "release" not in pay and not self._stopping:
                self._cond.wait()
            if self._stopping and "release" not in pay and self.hold_outgoing:
                raise RpcFailure(LIGHTNINGD_SHUTDOWN, "lightningd is shutting down")
            release = pay.pop("release", "succeed")
        try:
            if release == "fail":
                raise RpcFailure(PAY_DESTINATION_PERM_FAIL, "Failed: temporary channel failure")
            preimage = peer._receive(decoded.payment_hash, amount_msat)
        except RpcFailure:
            with self._cond:
                pay["status"] = "failed"
            raise
        with self._cond:
            pay.update(status="complete", preimage=preimage, completed_at=self._now())
            return self._pay_result(pay, xpay=xpay)

    def _pay_result(self, pay: dict[str, Any], *, xpay: bool) -> dict[str, Any]:
        if xpay:
            return {
                "payment_preimage": pay["preimage"],
                "amount_msat": pay["amount_msat"],
                "amount_sent_msat": pay["amount_sent_msat"],
                "failed_parts": 0,
                "successful_parts": 1,
            }
        return {
            "destination": pay["destination"],
            "payment_hash": pay["payment_hash"],
            "created_at": pay["created_at"],
            "parts": 1,
            "amount_msat": pay["amount_msat"],
            "amount_sent_msat": pay["amount_sent_msat"],
            "payment_preimage": pay["preimage"],
            "status": "complete",
        }

    def xpay(
        self,
        invstring: str,
        amount_msat: Any = None,
        maxfee: Any = None,
        retry_for: int | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        if not self.has_xpay:
            raise RpcFailure(METHOD_NOT_FOUND, "Unknown command 'xpay'")
        fee = None if maxfee is None else parse_msat_param("maxfee", maxfee)
        return self._send(invstring, fee, xpay=True, amount_msat=amount_msat)

    def pay(
        self,
        bolt11: str,
        amount_msat: Any = None,
        maxfee: Any = None,
        retry_for: int | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        fee = None if maxfee is None else parse_msat_param("maxfee", maxfee)
        return self._send(bolt11, fee, xpay=False, amount_msat=amount_msat)

    # -- node -----------------------------------------------------------------------------

    def getinfo(self, lightning_dir: str = "") -> dict[str, Any]:
        with self._cond:
            peers = len(self._peers)
        return {
            "id": self.node_id,
            "alias": self.alias,
            "color": "02bf81",
            "num_peers": peers,
            "num_pending_channels": 0,
            "num_active_channels": peers,
            "num_inactive_channels": 0,
            "address": [],
            "binding": [],
            "version": "v25.12-fake",
            "blockheight": 101,
            "network": self.network,
            "fees_collected_msat": 0,
            "lightning-dir": lightning_dir,
            "our_features": {
                "init": "08a0000a8a5961",
                "node": "88a0000a8a5961",
                "channel": "",
                "invoice": "02000002024100",
            },
        }

    def decode(self, string: str) -> dict[str, Any]:
        try:
            d = decode_invoice(string)
        except InvalidInvoice as exc:
            raise RpcFailure(INVALID_PARAMS, f"string: Unparsable invoice: {exc}") from None
        currency = {"bitcoin": "bc", "testnet": "tb", "signet": "tbs", "regtest": "bcrt"}
        out: dict[str, Any] = {
            "type": "bolt11 invoice",
            "currency": currency[d.network],
            "created_at": d.created_at,
            "expiry": d.expires_at - d.created_at,
            "payee": d.payee,
            "payment_hash": d.payment_hash,
            "description": d.description,
            "min_final_cltv_expiry": 18,
            "valid": True,
        }
        if d.amount_msat is not None:
            out["amount_msat"] = d.amount_msat
        return out
