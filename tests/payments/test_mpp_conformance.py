"""The Payment scheme (lightning method, charge intent) as the core and charge drafts and
the official SDK (pympp) read it: a paid call end to end with pympp as the client,
pympp's own server-side verifier agreeing with satsgate's challenge ids, and the
draft's answers to a reused, malformed or forged credential."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest
from mpp import Challenge, Credential, Receipt, generate_challenge_id
from mpp.client import Mpp  # type: ignore[attr-defined]
from mpp.methods import Method
from mpp.runtime import ClientMethod, CredentialParams
from mpp.server.verify import verify_or_challenge
from pydantic import BaseModel, ConfigDict

from satsgate.appkeys import SETTINGS
from satsgate.lightning.invoices import decode_invoice
from satsgate.payments.mpp import b64url, b64url_decode
from satsgate.payments.problems import (
    challenge_method_intent,
    parse_accept_payment,
    select_challenges,
)
from tests.conftest import ThreadedServer, dev_pay
from tests.payments.test_gateway import (
    CARD,
    assert_envelope,
    assert_fresh_l402_challenge,
    mpp_credential,
)

PROBLEMS = "https://paymentauth.org/problems/"


# -- a lightning client method for pympp (it ships none) ------------------------------------


class LightningRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    amount: str
    currency: str
    methodDetails: dict[str, Any]


class LightningPayload(BaseModel):
    preimage: str


class LightningWallet:
    """Pays ``methodDetails.invoice`` through the dev node and returns the preimage,
    after checking the invoice the way the charge draft asks a client to."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.paid: list[str] = []

    def accepts(self, challenge: Challenge) -> bool:
        request = challenge.request
        details = request.get("methodDetails") or {}
        invoice = decode_invoice(str(details.get("invoice", "")))
        return (
            request.get("currency") == "sat"
            and int(request["amount"]) * 1000 == invoice.amount_msat
            and details.get("paymentHash") == invoice.payment_hash
            and details.get("network", "mainnet") == "regtest"
        )

    async def create_credential(self, params: CredentialParams) -> str:
        invoice = params.challenge.request["methodDetails"]["invoice"]
        async with httpx.AsyncClient(base_url=self.base_url) as client:
            preimage = await dev_pay(client, invoice)
        self.paid.append(invoice)
        payload = {"preimage": preimage}
        return Credential(challenge=params.challenge.to_echo(), payload=payload).to_authorization()

    def method(self) -> ClientMethod:
        return ClientMethod(
            method=Method(
                name="lightning",
                intent="charge",
                request_model=LightningRequest,
                payload_model=LightningPayload,
            ),
            create_credential=self.create_credential,
            can_handle_challenge=self.accepts,
        )


class LightningCharge:
    """pympp's server-side intent for the lightning charge: sha256(preimage) is the hash."""

    name = "charge"

    async def verify(self, credential: Credential, request: dict[str, Any]) -> Receipt:
        preimage = bytes.fromhex(str(credential.payload["preimage"]))
        payment_hash = request["methodDetails"]["paymentHash"]
        assert hashlib.sha256(preimage).hexdigest() == payment_hash
        return Receipt.success(payment_hash, method="lightning")


def payment_line(resp: httpx.Response) -> str:
    """The charge intent's challenge (a 402 may also offer the session intent's)."""
    lines = [
        v
        for v in resp.headers.get_list("WWW-Authenticate")
        if v.startswith("Payment ") and 'intent="charge"' in v
    ]
    assert len(lines) == 1, lines
    return lines[0]


async def test_pympp_client_pays_and_pympp_verifier_agrees(server: ThreadedServer) -> None:
    wallet = LightningWallet(server.url)
    sent: list[httpx.Request] = []

    async def on_request(request: httpx.Request) -> None:
        sent.append(request)

    mpp_client = Mpp(methods=[wallet.method()], allowed_origins=[server.url])
    async with mpp_client, mpp_client.client() as http:
        http.event_hooks = {"request": [on_request], "response": []}
        resp = await http.post(f"{server.url}/api/l402/render-card", json=CARD)
    assert resp.status_code == 200, resp.text
    assert resp.json()["width"] == 1200
    assert len(wallet.paid) == 1
    # pympp declared what it pays with (Accept-Payment) on its first request.
    assert sent[0].headers["Accept-Payment"] == "lightning/charge"
    # The core draft: a response carrying a receipt is private.
    assert resp.headers["Cache-Control"] == "private"
    receipt = Receipt.from_payment_receipt(resp.headers["Payment-Receipt"])
    assert receipt.status == "success" and receipt.method == "lightning"
    assert receipt.reference == decode_invoice(wallet.paid[0]).payment_hash

    # pympp's verifier, holding satsgate's secret, agrees with the challenge it paid.
    secret = server.app[SETTINGS].server_secret
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/api/l402/render-card", json=CARD)
        challenge = Challenge.from_www_authenticate(payment_line(first))
        realm = server.url.split("://", 1)[1]
        assert challenge.realm == realm
        assert challenge.verify(secret, realm)
        assert challenge.id == generate_challenge_id(
            secret_key=secret,
            realm=realm,
            method="lightning",
            intent="charge",
            request=challenge.request,
            expires=challenge.expires,
        )
        preimage = await dev_pay(client, challenge.request["methodDetails"]["invoice"])
        authorization = Credential(
            challenge=challenge.to_echo(), payload={"preimage": preimage}
        ).to_authorization()
        verdict = await verify_or_challenge(
            authorization=authorization,
            intent=LightningCharge(),
            request=challenge.request,
            realm=realm,
            secret_key=secret,
            method="lightning",
        )
        assert isinstance(verdict, tuple), verdict
        # The same credential is one satsgate serves.
        served = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": authorization}
        )
        assert served.status_code == 200
        # A different server secret: pympp refuses the id (a fresh challenge, no receipt).
        other = await verify_or_challenge(
            authorization=authorization,
            intent=LightningCharge(),
            request=challenge.request,
            realm=realm,
            secret_key="not-the-secret",
            method="lightning",
        )
        assert isinstance(other, Challenge)


