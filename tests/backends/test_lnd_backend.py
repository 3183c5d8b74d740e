"""LndBackend against a fake lnd (gRPC, TLS, macaroon): what the shared contract does not
cover. lnd restarting under an open SubscribeInvoices, settlements while satsgate is down
(with cursor 0, which lnd never replays, and above it), settle-index gaps, the network
and macaroon refusals, and refunds: fee limit, IN_FLIGHT as pending, ALREADY_EXISTS."""

from __future__ import annotations

import asyncio
import base64
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from satsgate.backends.lnd.backend import LndBackend
from satsgate.lightning.backend import (
    BackendError,
    InvoiceState,
    PaymentState,
    Settlement,
    UnknownInvoice,
)
from satsgate.store import PaymentStatus
from tests.conftest import ThreadedServer, free_port, make_settings
from tests.fakes.fake_lnd import FakeLnd, FakeLndNode, make_tls_cert, running_lnd

CARD = {"template": "headline", "title": "hi"}


@pytest.fixture
def lnd(tmp_path: Path) -> Iterator[FakeLnd]:
    with running_lnd(tmp_path) as fake:
        yield fake


def backend_for(lnd: FakeLnd, network: str | None = "regtest") -> LndBackend:
    return LndBackend(
        lnd.target, lnd.tls_cert, lnd.macaroon_path, network, max_backoff_s=0.5, pay_grace_s=0.5
    )


@pytest.fixture
async def backend(lnd: FakeLnd) -> AsyncIterator[LndBackend]:
    node = backend_for(lnd)
    await node.start()
    yield node
    await node.close()


async def take(stream: AsyncIterator[Settlement], n: int, wait_s: float = 10) -> list[Settlement]:
    return [await asyncio.wait_for(stream.__anext__(), wait_s) for _ in range(n)]


async def pay(lnd: FakeLnd, bolt11: str) -> str:
    return await asyncio.to_thread(lnd.node.pay_from_outside, bolt11)


async def test_lnd_restart_mid_stream_loses_nothing_and_repeats_nothing(
    lnd: FakeLnd, backend: LndBackend
) -> None:
    lnd.node.settle_index_gap = 2  # lnd's indexes may skip: the cursor must not care
    invoices = [await backend.create_invoice(1_000 + i, f"r{i}", 300) for i in range(4)]
    stream = backend.settlements(0)
    await pay(lnd, invoices[0].bolt11)
    (first,) = await take(stream, 1)
    assert first.payment_hash == invoices[0].payment_hash and first.cursor == 3

    # lnd goes away under the open stream; two invoices settle while it is down.
    await asyncio.to_thread(lnd.stop)
    await pay(lnd, invoices[1].bolt11)
    await pay(lnd, invoices[2].bolt11)
    await asyncio.to_thread(lnd.start)
    got = await take(stream, 2)
    await pay(lnd, invoices[3].bolt11)  # and one live after the reconnect
    got += await take(stream, 1)
    assert [s.payment_hash for s in got] == [i.payment_hash for i in invoices[1:]]
    assert [s.cursor for s in got] == [6, 9, 12]
    # Nothing more: none of the four comes a second time.
    with pytest.raises(TimeoutError):
        await take(stream, 1, wait_s=0.5)
    await stream.aclose()  # type: ignore[attr-defined]


async def test_cursor_zero_is_reconciled_because_lnd_replays_nothing_for_it(
    lnd: FakeLnd, backend: LndBackend
) -> None:
    created = await backend.create_invoice(5_000, "before", 300)
    # Another satsgate process (a fresh backend: it knows none of our open invoices).
    await pay(lnd, created.bolt11)
    fresh = backend_for(lnd)
    await fresh.start()
    try:
        stream = fresh.settlements(0)
        (s,) = await take(stream, 1)
        assert s.payment_hash == created.payment_hash and s.cursor == 1
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await fresh.close()


