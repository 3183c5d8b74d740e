"""Refunds: a failure after payment always carries a one-time LNURL-withdraw that pays once."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coincurve
import httpx
import pytest
from lnurl.helpers import url_decode

from satsgate.appkeys import RATES
from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode
from satsgate.lightning.invoices import decode_invoice, sign_invoice
from satsgate.server.app import REFUNDS
from satsgate.services.base import (
    Params,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
    request_digest,
)
from satsgate.services.catalog.rates import REFERENCE_BTC_USD, RateBook, Snapshot
from satsgate.store import RefundStatus
from tests.conftest import STORES, ThreadedServer, dev_pay, make_settings, store_url_for
from tests.ledger_check import assert_ledger_balances
from tests.store_access import store_write

OTHER_NODE = coincurve.PrivateKey()


# The money tests run on each engine of the store: the module's server (and each fresh
# one) once on SQLite and once on PostgreSQL.
@pytest.fixture(scope="module", params=STORES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(
        make_settings(tmp_path_factory.mktemp("refunds"), store_url=store_url_for(request))
    )
    yield srv
    srv.stop()


@pytest.fixture(params=STORES)
def fresh_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(make_settings(tmp_path / "data", store_url=store_url_for(request)))
    yield srv
    srv.stop()


def external_invoice(
    amount_msat: int | None,
    *,
    network: str = "regtest",
    expiry_s: int = 600,
    key: coincurve.PrivateKey = OTHER_NODE,
) -> str:
    """An invoice of some other node (a wallet claiming its refund)."""
    preimage = os.urandom(32)
    return sign_invoice(
        network=network,
        amount_msat=amount_msat or 1,
        payment_hash=hashlib.sha256(preimage).hexdigest(),
        payment_secret=os.urandom(32).hex(),
        description="refund",
        expiry_s=expiry_s,
        private_key_hex=key.secret.hex(),
    )


class NoParams(Params):
    size: int = 1


async def _broken(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    raise EngineError(ErrorCode.TIMEOUT, "the upstream engine timed out")


async def _crashing(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    raise RuntimeError("bug in an engine")


async def _fine(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    return ServiceResult({"ok": True, "size": params.size})


def make_spec(handler: Any, per_size_sats: int = 10) -> ServiceSpec[NoParams]:
    return ServiceSpec(
        slug="test-service",
        tool_name="test_service",
        category="test",
        title="Test",
        description="A service defined by the test, standing in for a provider.",
        params=NoParams,
        price_msat=lambda p, _book: p.size * per_size_sats * 1000,
        handler=handler,
    )


async def paid_payment(
    server: ThreadedServer, client: httpx.AsyncClient, spec: ServiceSpec[NoParams], amount_sats: int
) -> Any:
    ch = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=amount_sats, digest="d", via="http")
    )
    await dev_pay(client, ch.payment.bolt11)
    return ch.payment


def execute(server: ThreadedServer, payment: Any, spec: Any, size: int = 1) -> Any:
    return server.call(lambda: server.gate.execute(payment, spec, NoParams(size=size)))


async def withdraw(client: httpx.AsyncClient, refund: dict[str, Any]) -> dict[str, Any]:
    url = url_decode(refund["lnurl_withdraw"])
    resp = await client.get(url)
    assert resp.status_code == 200
    return dict(resp.json())


async def claim(client: httpx.AsyncClient, info: dict[str, Any], invoice: str) -> dict[str, Any]:
    resp = await client.get(info["callback"], params={"k1": info["k1"], "pr": invoice})
    assert resp.status_code == 200  # LUD-03: 200 with a status in both outcomes
    return dict(resp.json())


async def wait_refund_status(server: ThreadedServer, k1: str, status: str) -> None:
    for _ in range(100):
        refund = server.call(lambda: server.store.refunds.get_by_k1(k1))
        if str(refund.status) == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"refund never became {status}")


async def test_engine_failure_after_payment_refunds_in_full(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_broken)
    payment = await paid_payment(server, client, spec, 10)
    with pytest.raises(ApiError) as err:
        execute(server, payment, spec)
    assert err.value.code == "TIMEOUT"
    refund = err.value.refund
    assert refund is not None and refund["amount_sats"] == 10 == refund["refund_amount"]
    assert refund["status"] == "open" and refund["charge_id"].startswith("rf_")
    assert refund["lnurl_withdraw"].startswith("LNURL1")
    body = err.value.envelope()
    assert body["retry_after_seconds"] == 20 and body["refund"] == refund

    info = await withdraw(client, refund)
    assert info["tag"] == "withdrawRequest"
    assert info["minWithdrawable"] == info["maxWithdrawable"] == 10_000
    invoice = external_invoice(10_000)
    assert await claim(client, info, invoice) == {"status": "OK"}
    await wait_refund_status(server, info["k1"], "paid")
    paid = [
        p
        for p in (await client.get("/api/dev/outgoing")).json()["payments"]
        if p["bolt11"] == invoice
    ]
    assert len(paid) == 1 and paid[0]["amount_msat"] == 10_000
    # The link is spent: the wallet sees an error, a second claim is refused.
    assert (await withdraw(client, refund))["status"] == "ERROR"
    assert (await claim(client, info, external_invoice(10_000)))["status"] == "ERROR"


async def test_unexpected_crash_still_refunds(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_crashing)
    payment = await paid_payment(server, client, spec, 10)
    with pytest.raises(ApiError) as err:
        execute(server, payment, spec)
    assert err.value.code == "L402_UPSTREAM_FAILED"
    assert err.value.refund is not None and err.value.refund["amount_sats"] == 10


async def test_overpayment_is_refunded_the_difference(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_fine)
    payment = await paid_payment(server, client, spec, 30)
    result = execute(server, payment, spec, size=1)  # costs 10 of the 30 paid
    assert result.body["ok"] is True
    assert result.body["refund"]["amount_sats"] == 20


async def test_underpayment_is_refused_and_refunded_in_full(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_fine)
    payment = await paid_payment(server, client, spec, 10)
    with pytest.raises(ApiError) as err:
        execute(server, payment, spec, size=5)  # costs 50
    assert err.value.code == "PAYMENT_INSUFFICIENT"
    assert err.value.refund is not None and err.value.refund["amount_sats"] == 10
    # The payment is closed: nothing more can be served with it.
    with pytest.raises(ApiError) as again:
        execute(server, payment, spec, size=1)
    assert again.value.code == "PAYMENT_ALREADY_USED"


async def test_refunds_never_exceed_what_was_paid(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_fine)
    payment = await paid_payment(server, client, spec, 30)
    execute(server, payment, spec, size=1)  # refunds 20 of 30
    fresh = server.call(lambda: server.store.payments.get(payment.payment_id))
    second = server.call(lambda: server.app[REFUNDS].refund_spent(fresh, 20_000, "again"))
    assert second is None  # 20 + 20 > 30
    third = server.call(lambda: server.app[REFUNDS].refund_spent(fresh, 10_000, "rest"))
    assert third is not None and third["amount_sats"] == 10


async def test_claims_are_checked_before_paying(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_broken)
    info = await refund_link_of_failed_call(server, client)
    own = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=10, digest="d", via="http")
    ).payment.bolt11
    bad = {
        "wrong amount": external_invoice(9_000),
        "too much": external_invoice(11_000),
        "other network": external_invoice(10_000, network="testnet"),
        "expired": sign_invoice(
            network="regtest",
            amount_msat=10_000,
            payment_hash="00" * 32,
            payment_secret="11" * 32,
            description="x",
            expiry_s=1,
            private_key_hex=OTHER_NODE.secret.hex(),
            created_at=int(time.time()) - 10,
        ),
        "garbage": "lnbcrt1notaninvoice",
    }
    for name, invoice in bad.items():
        answer = await claim(client, info, invoice)
        assert answer["status"] == "ERROR", name
    own_answer = await claim(client, info, own)  # right amount, but our own node's invoice
    assert own_answer == {"status": "ERROR", "reason": "The invoice is this node's own invoice."}
    # None of these consumed the link.
    assert (await claim(client, info, external_invoice(10_000)))["status"] == "OK"


async def test_an_invoice_the_node_paid_already_is_refused(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """A node pays an invoice once: a second refund claimed with the first one's invoice
    would be answered "already paid" and read as paid with nothing moved."""
    first = await refund_link_of_failed_call(server, client)
    invoice = external_invoice(10_000)
    assert await claim(client, first, invoice) == {"status": "OK"}
    await wait_refund_status(server, first["k1"], "paid")
    second = await refund_link_of_failed_call(server, client)
    answer = await claim(client, second, invoice)
    assert answer == {
        "status": "ERROR",
        "reason": "The invoice was paid already: send a fresh one.",
    }
    refund = server.call(lambda: server.store.refunds.get_by_k1(second["k1"]))
    assert str(refund.status) == "open"  # the link is not consumed
    assert await claim(client, second, external_invoice(10_000)) == {"status": "OK"}
    await wait_refund_status(server, second["k1"], "paid")
    outgoing = (await client.get("/api/dev/outgoing")).json()["payments"]
    assert len([p for p in outgoing if p["bolt11"] == invoice]) == 1


async def test_concurrent_claims_pay_exactly_once(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    info = await refund_link_of_failed_call(server, client)
    invoices = [external_invoice(10_000) for _ in range(20)]
    answers = await asyncio.gather(*(claim(client, info, inv) for inv in invoices))
    assert sorted(a["status"] for a in answers) == ["ERROR"] * 19 + ["OK"]
    await wait_refund_status(server, info["k1"], "paid")
    outgoing = (await client.get("/api/dev/outgoing")).json()["payments"]
    assert sum(1 for p in outgoing if p["bolt11"] in invoices) == 1


async def test_two_links_claimed_at_once_with_one_invoice_pay_once(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """Both claims check with the node before either pays (nothing paid yet), then claim:
    the invoice binds one link; the other is refused and stays open. Before, both read as
    paid (20,000 msat counted refunded) while the node paid the invoice once."""
    first = await refund_link_of_failed_call(server, client)
    second = await refund_link_of_failed_call(server, client)
    invoice = external_invoice(10_000)
    refunds = server.app[REFUNDS]

    async def both() -> list[dict[str, Any]]:
        answers = await asyncio.gather(
            refunds.withdraw_callback(first["k1"], invoice),
            refunds.withdraw_callback(second["k1"], invoice),
        )
        await refunds.wait_payouts()
        return list(answers)

    answers = server.call(both)
    reason = "The invoice pays another refund already: send a fresh one."
    refused = {"status": "ERROR", "reason": reason}
    assert sorted(answers, key=str) == sorted([{"status": "OK"}, refused], key=str)
    get_link = server.store.refunds.get_by_k1
    links = [server.call(functools.partial(get_link, info["k1"])) for info in (first, second)]
    statuses = sorted(str(link.status) for link in links)
    assert statuses == ["open", "paid"]
    outgoing = (await client.get("/api/dev/outgoing")).json()["payments"]
    assert len([p for p in outgoing if p["bolt11"] == invoice]) == 1
    assert_ledger_balances(server)


async def test_a_late_answer_about_an_earlier_payout_leaves_the_later_claim_alone(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """A claim ends by what the node says of its own invoice: an answer about an earlier
    attempt (a payout task that outlived its check-back, another instance's reconcile)
    that failed must not reopen the claim being paid now, which a third claim would
    then pay a second time."""
    info = await refund_link_of_failed_call(server, client)
    links, k1 = server.store.refunds, info["k1"]
    first, second = (decode_invoice(external_invoice(10_000)) for _ in range(2))
    now = int(time.time())
    assert server.call(lambda: links.claim(k1, "lnbc-first", first.payment_hash, now))
    assert server.call(lambda: links.settle_claim(k1, first.payment_hash, RefundStatus.OPEN, now))
    assert server.call(lambda: links.claim(k1, "lnbc-second", second.payment_hash, now))
    assert not server.call(
        lambda: links.settle_claim(k1, first.payment_hash, RefundStatus.OPEN, now)
    )
    link = server.call(lambda: links.get_by_k1(k1))
    assert (str(link.status), link.payout_hash) == ("claiming", second.payment_hash)
    assert server.call(lambda: links.settle_claim(k1, second.payment_hash, RefundStatus.PAID, now))


async def test_a_refund_of_part_of_a_sat_is_asked_for_to_the_msat(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """The recovery page names the amount a wallet's invoice must carry: an invoice for
    the rounded sats would be refused as not exact."""
    spec = make_spec(_fine)
    payment = await paid_payment(server, client, spec, 10)
    execute(server, payment, spec)
    refund = server.call(lambda: server.app[REFUNDS].refund_spent(payment, 2_500, "partial"))
    assert refund is not None
    page = await client.post("/recover", data={"refund_secret": refund["refund_secret"]})
    assert "Refund of 2500 msat (2.500 sat)" in page.text
    assert "an invoice for exactly 2500 msat (2.500 sat)" in page.text
    form = {"refund_secret": refund["refund_secret"], "invoice": external_invoice(2_500)}
    paid = await client.post("/recover/payout", data=form)
    assert 'id="refund-status">paid<' in paid.text, paid.text[-600:]


async def test_a_link_past_its_expiry_says_it_expired_before_the_sweep_marks_it(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    info = await refund_link_of_failed_call(server, client)
    past = int(time.time()) - 1
    store_write(server.settings, "UPDATE refunds SET expires_at = ? WHERE k1 = ?", past, info["k1"])
    answer = (await client.get(f"{server.url}/api/lnurlw/{info['k1']}")).json()
    assert answer == {"status": "ERROR", "reason": "This refund link expired unclaimed."}


async def refund_link_of_failed_call(
    server: ThreadedServer, client: httpx.AsyncClient
) -> dict[str, Any]:
    """Pay for a call that fails; return the withdraw request of its refund link."""
    spec = make_spec(_broken)
    payment = await paid_payment(server, client, spec, 10)
    with pytest.raises(ApiError) as err:
        execute(server, payment, spec)
    assert err.value.refund is not None
    return await withdraw(client, err.value.refund)


async def test_pending_payout_is_never_treated_as_failed(
    fresh_server: ThreadedServer,
) -> None:
    server = fresh_server
    async with httpx.AsyncClient(base_url=server.url) as client:
        info = await refund_link_of_failed_call(server, client)
        await client.post("/api/dev/outgoing-mode", json={"mode": "pending"})
        assert (await claim(client, info, external_invoice(10_000)))["status"] == "OK"
        await wait_refund_status(server, info["k1"], "claiming")
        # While pending, another claim is refused and reconcile leaves it alone.
        assert (await claim(client, info, external_invoice(10_000)))["status"] == "ERROR"
        assert server.call(server.app[REFUNDS].reconcile) == 0
        await wait_refund_status(server, info["k1"], "claiming")


async def test_failed_payout_reopens_the_link(fresh_server: ThreadedServer) -> None:
    server = fresh_server
    async with httpx.AsyncClient(base_url=server.url) as client:
        info = await refund_link_of_failed_call(server, client)
        await client.post("/api/dev/outgoing-mode", json={"mode": "fail"})
        assert (await claim(client, info, external_invoice(10_000)))["status"] == "OK"
        await wait_refund_status(server, info["k1"], "open")
        await client.post("/api/dev/outgoing-mode", json={"mode": "succeed"})
        assert (await claim(client, info, external_invoice(10_000)))["status"] == "OK"
        await wait_refund_status(server, info["k1"], "paid")


async def test_ledger_balances(server: ThreadedServer) -> None:
    totals = assert_ledger_balances(server)["totals"]
    assert totals["received_msat"] == (
        totals["earned_msat"] + totals["refunded_msat"] + totals["held_msat"] + totals["open_msat"]
    )


async def test_an_expired_link_can_be_issued_anew_once(
    fresh_server: ThreadedServer,
) -> None:
    server = fresh_server
    async with httpx.AsyncClient(base_url=server.url) as client:
        spec = make_spec(_broken)
        payment = await paid_payment(server, client, spec, 10)
        with pytest.raises(ApiError):
            execute(server, payment, spec)
        fresh = server.call(lambda: server.store.payments.get(payment.payment_id))
        refunds = server.app[REFUNDS]
        # Nothing left while the first link is live.
        assert server.call(lambda: refunds.refund_remaining(fresh, "operator")) is None
        far_future = int(time.time()) + 10 * 365 * 86400
        assert server.call(lambda: server.store.refunds.expire(far_future)) == 1
        before = server.call(server.store.ledger.totals)
        assert before["refunded_msat"] == 0  # an expired link stays earned
        again = server.call(lambda: refunds.refund_remaining(fresh, "operator"))
        assert again is not None and again["amount_sats"] == 10
        assert server.call(lambda: refunds.refund_remaining(fresh, "operator")) is None
        after = server.call(server.store.ledger.totals)
        assert after["refunded_msat"] == 10_000
        assert after["received_msat"] == (
            after["earned_msat"] + after["refunded_msat"] + after["open_msat"]
        )


async def _credential_call(
    server: ThreadedServer, payment: Any, preimage: str, spec: ServiceSpec[NoParams], size: int
) -> Any:
    """A paid call through the credential path (derived root key, one-statement spend)."""
    macaroon = server.gate.challenge_of(payment).macaroon_b64

    async def go() -> Any:
        verified = await server.gate.verify_authorization([f"L402 {macaroon}:{preimage}"], spec)
        assert verified.payment is None  # the fast path: the spend reads the row
        result, _ = await server.gate.execute_credential(verified, spec, NoParams(size=size))
        return result

    return server.call(go)


async def test_credential_path_refunds_overpayment_and_refuses_underpayment(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_fine)
    over = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=30, digest="d", via="http")
    ).payment
    preimage = await dev_pay(client, over.bolt11)
    result = await _credential_call(server, over, preimage, spec, size=1)
    assert result.body["refund"]["amount_sats"] == 20

    under = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=10, digest="d", via="http")
    ).payment
    preimage = await dev_pay(client, under.bolt11)
    with pytest.raises(ApiError) as err:
        await _credential_call(server, under, preimage, spec, size=5)
    assert err.value.code == "PAYMENT_INSUFFICIENT"
    assert err.value.refund is not None and err.value.refund["amount_sats"] == 10
    refunded = server.call(lambda: server.store.payments.get(under.payment_id))
    assert refunded is not None and str(refunded.status) == "refunded"


async def test_a_quote_is_kept_where_the_rate_book_now_prices_the_same_request_higher(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """A BTC-pegged price quoted by one rate book and called where another prices it
    higher (another instance's book, each keeps its own; or the fallback rates after a
    restart): the very request the 402 priced is served at its quote, on both paths; a
    different request, or the same one over an hour after its 402, is priced now, and
    refused when it costs more than was paid."""
    spec = ServiceSpec(
        slug="test-pegged", tool_name="test_pegged", category="test", title="Pegged",
        description="A fiat-cost service.", params=NoParams,
        price_msat=lambda p, book: book.msat(p.size * 10_000), handler=_fine,
    )  # fmt: skip

    async def quoted(size: int, digest_of: int) -> tuple[Any, str]:
        digest = request_digest(spec.slug, NoParams(size=digest_of))
        sats = size * 10
        ch = server.call(
            lambda: server.gate.create_payment(spec, amount_sats=sats, digest=digest, via="http")
        )
        return ch.payment, await dev_pay(client, ch.payment.bolt11)

    same, _ = await quoted(2, digest_of=2)
    by_credential, preimage = await quoted(2, digest_of=2)
    other, _ = await quoted(1, digest_of=2)  # paid for size 2's digest, called with size 1
    stale, _ = await quoted(2, digest_of=2)  # its 402 over an hour ago: priced now
    server.call(
        lambda: server.store.db.run_sync(
            lambda conn: conn.execute(
                "UPDATE payments SET created_at = created_at - 7200 WHERE payment_id = ?",
                (stale.payment_id,),
            )
        )
    )
    app_rates = server.app[RATES]
    original = app_rates.book
    # BTC at half the reference price: this instance's book prices pegged calls double.
    app_rates.install(RateBook((Snapshot(REFERENCE_BTC_USD / 2, time.time(), "test"),)))
    try:
        assert "refund" not in execute(server, same, spec, size=2).body
        assert (
            "refund" not in (await _credential_call(server, by_credential, preimage, spec, 2)).body
        )
        for refused, size in ((other, 1), (stale, 2)):
            with pytest.raises(ApiError) as err:
                execute(server, refused, spec, size=size)
            assert err.value.code == "PAYMENT_INSUFFICIENT"
    finally:
        app_rates.install(original)
    payments, refunds = server.store.payments, server.store.refunds
    for payment_id in (same.payment_id, by_credential.payment_id):
        row = server.call(functools.partial(payments.get, payment_id))
        assert str(row.status) == "spent"
        assert server.call(functools.partial(refunds.for_payment, payment_id)) == []
    assert_ledger_balances(server)


async def _delivers_half(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    # Quoted per item; only half the items could be produced.
    return ServiceResult({"ok": True}, charged_msat=params.size // 2 * 10_000)


async def test_partial_delivery_refunds_what_was_not_earned(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_delivers_half)
    payment = await paid_payment(server, client, spec, 50)  # 10 more than the 40 quoted
    result = execute(server, payment, spec, size=4)  # earns 20 of the 40 quoted
    assert "refund" not in result.body
    assert result.body["partial_refund"]["amount_sats"] == 30  # 50 paid - 20 earned
    assert_ledger_balances(server)
    refunds = server.call(lambda: server.store.refunds.for_payment(payment.payment_id))
    assert [r.amount_msat for r in refunds] == [30_000]