async def test_reused_credential_gets_a_fresh_challenge_and_invalid_challenge(
    client: httpx.AsyncClient,
) -> None:
    first = await client.post("/api/l402/render-card", json=CARD)
    auth = mpp_credential(first, await dev_pay(client, first.json()["invoice"]))
    served = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert served.status_code == 200 and served.headers["Cache-Control"] == "private"

    # The identical retry within the dedup window replays the stored answer, nothing more.
    again = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert again.status_code == 200 and again.headers["X-Dedup"] == "hit"
    assert again.json() == served.json()
    assert again.headers["Payment-Receipt"] and again.headers["Cache-Control"] == "private"

    for headers, body in (
        ({"Authorization": auth}, {**CARD, "title": "another request"}),
        ({"Authorization": auth, "X-No-Cache": "1"}, CARD),
    ):
        used = await client.post("/api/l402/render-card", json=body, headers=headers)
        problem = assert_envelope(used, "PAYMENT_ALREADY_USED", 402)
        assert used.headers["Content-Type"].startswith("application/problem+json")
        assert problem["type"] == PROBLEMS + "invalid-challenge"
        assert problem["status"] == 402 and problem["title"] and problem["detail"]
        assert used.headers["Cache-Control"] == "no-store"
        assert "Payment-Receipt" not in used.headers
        fresh = Challenge.from_www_authenticate(payment_line(used))
        assert fresh.id != json.loads(b64url_decode(auth.split(" ", 1)[1]))["challenge"]["id"]
        assert problem["invoice"] == fresh.request["methodDetails"]["invoice"]


async def test_l402_reuse_gets_a_fresh_challenge(client: httpx.AsyncClient) -> None:
    first = await client.post("/api/l402/render-card", json=CARD)
    body = first.json()
    auth = f"L402 {body['macaroon']}:{await dev_pay(client, body['invoice'])}"
    ok = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert ok.status_code == 200 and "Payment-Receipt" not in ok.headers
    used = await client.post(
        "/api/l402/render-card", json=CARD, headers={"Authorization": auth, "X-No-Cache": "1"}
    )
    # Not the service spec's 403 (docs/spec-notes.md): bLIP-26 clients pay again on a 402.
    fresh = assert_fresh_l402_challenge(used, "PAYMENT_ALREADY_USED")
    assert fresh["invoice"] != body["invoice"] and fresh["macaroon"] != body["macaroon"]
    assert fresh["type"] == PROBLEMS + "invalid-challenge"
    assert payment_line(used)  # the Payment scheme's challenge for the same invoice too


async def test_malformed_and_forged_credentials(client: httpx.AsyncClient) -> None:
    first = await client.post("/api/l402/render-card", json=CARD)
    preimage = await dev_pay(client, first.json()["invoice"])
    good = mpp_credential(first, preimage)
    doc = json.loads(b64url_decode(good.split(" ", 1)[1]))

    async def post(auth: str) -> httpx.Response:
        return await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
        )

    def encoded(value: Any) -> str:
        return "Payment " + b64url(json.dumps(value).encode())

    upper = {**doc, "payload": {"preimage": preimage.upper()}}
    for auth in ("Payment !!!", encoded({"payload": {}}), encoded(upper), encoded([1])):
        resp = await post(auth)
        problem = assert_envelope(resp, "MALFORMED_CREDENTIAL", 402)
        assert resp.headers["Content-Type"].startswith("application/problem+json")
        assert problem["type"] == PROBLEMS + "malformed-credential"
        assert payment_line(resp)  # a fresh challenge

    forged = {**doc, "challenge": {**doc["challenge"], "id": "A" * 43}}
    resp = await post(encoded(forged))
    problem = assert_envelope(resp, "PAYMENT_INVALID", 402)
    assert problem["type"] == PROBLEMS + "invalid-challenge"
    assert resp.headers["X-Problem-Type"] == PROBLEMS + "invalid-challenge"

    wrong = {**doc, "payload": {"preimage": "00" * 32}}
    problem = assert_envelope(await post(encoded(wrong)), "PAYMENT_INVALID", 402)
    assert problem["type"] == PROBLEMS + "verification-failed"

    # Two credentials at once: 400 (the draft's SHOULD), never served.
    two = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers=[("Authorization", good), ("Authorization", good)],
    )
    assert_envelope(two, "MALFORMED_CREDENTIAL", 400)
    assert two.headers["Content-Type"].startswith("application/problem+json")
    # A bad request body with a Payment credential: a problem too, typed by the catalog.
    bad = await client.post(
        "/api/l402/render-card", json={"template": 7}, headers={"Authorization": good}
    )
    problem = assert_envelope(bad, "L402_INVALID_PARAMS", 400)
    assert problem["type"].endswith("/api/error-codes#L402_INVALID_PARAMS")
    assert problem["status"] == 400
    # After all of that the genuine credential still serves once.
    assert (await post(good)).status_code == 200