async def test_open_invoices_are_looked_up_on_every_connect(
    lnd: FakeLnd, backend: LndBackend
) -> None:
    """A settlement the replay cannot bring (an index at or below the cursor: a gap)
    comes from LookupInvoice of the invoices this backend still has open."""
    a = await backend.create_invoice(1_000, "a", 300)
    b = await backend.create_invoice(1_000, "b", 300)
    await pay(lnd, a.bolt11)
    await pay(lnd, b.bolt11)
    stream = backend.settlements(5)  # a cursor beyond both settle indexes
    got = await take(stream, 2)
    assert {s.payment_hash for s in got} == {a.payment_hash, b.payment_hash}
    assert all(s.cursor == 5 for s in got)  # found by lookup: the cursor does not move
    await stream.aclose()  # type: ignore[attr-defined]


async def test_accepted_and_canceled_updates_are_not_settlements(
    lnd: FakeLnd, backend: LndBackend
) -> None:
    """lnd streams every invoice state change to SubscribeInvoices, a hold invoice's
    ACCEPTED and CANCELED too: only settlements come out of the stream."""
    stream = backend.settlements(0)
    first = asyncio.create_task(take(stream, 1))
    for _ in range(500):  # the stream is open and live before anything happens
        if lnd.subscribers:
            break
        await asyncio.sleep(0.01)
    hold = await backend.create_hold_invoice(3_000, "held", 300, "ab" * 32)
    await pay(lnd, hold.bolt11)  # ACCEPTED
    await backend.cancel_hold(hold.payment_hash)  # CANCELED
    plain = await backend.create_invoice(2_000, "plain", 300)
    await pay(lnd, plain.bolt11)
    (only,) = await first
    assert only.payment_hash == plain.payment_hash
    with pytest.raises(TimeoutError):
        await take(stream, 1, wait_s=0.5)
    await stream.aclose()  # type: ignore[attr-defined]


async def test_wrong_network_is_refused_at_start(tmp_path: Path) -> None:
    with running_lnd(tmp_path, FakeLndNode(network="mainnet")) as lnd:
        node = backend_for(lnd, "regtest")
        with pytest.raises(BackendError, match=r"network mismatch.*bitcoin.*regtest"):
            await node.start()
        # and satsgate itself refuses to start on it
        with pytest.raises(BackendError, match="network mismatch"):
            ThreadedServer(make_settings(tmp_path / "data"), backend=backend_for(lnd))


async def test_wrong_macaroon_is_refused(lnd: FakeLnd, tmp_path: Path) -> None:
    bad = tmp_path / "other.macaroon"
    bad.write_bytes(b"\x02" + bytes(40))
    node = LndBackend(lnd.target, lnd.tls_cert, bad, "regtest")
    with pytest.raises(BackendError, match="refused the macaroon"):
        await node.start()
    await node.close()


def readme_permissions() -> list[str]:
    """The permissions of the README's ``lncli bakemacaroon`` command, as written."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"lncli bakemacaroon ((?:[a-z]+:[a-z]+\s+(?:\\\s+)?)+)--save_to", readme)
    assert found, "README.md lost its bakemacaroon command"
    return found.group(1).replace("\\", " ").split()


def narrowest_permissions() -> list[str]:
    """The uri: permissions of docs/operations.md's narrowest macaroon."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = doc.split("The narrowest\nmacaroon, by method:", 1)[1].split("```", 2)[1]
    return re.findall(r"uri:\S+", block)


def baked(lnd: FakeLnd, path: Path, *permissions: str) -> LndBackend:
    path.write_bytes(lnd.bake(*permissions))
    return LndBackend(lnd.target, lnd.tls_cert, path, "regtest")


