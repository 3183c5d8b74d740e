"""What a routing node knows proves no payment (issue 28, hole 1 and its audit).

Every node on a Lightning payment's route learns its payment hash, its amount and,
before the payer does, its preimage. A session deposit's paymentId is
``dep_<payment hash>``; an L402/charge payment's paymentId is no secret either (it is in
the 402 body, and satsgate treats it as public: proof.py). Each test here plays such a
hop against a real server on loopback with the dev node, knowing only those, plus what
it can get from its own 402s, and tries to have the payment refunded to its own invoice
or to read its refund secrets; then the payer, with the credential satsgate issued it,
does what the hop could not.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from dataclasses import replace
from typing import Any

import httpx

from satsgate.lightning.invoices import decode_invoice
from satsgate.payments import mpp
from satsgate.store import PaymentStatus
from tests.conftest import ThreadedServer, dev_pay
from tests.faults.test_faults_theft import _fails, paid_http_challenge, status_of
from tests.mcp_client import call, rpc
from tests.mcp_client import tool_result as tool
from tests.payments.test_gateway import CARD
from tests.payments.test_sessions import Client, credential, unb64url
from tests.payouts.test_refunds import NoParams, external_invoice, make_spec


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def echo_of(header: str) -> dict[str, str]:
    """A Payment challenge's auth-params, as a credential echoes them."""
    pairs = (part.split("=", 1) for part in header[len("Payment ") :].split(", "))
    return {name: value.strip('"') for name, value in pairs}


def payment_credential(echo: dict[str, str], payload: dict[str, Any]) -> str:
    return "Payment " + b64url(json.dumps({"challenge": echo, "payload": payload}).encode())


async def hop_forgeries(client: httpx.AsyncClient, payment_hash: str, preimage: str) -> list[str]:
    """Every Authorization value a hop can build around a payment's preimage: a garbage
    macaroon, a real macaroon and real challenges of its own (from its own 402, unpaid)
    and a challenge it made up naming the victim's hash."""
    own = await client.post("/api/l402/render-card", json=CARD)
    assert own.status_code == 402
    macaroon = own.json()["macaroon"]
    values = [
        f"L402 {base64.b64encode(secrets.token_bytes(120)).decode()}:{preimage}",
        f"LSAT {base64.b64encode(b'garbage').decode()}:{preimage}",
        f"L402 {macaroon}:{preimage}",
    ]
    for header in own.headers.get_list("www-authenticate"):
        if not header.startswith("Payment "):
            continue
        echo = echo_of(header)
        for payload in (
            {"preimage": preimage},
            {"action": "open", "preimage": preimage, "returnInvoice": "x"},
            {"action": "topUp", "sessionId": payment_hash, "topUpPreimage": preimage},
        ):
            values.append(payment_credential(echo, payload))
    # A challenge of its own making, naming the victim's hash: its id cannot verify.
    request = b64url(json.dumps({"paymentHash": payment_hash, "depositInvoice": "x"}).encode())
    made_up = {
        "id": b64url(secrets.token_bytes(32)),
        "realm": "x",
        "method": "lightning",
        "intent": "session",
        "request": request,
        "expires": mpp.rfc3339(int(time.time()) + 600),
    }
    values.append(payment_credential(made_up, {"preimage": preimage}))
    return values


async def outgoing_to(client: httpx.AsyncClient, invoice: str) -> list[dict[str, Any]]:
    payments = (await client.get("/api/dev/outgoing")).json()["payments"]
    return [p for p in payments if p["bolt11"] == invoice]