async def test_first_402_is_a_problem_too(client: httpx.AsyncClient) -> None:
    plain = await client.post("/api/l402/render-card", json=CARD)
    assert plain.headers["Content-Type"].startswith("application/json")  # L402 clients
    assert plain.json()["type"] == PROBLEMS + "payment-required"
    asked = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Accept": "application/problem+json, application/json;q=0.5"},
    )
    assert asked.headers["Content-Type"].startswith("application/problem+json")
    body = asked.json()
    assert (body["status"], body["title"]) == (402, "Payment Required")
    assert body["error_code"] == "PAYMENT_REQUIRED" and body["invoice"]


async def test_accept_payment_limits_and_leads_the_challenges(client: httpx.AsyncClient) -> None:
    async def offered(accept: str | None) -> list[str]:
        """scheme, or scheme/intent for a Payment challenge, of each WWW-Authenticate line."""
        headers = {"Accept-Payment": accept} if accept is not None else {}
        resp = await client.post("/api/l402/render-card", json=CARD, headers=headers)
        assert resp.status_code == 402
        names = []
        for value in resp.headers.get_list("WWW-Authenticate"):
            scheme = value.split(" ", 1)[0]
            pair = challenge_method_intent(value)
            names.append(scheme if pair is None else f"{scheme}/{pair[1]}")
        return names

    # The session intent (a second invoice: its deposit) only when Accept-Payment asks.
    every = ["L402", "LSAT", "Payment/charge"]
    assert await offered(None) == every
    # A client that declared what it pays with reads that first (Alby's fetchWithMpp pays
    # only when the header starts with Payment).
    assert await offered("lightning/charge") == ["Payment/charge", "L402", "LSAT"]
    assert await offered("lightning/session") == ["Payment/session", "L402", "LSAT"]
    assert await offered("lightning/charge;q=0.4, lightning/session") == [
        "Payment/session",
        "Payment/charge",
        "L402",
        "LSAT",
    ]
    assert await offered("*/*;q=0.1, lightning/charge;q=0.9") == [
        "Payment/charge",
        "Payment/session",
        "L402",
        "LSAT",
    ]
    # Nothing on offer is accepted (or the header is malformed): the normal set, which
    # has no session offer.
    assert await offered("tempo/charge") == every
    assert await offered("lightning") == every


def test_accept_payment_filters_and_orders() -> None:
    lines = [
        'L402 macaroon="m", invoice="i"',
        'Payment id="a", realm="r", method="lightning", intent="charge", request="x"',
        'Payment id="b", realm="r", method="lightning", intent="session", request="x"',
        'Payment id="c", realm="r", method="tempo", intent="charge", request="x"',
    ]

    def ids(accept: str) -> list[str]:
        return [line.split('"')[1] for line in select_challenges(lines, accept)]

    assert ids("lightning/session") == ["b", "m"]
    assert ids("lightning/*, lightning/session;q=0") == ["a", "m"]
    assert ids("*/charge;q=0.3, lightning/session;q=0.7") == ["b", "a", "c", "m"]
    assert ids("*/*, lightning/charge;q=0.2") == ["b", "c", "a", "m"]  # most specific wins
    assert ids("lightning/charge, tempo/charge") == ["a", "c", "m"]  # server order on a tie
    assert ids("stripe/charge") == ["m", "a", "b", "c"]  # no match: the normal set
    assert ids("lightning/charge;q=2") == ["m", "a", "b", "c"]  # malformed: ignored
    assert parse_accept_payment("tempo/charge , ,solana/*;q=0.6") == [
        ("tempo", "charge", 1.0),
        ("solana", "*", 0.6),
    ]
    for bad in ("", "tempo", "Tempo/charge", "tempo/charge;x=1", "tempo/charge;q=0.1234"):
        with pytest.raises(ValueError):
            parse_accept_payment(bad)