async def test_the_documented_macaroons_are_enough(lnd: FakeLnd, tmp_path: Path) -> None:
    assert readme_permissions() == [
        "info:read", "invoices:read", "invoices:write", "offchain:read", "offchain:write"
    ]  # fmt: skip
    assert len(narrowest_permissions()) == 10
    for name, permissions in (("readme", readme_permissions()), ("uri", narrowest_permissions())):
        node = baked(lnd, tmp_path / f"{name}.macaroon", *permissions)
        await node.start()  # every RPC tried: none refused
        try:
            assert await node.missing_permissions() == {}
            created = await node.create_invoice(1_000, "works", 60)
            assert (await node.lookup_invoice(created.payment_hash)).state is InvoiceState.OPEN
        finally:
            await node.close()


async def test_a_macaroon_missing_permissions_is_refused_naming_them(
    lnd: FakeLnd, tmp_path: Path
) -> None:
    """lnd checks a macaroon per RPC: one without invoices:write and offchain:write would
    start, show 402s... and fail at the first invoice. satsgate refuses it at start."""
    lacking = [p for p in readme_permissions() if p not in ("invoices:write", "offchain:write")]
    node = baked(lnd, tmp_path / "lacking.macaroon", *lacking)
    with pytest.raises(BackendError) as refused:
        await node.start()
    message = str(refused.value)
    assert "lacks permissions satsgate needs" in message
    assert (
        "invoices:write (for AddInvoice, AddHoldInvoice, SettleInvoice, CancelInvoice)" in message
    )
    assert "offchain:write (for SendPaymentV2)" in message
    assert "info:read (" not in message and "offchain:read (" not in message
    assert "lncli bakemacaroon " + " ".join(readme_permissions()) in message
    # The tries created nothing and paid nothing.
    assert lnd.node.invoices == {} and lnd.node.payments == {}
    # One RPC missing from a uri: macaroon is named too.
    uris = [u for u in narrowest_permissions() if not u.endswith("/TrackPaymentV2")]
    with pytest.raises(BackendError, match=r"offchain:read \(for TrackPaymentV2\)\."):
        await baked(lnd, tmp_path / "uris.macaroon", *uris).start()
    # and satsgate itself refuses to start with it
    settings = make_settings(tmp_path / "data", backend="lnd")
    with pytest.raises(BackendError, match="lacks permissions"):
        ThreadedServer(settings, backend=baked(lnd, tmp_path / "l.macaroon", *lacking))


async def test_untrusted_certificate_is_refused(lnd: FakeLnd, tmp_path: Path) -> None:
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_cert, _ = make_tls_cert(other_dir)
    node = LndBackend(lnd.target, other_cert, lnd.macaroon_path, "regtest")
    with pytest.raises(BackendError, match="unreachable"):
        await asyncio.wait_for(node.start(), 40)
    await node.close()
    assert lnd.calls == 0  # nothing reached lnd over an unverified connection


async def test_unknown_and_expired_invoices(lnd: FakeLnd, backend: LndBackend) -> None:
    with pytest.raises(UnknownInvoice, match="unknown invoice"):
        await backend.lookup_invoice("cd" * 32)
    created = await backend.create_invoice(1_000, "short", 1)
    await asyncio.sleep(1.2)
    status = await backend.lookup_invoice(created.payment_hash)
    assert status.state is InvoiceState.EXPIRED  # lnd canceled it on expiry


@pytest.fixture
def other(lnd: FakeLnd) -> FakeLndNode:
    node = FakeLndNode(alias="payee")
    lnd.node.connect(node)
    return node


