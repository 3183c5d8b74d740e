"""A person pays, the agent calls: an HTTP 402's invoice paid from its checkout page (or
any wallet but the agent's) is finished by the agent that got the 402, with that 402's
own credential material and never with what the route knows."""

from __future__ import annotations

import hashlib
import html
from typing import Any

import httpx

from tests.conftest import ThreadedServer, dev_pay
from tests.payments.test_gateway import CARD
from tests.payments.test_payment_proof import echo_of, hop_forgeries, payment_credential

SLUG = "render-card"


async def _status(
    client: httpx.AsyncClient, payment_id: str, authorization: str | None = None
) -> dict[str, Any]:
    headers = {"Authorization": authorization} if authorization else {}
    resp = await client.get(f"/api/payments/{payment_id}", headers=headers)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def _paid_elsewhere(client: httpx.AsyncClient) -> tuple[httpx.Response, str]:
    """A 402, its invoice paid by someone else (the person at the checkout page): the
    preimage stays in that wallet, the agent holds only the 402."""
    got = await client.post(f"/api/l402/{SLUG}", json=CARD)
    assert got.status_code == 402, got.text
    page = await client.get(got.json()["hostedCheckoutUrl"])
    assert page.status_code == 200
    # What the page tells the person their HTTP agent does next, in its own words.
    note = html.unescape(page.text)
    assert "GET /api/payments/<paymentId of its 402>" in note
    assert "with this payment" not in note  # the MCP wording is not for an HTTP 402
    wallet_preimage = await dev_pay(client, got.json()["lightningInvoice"])
    return got, wallet_preimage


async def test_the_agent_finishes_an_l402_call_someone_else_paid(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    got, wallet_preimage = await _paid_elsewhere(client)
    body = got.json()
    payment_id, macaroon = body["paymentId"], body["macaroon"]

    # Without the 402's credential: paid, and no proof.
    public = await _status(client, payment_id)
    assert public["paid"] is True and public.get("preimage") is None
    # What a routing node can build around the preimage it saw proves nothing either.
    for forged in await hop_forgeries(client, body["paymentHash"], wallet_preimage):
        assert (await _status(client, payment_id, forged)).get("preimage") is None, forged
    # Another 402's macaroon is not this one's.
    other = (await client.post(f"/api/l402/{SLUG}", json=CARD)).json()["macaroon"]
    assert (await _status(client, payment_id, f"L402 {other}")).get("preimage") is None

    # The agent, with its macaroon alone, learns the preimage and calls as usual.
    handed = await _status(client, payment_id, f"L402 {macaroon}")
    preimage = handed["preimage"]
    assert preimage == wallet_preimage
    assert hashlib.sha256(bytes.fromhex(preimage)).hexdigest() == body["paymentHash"]
    served = await client.post(
        f"/api/l402/{SLUG}", json=CARD, headers={"Authorization": f"L402 {macaroon}:{preimage}"}
    )
    assert served.status_code == 200, served.text
    another = {**CARD, "title": "A second card on the same payment"}
    again = await client.post(
        f"/api/l402/{SLUG}", json=another, headers={"Authorization": f"L402 {macaroon}:{preimage}"}
    )
    assert again.json()["error_code"] == "PAYMENT_ALREADY_USED", again.text
    # Used: nothing more is handed over.
    spent = await _status(client, payment_id, f"L402 {macaroon}:")
    assert spent["status"] == "spent" and spent.get("preimage") is None


async def test_the_agent_finishes_a_payment_charge_someone_else_paid(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    got, _ = await _paid_elsewhere(client)
    payment_id = got.json()["paymentId"]
    (header,) = [h for h in got.headers.get_list("www-authenticate") if 'intent="charge"' in h]
    echo = echo_of(header)
    # The challenge echoed with an empty payload: it was issued to this agent only.
    handed = await _status(client, payment_id, payment_credential(echo, {}))
    preimage = handed["preimage"]
    assert isinstance(preimage, str) and len(preimage) == 64
    served = await client.post(
        f"/api/l402/{SLUG}",
        json=CARD,
        headers={"Authorization": payment_credential(echo, {"preimage": preimage})},
    )
    assert served.status_code == 200, served.text
    assert served.headers.get("Payment-Receipt")


async def test_an_unpaid_402_hands_over_nothing(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    got = await client.post(f"/api/l402/{SLUG}", json=CARD)
    body = got.json()
    unpaid = await _status(client, body["paymentId"], f"L402 {body['macaroon']}")
    assert unpaid["paid"] is False and unpaid.get("preimage") is None