async def hop_tries_refund(
    server: ThreadedServer,
    client: httpx.AsyncClient,
    payment_id: str,
    payment_hash: str,
    preimage: str,
) -> None:
    """The hop asks, in every way it can, to have ``payment_id`` refunded to its own
    invoice; nothing is refunded and nothing is paid to it."""
    amount_msat = server.call(lambda: server.store.payments.get(payment_id)).amount_msat
    loot = external_invoice(amount_msat)
    request = {"paymentId": payment_id, "invoice": loot}
    # The bare preimage (what the refund took before): refused, saying what to send.
    bare = await client.post("/api/l402/refund", json={**request, "preimage": preimage})
    assert bare.status_code == 400, bare.text
    assert bare.json()["error_code"] == "L402_INVALID_PARAMS"
    assert "Authorization header" in bare.json()["error"]
    over_mcp = await rpc(
        client,
        call(
            "tools/call", {"name": "request_refund", "arguments": {**request, "preimage": preimage}}
        ),
    )
    refused = over_mcp.json()["result"]
    assert refused["isError"] is True
    assert refused["structuredContent"]["error_code"] == "L402_INVALID_PARAMS"
    assert "as credential" in refused["structuredContent"]["error"]
    for forged in await hop_forgeries(client, payment_hash, preimage):
        resp = await client.post(
            "/api/l402/refund", json=request, headers={"Authorization": forged}
        )
        assert resp.json()["error_code"] == "PAYMENT_INVALID", (forged, resp.text)
        assert "refund" not in resp.json()
        mcp = await tool(client, "request_refund", {**request, "credential": forged})
        assert mcp["structuredContent"]["error_code"] == "PAYMENT_INVALID", forged
    assert status_of(server, payment_id) is PaymentStatus.PAID  # still the payer's
    assert await outgoing_to(client, loot) == []


async def paid_deposit(client: httpx.AsyncClient) -> tuple[dict[str, str], str, dict[str, Any]]:
    """A render-card 402's session challenge, its deposit paid: (challenge, preimage,
    the challenge's request)."""
    challenge, preimage = await Client(client).offer("render-card", CARD)
    return challenge, preimage, unb64url(challenge["request"])


async def wait_paid(server: ThreadedServer, payment_id: str) -> None:
    for _ in range(500):
        if status_of(server, payment_id) is PaymentStatus.PAID:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the paid invoice never settled in the store")


# -- hole 1: a session deposit, a top-up ------------------------------------------------------