async def test_refund_in_flight_is_pending_never_failed(
    lnd: FakeLnd, backend: LndBackend, other: FakeLndNode
) -> None:
    lnd.node.outgoing = "hold"
    bolt11 = other.add_invoice("refund", 7_000, 600).payment_request
    result = await backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=1)
    assert result.state is PaymentState.PENDING
    assert (await backend.lookup_payment(result.payment_hash)).state is PaymentState.PENDING
    # Paying again while in flight: ALREADY_EXISTS -> tracked -> still pending, one payment.
    again = await backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=1)
    assert again.state is PaymentState.PENDING
    assert lnd.node.payments[result.payment_hash].attempts == 1
    lnd.node.release(succeed=True)
    done = await backend.lookup_payment(result.payment_hash)
    assert done.state is PaymentState.SUCCEEDED and done.fee_msat == 1_000
    assert done.preimage is not None and len(done.preimage) == 64
    # Already paid: ALREADY_EXISTS -> TrackPaymentV2 -> succeeded, nothing sent twice.
    third = await backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=5)
    assert third.state is PaymentState.SUCCEEDED
    assert lnd.node.payments[result.payment_hash].attempts == 1
    assert other.lookup(bytes.fromhex(result.payment_hash)).state == "SETTLED"


async def test_an_amountless_invoice_is_paid_with_amt_msat(
    lnd: FakeLnd, backend: LndBackend, other: FakeLndNode
) -> None:
    """A payment session's return invoice: SendPaymentV2 carries the amount (amt_msat)."""
    bolt11 = other.add_invoice("session refund", 0, 600).payment_request
    refused = await backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=5)
    assert refused.state is PaymentState.FAILED  # lnd: an amount must be given
    paid = await backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=5, amount_msat=4_321)
    assert paid.state is PaymentState.SUCCEEDED
    invoice = other.lookup(bytes.fromhex(paid.payment_hash))
    assert (invoice.state, invoice.amt_paid_msat) == ("SETTLED", 4_321)
    fixed = other.add_invoice("fixed", 7_000, 600).payment_request
    twice = await backend.pay_invoice(fixed, max_fee_msat=2_000, timeout_s=5, amount_msat=7_000)
    assert twice.state is PaymentState.FAILED  # lnd refuses an amount beside the invoice's


async def test_refund_failures_are_final_only_when_lnd_says_so(
    lnd: FakeLnd, backend: LndBackend, other: FakeLndNode
) -> None:
    bolt11 = other.add_invoice("refund", 7_000, 600).payment_request
    # The fee limit is below the route's fee: no route, failed, nothing left in flight.
    capped = await backend.pay_invoice(bolt11, max_fee_msat=999, timeout_s=5)
    assert capped.state is PaymentState.FAILED
    assert capped.failure_reason == "FAILURE_REASON_NO_ROUTE"
    assert (await backend.lookup_payment(capped.payment_hash)).state is PaymentState.FAILED
    # A failed payment may be tried again, and then it succeeds.
    retried = await backend.pay_invoice(bolt11, max_fee_msat=1_000, timeout_s=5)
    assert retried.state is PaymentState.SUCCEEDED
    # An expired invoice is refused before anything is sent.
    expired = other.add_invoice("old", 1_000, 1).payment_request
    await asyncio.sleep(1.1)
    refused = await backend.pay_invoice(expired, max_fee_msat=1_000, timeout_s=5)
    assert refused.state is PaymentState.FAILED and "expired" in (refused.failure_reason or "")
    # Never tried: no record at lnd.
    never = await backend.lookup_payment("ef" * 32)
    assert never.state is PaymentState.FAILED


async def test_lnd_unreachable_mid_payment_is_pending(
    lnd: FakeLnd, backend: LndBackend, other: FakeLndNode
) -> None:
    lnd.node.outgoing = "hold"
    bolt11 = other.add_invoice("refund", 7_000, 600).payment_request
    task = asyncio.create_task(backend.pay_invoice(bolt11, max_fee_msat=2_000, timeout_s=30))
    for _ in range(100):
        if lnd.node.payments:
            break
        await asyncio.sleep(0.02)
    await asyncio.to_thread(lnd.stop)
    result = await asyncio.wait_for(task, 20)
    assert result.state is PaymentState.PENDING  # the HTLC may still be out there


# -- through satsgate ------------------------------------------------------------------------


