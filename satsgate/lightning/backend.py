"""The LightningBackend seam: what satsgate needs from a Lightning node.

Every amount here is in millisatoshi (``*_msat``). Implementations: the built-in
dev node (``satsgate.backends.dev``), Core Lightning over its JSON-RPC socket
(``satsgate.backends.cln``), LND over gRPC (``satsgate.backends.lnd``);
:func:`satsgate.backends.make_backend` picks one.
One contract test suite (``tests/backend_contract.py``) runs against each of them.
Optional abilities are the runtime-checkable protocols at the end of this module.

Rules every implementation keeps:

- ``create_invoice`` returns an invoice for exactly ``amount_msat``.
- ``settlements(after)`` yields settled invoices in node order, each with a
  cursor strictly greater than ``after``; resuming from a persisted cursor
  never skips a settlement that happened while satsgate was down.
- A payment whose outcome is not known (timeout, in flight) is ``PENDING``,
  never ``FAILED``: a caller that treats pending as failed pays twice.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from satsgate.lightning.invoices import InvalidInvoice


class InvoiceState(enum.Enum):
    OPEN = "open"
    SETTLED = "settled"
    EXPIRED = "expired"
    CANCELED = "canceled"


class PaymentState(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PENDING = "pending"


@dataclass(frozen=True)
class NodeInfo:
    pubkey: str
    network: str  # "regtest", "signet", "testnet", "bitcoin"
    alias: str = ""


@dataclass(frozen=True)
class CreatedInvoice:
    bolt11: str
    payment_hash: str  # lowercase hex
    amount_msat: int
    expires_at: int  # unix seconds


@dataclass(frozen=True)
class Settlement:
    payment_hash: str
    amount_received_msat: int
    preimage: str  # lowercase hex
    settled_at: int  # unix seconds
    cursor: int  # CLN pay_index, LND settle_index, dev counter


@dataclass(frozen=True)
class InvoiceStatus:
    payment_hash: str
    state: InvoiceState
    amount_msat: int
    amount_received_msat: int = 0
    preimage: str | None = None


@dataclass(frozen=True)
class PaymentResult:
    payment_hash: str
    state: PaymentState
    amount_msat: int = 0
    fee_msat: int = 0
    preimage: str | None = None
    failure_reason: str | None = None


# How a simulating node answers outgoing payments (see SimulatedPayments).
OutgoingMode = Literal["succeed", "fail", "pending"]


class BackendError(Exception):
    """The node refused or could not be reached; message is operator-readable."""


# What nodes call a network, in satsgate's words (bitcoin, testnet, signet, regtest):
# testnet3 and testnet4 share the ``tb`` invoice prefix.
_NETWORK_ALIASES = {"mainnet": "bitcoin", "testnet4": "testnet", "testnet3": "testnet"}


def normalize_network(name: str) -> str:
    """A node's (or an operator's) name for a network in satsgate's words."""
    lowered = name.strip().lower()
    return _NETWORK_ALIASES.get(lowered, lowered)


def require_network(node: str, actual: str, configured: str) -> None:
    """Refuse to work with ``node`` (how to name it to the operator) when it is on another
    network than satsgate is configured for: BackendError saying how to fix it."""
    expected = normalize_network(configured)
    if normalize_network(actual) != expected:
        raise BackendError(
            f"network mismatch: {node} is on {actual} but satsgate is configured for "
            f'{expected}; refusing to start. Fix: set network = "{actual}" (--network, '
            "SATSGATE_NETWORK or the config file), or point satsgate at the node of the "
            "network you meant"
        )


def require_invoice_terms(amount_msat: int, expiry_s: int) -> None:
    """Refuse ``create_invoice`` arguments a node invoice cannot carry: ValueError naming
    the first of ``amount_msat`` and ``expiry_s`` that is not positive."""
    if amount_msat <= 0:
        raise ValueError("amount_msat must be positive")
    if expiry_s <= 0:
        raise ValueError("expiry_s must be positive")


def invalid_invoice_payment(exc: InvalidInvoice) -> PaymentResult:
    """``pay_invoice``'s answer to a string that does not decode as an invoice: FAILED
    before anything is sent, with no payment hash (none could be read) and the decoder's
    reason."""
    return PaymentResult(payment_hash="", state=PaymentState.FAILED, failure_reason=str(exc))


class UnknownInvoice(BackendError):
    """The node has no invoice with this payment hash (never created there, or deleted)."""


@runtime_checkable
class LightningBackend(Protocol):
    """A Lightning node as satsgate sees it. All methods are safe to call from the event loop."""

    name: str  # "dev", "cln", "lnd"

    async def start(self) -> None:
        """Connect; called once before any other method."""

    async def close(self) -> None:
        """Release connections and threads; idempotent."""

    async def info(self) -> NodeInfo: ...

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice: ...

    def settlements(self, after: int) -> AsyncIterator[Settlement]:
        """Settled invoices with cursor > after, first the backlog then live, forever."""
        ...

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus:
        """The invoice's state; UnknownInvoice when the node has none with this hash."""
        ...

    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult:
        """Pay ``bolt11`` under the fee cap. ``amount_msat``: what to pay an amountless
        invoice (a session's return invoice); None pays the invoice's own amount. An
        amountless invoice without it, or an amount that differs from the invoice's, is
        FAILED before anything is sent."""
        ...

    async def lookup_payment(self, payment_hash: str) -> PaymentResult: ...


# -- optional capabilities: a backend has one when it has the method (checked with
# isinstance against these runtime-checkable protocols, never by name or by class).


@runtime_checkable
class InitialCursor(Protocol):
    """A node with settlements from before satsgate: where a first start begins, so
    that history is never applied as payments. Without it the cursor starts at 0."""

    async def initial_cursor(self) -> int: ...


@runtime_checkable
class SimulatedPayments(Protocol):
    """A node that can pay its own invoices and fake outgoing outcomes (the dev node):
    the ``/api/dev/*`` routes exist only for one."""

    outgoing_mode: OutgoingMode

    async def simulate_payment(self, bolt11: str) -> str:
        """Pay ``bolt11`` as a wallet would; returns the preimage (hex)."""
        ...

    async def outgoing_payments(self) -> list[dict[str, Any]]: ...

    async def complete_pending(self, succeed: bool = True) -> int: ...


@dataclass(frozen=True)
class HoldInvoiceStatus:
    """A hold invoice at the node. ``accepted``: the payer's HTLCs are held (paid, not
    yet charged); ``blocks_left``: blocks until the earliest held HTLC expires (the
    decision must come well before, or the node cancels it itself)."""

    payment_hash: str
    state: Literal["open", "accepted", "settled", "canceled"]
    amount_msat: int
    amount_received_msat: int = 0
    blocks_left: int | None = None


@runtime_checkable
class HoldInvoices(Protocol):
    """A node with hold invoices (LND): an invoice for a hash whose preimage satsgate
    keeps, so a payment can be kept (settled) or given back (canceled) after the call."""

    async def create_hold_invoice(
        self, amount_msat: int, description: str, expiry_s: int, payment_hash: str
    ) -> CreatedInvoice: ...

    async def hold_status(self, payment_hash: str) -> HoldInvoiceStatus: ...

    async def settle_hold(self, preimage: str) -> None:
        """Keep the held payment (idempotent for a settled invoice)."""
        ...

    async def cancel_hold(self, payment_hash: str) -> None:
        """Give the held payment back (idempotent for a canceled invoice)."""
        ...
