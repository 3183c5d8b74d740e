"""A paymentId is no bearer credential for a payment made through an HTTP challenge:
knowing it, nobody spends the call over MCP, has it refunded, or reads its refund
secrets; checkout links carry a token of their own; a job id shows no refund secret."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import httpx

from satsgate.engines import EngineError
from satsgate.errors import ErrorCode
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.store import PaymentStatus
from tests.conftest import ThreadedServer, dev_pay
from tests.mcp_client import tool_result as tool
from tests.payments.test_gateway import CARD
from tests.payouts.test_refunds import NoParams, make_spec


async def paid_http_challenge(
    server: ThreadedServer, client: httpx.AsyncClient
) -> tuple[dict[str, Any], str]:
    """A render-card 402 as the payer gets it, paid and seen paid by satsgate (the dev
    node's pay returns before the settlement stream has reached the store): (its body,
    the preimage)."""
    resp = await client.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402
    body = resp.json()
    preimage = await dev_pay(client, body["invoice"])
    for _ in range(500):
        if status_of(server, body["paymentId"]) is PaymentStatus.PAID:
            return body, preimage
        await asyncio.sleep(0.01)
    raise AssertionError("the paid invoice never settled in the store")


def status_of(server: ThreadedServer, payment_id: str) -> PaymentStatus:
    payment = server.call(lambda: server.store.payments.get(payment_id))
    assert payment is not None
    return PaymentStatus(payment.status)


async def test_an_http_payment_is_not_spent_by_its_payment_id_over_mcp(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    challenge, preimage = await paid_http_challenge(server, client)
    stolen = await tool(client, "render_card", {"paymentId": challenge["paymentId"], **CARD})
    assert stolen["isError"] is True
    assert stolen["structuredContent"]["error_code"] == "PAYMENT_INVALID"
    assert status_of(server, challenge["paymentId"]) is PaymentStatus.PAID  # nothing spent
    # The payer's own call, with the credential, is served.
    own = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {challenge['macaroon']}:{preimage}"},
    )
    assert own.status_code == 200, own.text
    # Control: an MCP payment is spent by its paymentId, the MCP caller's handle.
    created = await tool(client, "create_payment", {"toolName": "render_card"})
    mcp_payment = created["structuredContent"]
    await dev_pay(client, mcp_payment["lightningInvoice"])
    served = await tool(client, "render_card", {"paymentId": mcp_payment["paymentId"], **CARD})
    assert served["isError"] is False, served


async def test_an_http_payment_is_refunded_only_with_its_credential(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    challenge, preimage = await paid_http_challenge(server, client)
    payment_id = challenge["paymentId"]
    # The payment's own invoice asks for a refund link: who holds the link holds the money.
    request = {"paymentId": payment_id, "invoice": challenge["invoice"]}
    stolen = await client.post("/api/l402/refund", json=request)
    assert stolen.status_code == 402, stolen.text
    assert stolen.json()["error_code"] == "PAYMENT_INVALID"
    assert "refund" not in stolen.json()
    wrong = await client.post(
        "/api/l402/refund",
        json=request,
        headers={"Authorization": f"L402 {challenge['macaroon']}:{'00' * 32}"},
    )
    assert wrong.json()["error_code"] == "PAYMENT_INVALID"
    over_mcp = await tool(client, "request_refund", request)
    assert over_mcp["isError"] is True
    assert over_mcp["structuredContent"]["error_code"] == "PAYMENT_INVALID"
    assert status_of(server, payment_id) is PaymentStatus.PAID  # still the payer's to use

    own = await client.post(
        "/api/l402/refund",
        json=request,
        headers={"Authorization": f"L402 {challenge['macaroon']}:{preimage}"},
    )
    assert own.status_code == 200, own.text
    assert own.json()["refund"]["refund_secret"]
    assert status_of(server, payment_id) is PaymentStatus.REFUNDED

    # An MCP payment is refunded on its paymentId alone (the spec's design).
    created = (await tool(client, "create_payment", {"toolName": "render_card"}))[
        "structuredContent"
    ]
    await dev_pay(client, created["lightningInvoice"])
    refunded = await tool(
        client,
        "request_refund",
        {"paymentId": created["paymentId"], "invoice": created["lightningInvoice"]},
    )
    assert refunded["isError"] is False, refunded


async def test_checkout_links_carry_a_token_of_their_own(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    resp = await client.post("/api/l402/render-card", json=CARD)
    challenge = resp.json()
    payment_id, url = challenge["paymentId"], challenge["hostedCheckoutUrl"]
    assert payment_id not in url
    token = url.rsplit("/", 1)[1]
    page = await client.get(url)
    assert page.status_code == 200 and challenge["invoice"] in page.text
    assert payment_id not in page.text
    status = await client.get(f"/api/payments/{token}")
    assert status.status_code == 200 and "paymentId" not in status.json()
    assert payment_id not in status.text
    assert status.json()["hostedCheckoutUrl"] == url
    # A paymentId opens no checkout page; neither does a token satsgate did not mint.
    assert (await client.get(f"/checkout/{payment_id}")).status_code == 404
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    assert (await client.get(f"/checkout/{forged}")).status_code == 404
    assert (await client.get(f"/api/payments/{forged}")).status_code == 404
    # MCP: create_payment and check_payment_status hand out the same kind of link.
    created = (await tool(client, "create_payment", {"toolName": "render_card"}))[
        "structuredContent"
    ]
    assert created["paymentId"] not in created["hostedCheckoutUrl"]
    checked = (await tool(client, "check_payment_status", {"paymentId": created["paymentId"]}))[
        "structuredContent"
    ]
    assert checked["hostedCheckoutUrl"] == created["hostedCheckoutUrl"]


async def _fails(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    await asyncio.sleep(0.05)
    raise EngineError(ErrorCode.SERVICE_ERROR, "the provider is down")


async def test_a_job_id_shows_its_refund_secret_only_to_the_payer(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = replace(make_spec(_fails), mode="job", job_type="video")
    challenge = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=10, digest="d", via="http")
    )
    preimage = await dev_pay(client, challenge.payment.bolt11)
    accepted = server.call(lambda: server.gate.execute(challenge.payment, spec, NoParams()))
    poll_url = accepted.body["poll_url"]
    body: dict[str, Any] = {}
    for _ in range(100):
        body = (await client.get(poll_url)).json()
        if body["status"] == "FAILED":
            break
        await asyncio.sleep(0.05)
    # Anyone with the job id: the failure and the refund's amount, not what claims it.
    assert body["status"] == "FAILED" and body["refund"]["amount_sats"] == 10
    for secret in ("refund_secret", "lnurl_withdraw", "recover_url"):
        assert secret not in body["refund"]
    assert challenge.payment.payment_id not in str(body)
    job_id = accepted.body["requestId"]
    by_id = await client.get(
        "/api/l402/job-status",
        params={"requestId": job_id, "jobType": "video", "paymentId": challenge.payment.payment_id},
    )
    assert by_id.json()["status"] == "FAILED"
    assert "refund_secret" not in by_id.json()["refund"]  # an HTTP payment's id proves nothing
    over_mcp = await tool(
        client,
        "get_job_result",
        {"requestId": job_id, "jobType": "video", "paymentId": challenge.payment.payment_id},
    )
    assert "refund_secret" not in over_mcp["structuredContent"]["refund"]
    # The payer, polling with its credential, gets the link.
    auth = {"Authorization": f"L402 {challenge.macaroon_b64}:{preimage}"}
    own = (await client.get(poll_url, headers=auth)).json()
    refunds = server.call(lambda: server.store.refunds.for_payment(challenge.payment.payment_id))
    assert own["refund"]["refund_secret"] == refunds[0].k1
    assert own["refund"]["lnurl_withdraw"].startswith("LNURL1")
