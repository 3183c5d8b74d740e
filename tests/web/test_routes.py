"""Route forms beyond /api/l402/<slug>: votes, the /api/m path form, the spec's slash slug."""

from __future__ import annotations

import httpx

from tests.conftest import dev_pay

CARD = {"template": "headline", "title": "path form"}


async def test_votes_count_and_order(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/api/l402/vote")).json()["services"]
    assert listed and {"slug", "name", "description", "votes"} <= set(listed[0])
    target = listed[-1]["slug"]
    ch = await client.post("/api/l402/vote", json={"slug": target})
    assert ch.status_code == 402 and ch.json()["amountSats"] == 1
    preimage = await dev_pay(client, ch.json()["invoice"])
    auth = f"L402 {ch.json()['macaroon']}:{preimage}"
    voted = await client.post(
        "/api/l402/vote", json={"slug": target}, headers={"Authorization": auth}
    )
    assert voted.status_code == 200, voted.text
    assert voted.json() == {"success": True, "slug": target, "votes": listed[-1]["votes"] + 1}
    after = (await client.get("/api/l402/vote")).json()["services"]
    votes = [s["votes"] for s in after]
    assert votes == sorted(votes, reverse=True)
    assert next(s for s in after if s["slug"] == target)["votes"] == listed[-1]["votes"] + 1
    bad = await client.post("/api/l402/vote", json={"slug": "not-planned"})
    assert bad.status_code == 400 and bad.json()["error_code"] == "L402_INVALID_PARAMS"


async def test_path_model_form(client: httpx.AsyncClient) -> None:
    ok = await client.post("/api/m/render-card/53", json=CARD)
    assert ok.status_code == 402 and ok.json()["amountSats"] == 5
    wrong = await client.post("/api/m/render-card/16", json=CARD)
    assert wrong.status_code == 400 and wrong.json()["error_code"] == "L402_INVALID_PARAMS"
    # A body field wins over the path.
    body_wins = await client.post("/api/m/render-card/16", json={**CARD, "modelId": 53})
    assert body_wins.status_code == 402
    missing = await client.post("/api/m/nothing/1", json={})
    assert missing.status_code == 404 and missing.json()["error_code"] == "NOT_FOUND"


async def test_voice_bridge_slash_form_refuses_without_engine(client: httpx.AsyncClient) -> None:
    resp = await client.post("/api/l402/voice-bridge/open", json={"phoneNumber": "+14155550100"})
    assert resp.status_code == 503
    assert resp.json()["error_code"] == "SERVICE_UNAVAILABLE"
    assert "WWW-Authenticate" not in resp.headers


async def test_http_refund_request_for_an_unused_payment(client: httpx.AsyncClient) -> None:
    ch = (await client.post("/api/l402/render-card", json=CARD)).json()
    early = await client.post(
        "/api/l402/refund", json={"paymentId": ch["paymentId"], "invoice": ch["invoice"]}
    )
    # An HTTP payment is refunded to its payer only: its credential proves the payment.
    assert early.status_code == 402 and early.json()["error_code"] == "PAYMENT_INVALID"
    preimage = await dev_pay(client, ch["invoice"])
    request = {"paymentId": ch["paymentId"], "invoice": ch["invoice"]}
    proof = {"Authorization": f"L402 {ch['macaroon']}:{preimage}"}
    resp = await client.post("/api/l402/refund", json=request, headers=proof)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["success"] is True and body["amountSats"] == 5
    assert body["refund"]["lnurl_withdraw"].startswith("LNURL1")
    # Refunded: the credential can no longer buy the call, and a second refund is refused.
    used = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {ch['macaroon']}:{'0' * 64}"},
    )
    assert used.status_code == 402
    again = await client.post("/api/l402/refund", json=request, headers=proof)
    assert again.json()["error_code"] == "REFUND_NOT_AVAILABLE"
    unknown = await client.post("/api/l402/refund", json={"paymentId": "pay_x", "invoice": "x"})
    assert unknown.status_code == 404 and unknown.json()["error_code"] == "PAYMENT_NOT_FOUND"
    bad = await client.post("/api/l402/refund", json={"paymentId": "pay_x"})
    assert bad.status_code == 400 and bad.json()["error_code"] == "L402_INVALID_PARAMS"