async def test_a_hop_cannot_refund_a_session_deposit_to_itself(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    payer = Client(client)
    challenge, preimage, request = await paid_deposit(client)
    payment_hash = request["paymentHash"]
    # What the hop sees on the route: the hash and the amount of the invoice it forwards.
    routed = decode_invoice(request["depositInvoice"])
    assert routed.payment_hash == payment_hash
    deposit_id = f"dep_{payment_hash}"  # derived from the hash alone
    await wait_paid(server, deposit_id)
    await hop_tries_refund(server, client, deposit_id, payment_hash, preimage)

    # The payer's open still works: its deposit was not taken.
    opened = await payer.open_with(challenge, preimage, "render-card", CARD)
    assert opened.status_code == 200, opened.text
    assert (await payer.close()).status_code == 200


async def test_a_hop_cannot_refund_a_top_up_to_itself(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    payer = Client(client)
    assert (await payer.open("render-card", CARD)).status_code == 200
    # The payer pays a second deposit to top its session up; a hop on that payment's
    # route tries first.
    challenge, preimage, request = await paid_deposit(client)
    payment_hash = request["paymentHash"]
    await wait_paid(server, f"dep_{payment_hash}")
    await hop_tries_refund(server, client, f"dep_{payment_hash}", payment_hash, preimage)
    payload = {
        "action": "topUp",
        "sessionId": payer.session_id,
        "topUpPreimage": preimage,
        "token": payer.token,
    }
    topped = await payer.post("render-card", CARD, credential(challenge, payload))
    assert topped.status_code == 200, topped.text
    assert (await payer.close()).status_code == 200


async def test_the_payer_refunds_its_unopened_deposit_with_the_session_challenge(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    challenge, preimage, request = await paid_deposit(client)
    deposit_id = f"dep_{request['paymentHash']}"
    await wait_paid(server, deposit_id)
    own_invoice = external_invoice(int(request["depositAmount"]) * 1000)
    # The payer's proof: the session challenge it was issued, echoed, and the preimage
    # (as in an open credential, or a top-up's topUpPreimage).
    for payload in (
        {"action": "open", "preimage": preimage, "returnInvoice": "unused"},
        {"action": "topUp", "sessionId": "0" * 64, "topUpPreimage": preimage},
    ):
        proof = credential(challenge, payload)
        assert server.gate.verifier.owns(
            [proof], server.call(lambda: server.store.payments.get(deposit_id))
        )
    refunded = await client.post(
        "/api/l402/refund",
        json={"paymentId": deposit_id, "invoice": own_invoice},
        headers={"Authorization": proof},
    )
    assert refunded.status_code == 200, refunded.text
    assert refunded.json()["payout"] == "paying"
    assert status_of(server, deposit_id) is PaymentStatus.REFUNDED
    for _ in range(200):
        if await outgoing_to(client, own_invoice):
            break
        await asyncio.sleep(0.02)
    paid = await outgoing_to(client, own_invoice)
    assert [p["amount_msat"] for p in paid] == [int(request["depositAmount"]) * 1000]
    again = await client.post(
        "/api/l402/refund",
        json={"paymentId": deposit_id, "invoice": external_invoice(paid[0]["amount_msat"])},
        headers={"Authorization": proof},
    )
    assert again.json()["error_code"] == "REFUND_NOT_AVAILABLE"
    assert len(await outgoing_to(client, own_invoice)) == 1


async def test_a_deposit_paymentid_is_no_mcp_handle(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """``dep_<hash>`` is derived from the hash: it must never prove a payment the way an
    MCP create_payment paymentId does."""
    _, _, request = await paid_deposit(client)
    deposit_id = f"dep_{request['paymentHash']}"
    await wait_paid(server, deposit_id)
    mcp = await tool(
        client,
        "request_refund",
        {
            "paymentId": deposit_id,
            "invoice": external_invoice(int(request["depositAmount"]) * 1000),
        },
    )
    assert mcp["structuredContent"]["error_code"] == "PAYMENT_INVALID"
    assert "as credential" in mcp["structuredContent"]["error"]
    assert status_of(server, deposit_id) is PaymentStatus.PAID


# -- the same for any paid, unused L402 / charge payment --------------------------------------


async def test_a_hop_cannot_refund_an_unused_l402_payment_and_the_payer_can(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    challenge, preimage = await paid_http_challenge(server, client)
    payment_id, payment_hash = challenge["paymentId"], challenge["paymentHash"]
    await hop_tries_refund(server, client, payment_id, payment_hash, preimage)
    own_invoice = external_invoice(challenge["amountSats"] * 1000)
    own = await client.post(
        "/api/l402/refund",
        json={"paymentId": payment_id, "invoice": own_invoice},
        headers={"Authorization": f"L402 {challenge['macaroon']}:{preimage}"},
    )
    assert own.status_code == 200, own.text
    assert own.json()["refund"]["refund_secret"]
    assert status_of(server, payment_id) is PaymentStatus.REFUNDED
    for _ in range(200):
        if await outgoing_to(client, own_invoice):
            break
        await asyncio.sleep(0.02)
    assert len(await outgoing_to(client, own_invoice)) == 1


async def test_a_hop_cannot_refund_an_unused_charge_payment_and_the_payer_can_over_mcp(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    resp = await client.post("/api/l402/render-card", json=CARD)
    charge_header = next(
        v
        for v in resp.headers.get_list("www-authenticate")
        if v.startswith("Payment ") and 'intent="charge"' in v
    )
    body = resp.json()
    preimage = await dev_pay(client, body["invoice"])
    await wait_paid(server, body["paymentId"])
    await hop_tries_refund(server, client, body["paymentId"], body["paymentHash"], preimage)
    echo = echo_of(charge_header)
    mine = payment_credential(echo, {"preimage": preimage})
    own = await tool(
        client,
        "request_refund",
        {"paymentId": body["paymentId"], "invoice": body["invoice"], "credential": mine},
    )
    assert own["isError"] is False, own
    assert own["structuredContent"]["refund"]["refund_secret"]
    assert status_of(server, body["paymentId"]) is PaymentStatus.REFUNDED


async def test_an_expired_charge_challenge_still_proves_its_own_payment(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """The challenge was issued to the payer: once expired it buys no call, but the
    payment it paid is still the payer's to have refunded."""
    challenge, preimage = await paid_http_challenge(server, client)
    payment = server.call(lambda: server.store.payments.get(challenge["paymentId"]))
    expired = mpp.make_challenge(
        secret=server.gate.challenger._server_secret,
        realm=server.gate.challenger._realm,
        amount_sats=payment.amount_msat // 1000,
        bolt11=payment.bolt11,
        payment_hash=payment.payment_hash,
        network=server.settings.network,
        expires_at=int(time.time()) - 60,
        description=payment.description,
    )
    echo = {
        "id": expired.id,
        "realm": expired.realm,
        "method": "lightning",
        "intent": "charge",
        "request": expired.request,
        "expires": expired.expires,
    }
    value = payment_credential(echo, {"preimage": preimage})
    call = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": value})
    assert call.status_code == 402 and call.json()["error_code"] == "PAYMENT_EXPIRED", call.text
    own = await client.post(
        "/api/l402/refund",
        json={"paymentId": payment.payment_id, "invoice": payment.bolt11},
        headers={"Authorization": value},
    )
    assert own.status_code == 200, own.text


# -- refund secrets: a failed job's poll ------------------------------------------------------


async def test_a_hop_cannot_read_a_failed_jobs_refund_secrets_with_a_forged_credential(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = replace(make_spec(_fails), mode="job", job_type="video")
    challenge = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=10, digest="d", via="http")
    )
    preimage = await dev_pay(client, challenge.payment.bolt11)
    accepted = server.call(lambda: server.gate.execute(challenge.payment, spec, NoParams()))
    poll_url = accepted.body["poll_url"]  # no secret: anyone the job id reached has it
    for _ in range(100):
        if (await client.get(poll_url)).json()["status"] == "FAILED":
            break
        await asyncio.sleep(0.05)
    payment_hash = challenge.payment.payment_hash
    assert hashlib.sha256(bytes.fromhex(preimage)).hexdigest() == payment_hash
    for forged in await hop_forgeries(client, payment_hash, preimage):
        body = (await client.get(poll_url, headers={"Authorization": forged})).json()
        assert body["status"] == "FAILED"
        for secret in ("refund_secret", "lnurl_withdraw", "recover_url"):
            assert secret not in body["refund"], forged
        assert "rework_token" not in body and "paymentId" not in body
    own = (
        await client.get(
            poll_url, headers={"Authorization": f"L402 {challenge.macaroon_b64}:{preimage}"}
        )
    ).json()
    assert own["refund"]["refund_secret"]


# -- the dedup cache -------------------------------------------------------------------------


async def test_a_garbage_macaroon_around_a_known_preimage_gets_no_replay(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    """The payer's call is answered and kept for the dedup window; the same body with
    the preimage in a forged credential gets a fresh 402, never the payer's answer."""
    challenge, preimage = await paid_http_challenge(server, client)
    auth = f"L402 {challenge['macaroon']}:{preimage}"
    served = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert served.status_code == 200
    for forged in await hop_forgeries(client, challenge["paymentHash"], preimage):
        resp = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": forged}
        )
        assert resp.status_code in (400, 402), (forged, resp.status_code)  # malformed, refused
        assert resp.headers.get("X-Dedup") is None
        assert served.content not in resp.content
    replay = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert replay.status_code == 200 and replay.headers.get("X-Dedup") == "hit"