async def status_soon(
    srv: ThreadedServer, payment_id: str, wanted: PaymentStatus, wait_s: float = 5
) -> PaymentStatus | None:
    """The payment's status in satsgate's store once it is ``wanted`` (or at the deadline)."""

    async def read() -> PaymentStatus | None:
        payment = await srv.store.payments.get(payment_id)
        return None if payment is None else payment.status

    status = None
    for _ in range(int(wait_s / 0.025)):
        status = srv.call(read)
        if status is wanted:
            break
        await asyncio.sleep(0.025)
    return status


async def test_paid_while_satsgate_was_down_is_applied_on_start(
    lnd: FakeLnd, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path / "data", backend="lnd")
    hashes = []
    for round_ in range(2):  # first with the cursor at 0, then above it
        srv = ThreadedServer(settings, backend=backend_for(lnd))
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            resp = await client.post("/api/l402/render-card", json=CARD)
        assert resp.status_code == 402, resp.text
        challenge = resp.json()
        srv.stop()
        await pay(lnd, challenge["invoice"])  # paid while satsgate is down
        hashes.append(challenge["paymentHash"])

        srv = ThreadedServer(settings, backend=backend_for(lnd))
        try:
            # Applied by the settlement watcher on start, with no request asking.
            status = await status_soon(srv, challenge["paymentId"], PaymentStatus.PAID)
            assert status is PaymentStatus.PAID, round_
            assert srv.call(partial(srv.store.cursors.get, "settle:lnd")) == round_ + 1
        finally:
            srv.stop()


@pytest.mark.slow  # a satsgate process: its start-up imports every engine (about 7 s)
def test_paid_call_through_satsgate_serve_backend_lnd(lnd: FakeLnd, tmp_path: Path) -> None:
    """The command an operator runs, against lnd: 402 -> the payer's node pays -> 200."""
    port = free_port()
    config = tmp_path / "satsgate.toml"
    # The LND keys from the config file; the backend and network on the command line.
    config.write_text(
        f'lnd_grpc = "{lnd.target}"\nlnd_tls_cert = "{lnd.tls_cert}"\n'
        f'lnd_macaroon = "{lnd.macaroon_path}"\n'
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "satsgate.cli",
            "serve",
            "--config",
            str(config),
            "--backend",
            "lnd",
            "--network",
            "regtest",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{url}/api/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "satsgate did not start"
                time.sleep(0.1)
        assert health.json()["backend"] == "lnd" and health.json()["network"] == "regtest"

        resp = httpx.post(f"{url}/api/l402/render-card", json=CARD, timeout=30)
        assert resp.status_code == 402, resp.text
        found = re.search(
            r'L402 macaroon="(.*?)", invoice="(.*?)"',
            ", ".join(resp.headers.get_list("www-authenticate")),
        )
        assert found, resp.headers
        macaroon, invoice = found.groups()
        invoice_hash = bytes.fromhex(resp.json()["paymentHash"])
        assert lnd.node.lookup(invoice_hash).value_msat == resp.json()["amountSats"] * 1000
        preimage = lnd.node.pay_from_outside(invoice)

        paid = httpx.post(
            f"{url}/api/l402/render-card",
            json=CARD,
            timeout=60,
            headers={"Authorization": f"L402 {macaroon}:{preimage}"},
        )
        assert paid.status_code == 200, paid.text
        assert base64.b64decode(paid.json()["image_base64"]).startswith(b"\x89PNG")
        other = {**CARD, "title": "another"}
        again = httpx.post(
            f"{url}/api/l402/render-card",
            json=other,
            timeout=60,
            headers={"Authorization": f"L402 {macaroon}:{preimage}"},
        )
        assert again.status_code == 402, again.text  # one payment, one call: pay again
        assert again.json()["error_code"] == "PAYMENT_ALREADY_USED"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        finally:
            if proc.stderr:
                proc.stderr.close()
    assert proc.returncode == 0
