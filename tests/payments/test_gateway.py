"""The paid-call gateway over real HTTP on loopback with the dev node."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from satsgate.appkeys import PRECHECKS
from satsgate.errors import CODES
from satsgate.lightning.invoices import decode_invoice
from satsgate.payments.mpp import b64url, b64url_decode
from tests.conftest import (
    STORES,
    ThreadedServer,
    challenge,
    dev_pay,
    make_settings,
    paid_l402_auth,
    store_url_for,
)
from tests.ledger_check import assert_ledger_balances

CARD = {"template": "headline", "title": "Paid by Lightning", "subtitle": "one call"}

SPEC_CODES = [
    "TIMEOUT",
    "CONTENT_FILTERED",
    "CONTENT_FILTERED_RETRY",
    "REWORK_EXPIRED",
    "REWORK_TOKEN_INVALID",
    "CONTENT_POLICY_HELD",
    "RATE_LIMITED",
    "INVALID_INPUT",
    "SERVICE_ERROR",
    "PAYMENT_NOT_FOUND",
    "PAYMENT_PENDING",
    "PAYMENT_ALREADY_USED",
    "RESULT_NOT_AVAILABLE",
    "L402_INVALID_PARAMS",
    "L402_UPSTREAM_FAILED",
    "L402_REFUND_ISSUED",
    "L402_DEDUP_HIT",
    "L402_AUTO_ROUTED",
    "L402_ESTIMATE_ONLY",
    "L402_CALLBACK_INVALID",
    "REFUND_NOT_AVAILABLE",
    "BOOK_QUALITY_CHECK_FAILED",
    "OUTPUT_DURATION_INSANE",
]


def payment_count(server: ThreadedServer) -> int:
    """The calls' payments: one per 402 (a 402 that offers a payment session, asked for
    with Accept-Payment, also makes its deposit: a row of its own with mode 'deposit')."""
    return int(
        server.call(
            lambda: server.store.db.run_sync(
                lambda c: c.execute(
                    "SELECT COUNT(*) FROM payments WHERE mode != 'deposit'"
                ).fetchone()[0]
            )
        )
    )


def assert_envelope(resp: httpx.Response, code: str, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code
    assert resp.headers["X-Error-Code"] == code
    for key in ("error", "suggestion", "example"):
        assert key in body
    return dict(body)


def assert_fresh_l402_challenge(resp: httpx.Response, code: str) -> dict[str, Any]:
    """A refused L402 credential: 402 with ``code`` (body and X-Error-Code) and a fresh
    challenge, L402 first, whose macaroon and invoice are the body's (bLIP-26 clients pay
    again on a 402)."""
    body = assert_envelope(resp, code, 402)
    lines = resp.headers.get_list("WWW-Authenticate")
    assert lines[:2] == [
        f'L402 macaroon="{body["macaroon"]}", invoice="{body["invoice"]}"',
        f'LSAT macaroon="{body["macaroon"]}", invoice="{body["invoice"]}"',
    ]
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["Cache-Control"] == "no-store"
    return body


async def test_health_names_backend_and_network(client: httpx.AsyncClient) -> None:
    resp = await client.get("/api/health")
    assert resp.status_code == 200
    body = resp.json()
    assert body["backend"] == "dev"
    assert body["network"] == "regtest"
    assert len(body["node_pubkey"]) == 66


async def test_challenge_has_both_schemes_and_an_exact_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    resp = await client.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402
    assert resp.headers["Cache-Control"] == "no-store"
    lines = resp.headers.get_list("WWW-Authenticate")
    # L402 (both names, L402 first: clients that read one challenge read the first), then
    # the Payment scheme's charge intent; the session intent only when Accept-Payment
    # asks for it (tests/payments/test_sessions.py).
    assert [line.split(" ", 1)[0] for line in lines] == ["L402", "LSAT", "Payment"]
    assert 'intent="charge"' in lines[2]
    body = resp.json()
    assert body["error_code"] == "PAYMENT_REQUIRED"
    assert lines[0] == f'L402 macaroon="{body["macaroon"]}", invoice="{body["invoice"]}"'
    assert lines[1] == f'LSAT macaroon="{body["macaroon"]}", invoice="{body["invoice"]}"'
    base64.b64decode(body["macaroon"], validate=True)  # standard, padded base64
    invoice = decode_invoice(body["invoice"])
    assert body["invoice"].startswith("lnbcrt")
    assert invoice.amount_msat == 5000 == body["amountSats"] * 1000
    assert invoice.network == "regtest"
    assert invoice.payee == server.backend.pubkey
    assert body["paymentId"].startswith("pay_")
    # The MPP challenge carries the same invoice in its request.
    params = dict(p.split("=", 1) for p in lines[2][len("Payment ") :].split(", "))
    request = json.loads(b64url_decode(params["request"].strip('"')))
    assert request["methodDetails"]["invoice"] == body["invoice"]
    assert request["amount"] == "5" and request["currency"] == "sat"
    assert params["method"] == '"lightning"' and params["intent"] == '"charge"'


async def test_invalid_params_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    cases: list[Any] = [
        {"template": "headline"},  # title missing
        {"template": "poster", "title": "x"},  # unknown template
        {"template": "headline", "title": "x", "width": 10},  # too small
        {"template": "headline", "title": "x", "items": ["a"]},  # field of another template
        {"template": "headline", "title": "x", "surprise": 1},  # unknown field
        {"template": "stat", "value": "1" * 41, "label": "x"},  # over the limit
        [1, 2, 3],
    ]
    for body in cases:
        resp = await client.post("/api/l402/render-card", json=body)
        assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert "WWW-Authenticate" not in resp.headers
    resp = await client.post(
        "/api/l402/render-card", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert payment_count(server) == before


async def test_paid_call_serves_once_then_refuses(client: httpx.AsyncClient) -> None:
    auth = await paid_l402_auth(client, "render-card", CARD)
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    png = base64.b64decode(body["image_base64"])
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (1200, 630)
    assert (body["width"], body["height"], body["format"]) == (1200, 630, "png")
    # The signed URL serves the same bytes.
    file_resp = await client.get(body["image_url"])
    assert file_resp.status_code == 200 and file_resp.content == png
    assert file_resp.headers["Content-Type"] == "image/png"
    tampered = body["image_url"].replace("sig=", "sig=0")
    assert (await client.get(tampered)).status_code == 404
    # Same credential, another request: spent.
    other = {**CARD, "title": "another"}
    resp2 = await client.post("/api/l402/render-card", json=other, headers={"Authorization": auth})
    body2 = assert_fresh_l402_challenge(resp2, "PAYMENT_ALREADY_USED")
    assert "Service already used" in body2["error"]
    assert body2["suggestion"] == "Pay the fresh invoice offered in this response."


async def test_lsat_scheme_and_case_are_accepted(client: httpx.AsyncClient) -> None:
    auth = await paid_l402_auth(client, "render-card", CARD)
    lsat = "lsat " + auth.split(" ", 1)[1]
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": lsat})
    assert resp.status_code == 200


async def test_repeat_within_window_is_replayed_not_respent(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    auth = await paid_l402_auth(client, "render-card", CARD)
    first = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    again = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert first.status_code == again.status_code == 200
    assert "X-Dedup" not in first.headers
    assert again.headers["X-Dedup"] == "hit"
    assert again.json() == first.json()
    bypass = await client.post(
        "/api/l402/render-card", json=CARD, headers={"Authorization": auth, "X-No-Cache": "1"}
    )
    assert_fresh_l402_challenge(bypass, "PAYMENT_ALREADY_USED")
    # Without the credential nobody sees the cached response.
    anon = await client.post("/api/l402/render-card", json=CARD)
    assert anon.status_code == 402


@pytest.fixture(scope="module", params=STORES)
def race_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    """A server on each engine of the store, for the races."""
    srv = ThreadedServer(
        make_settings(tmp_path_factory.mktemp("race"), store_url=store_url_for(request))
    )
    yield srv
    srv.stop()


async def test_fifty_concurrent_uses_of_one_credential_are_served_exactly_once(
    race_server: ThreadedServer,
) -> None:
    async with httpx.AsyncClient(base_url=race_server.url, timeout=60) as client:
        auth = await paid_l402_auth(client, "render-card", CARD)
        headers = {"Authorization": auth, "X-No-Cache": "1"}
        responses = await asyncio.gather(
            *(client.post("/api/l402/render-card", json=CARD, headers=headers) for _ in range(50))
        )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [402] * 49
    for r in responses:
        if r.status_code == 402:
            assert_fresh_l402_challenge(r, "PAYMENT_ALREADY_USED")
    report = assert_ledger_balances(race_server)
    assert report["totals"]["earned_msat"] == 5000  # one call, earned once


async def test_concurrent_identical_requests_share_one_call(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    card = {**CARD, "title": "shared"}
    before = server.call(server.store.ledger.totals)
    auth = await paid_l402_auth(client, "render-card", card)
    responses = await asyncio.gather(
        *(
            client.post("/api/l402/render-card", json=card, headers={"Authorization": auth})
            for _ in range(20)
        )
    )
    assert all(r.status_code == 200 for r in responses)
    hits = [r for r in responses if r.headers.get("X-Dedup") == "hit"]
    assert len(hits) == 19
    assert len({r.json()["image_url"] for r in responses}) == 1
    after = server.call(server.store.ledger.totals)
    assert after["earned_msat"] - before["earned_msat"] == 5000  # one spend, not twenty


async def test_bad_credentials_are_never_served(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ch = await challenge(client, "render-card", CARD)
    preimage = await dev_pay(client, ch["invoice"])

    async def post(auth: str) -> httpx.Response:
        return await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
        )

    wrong = await post(f"L402 {ch['macaroon']}:{'00' * 32}")
    body = assert_envelope(wrong, "PAYMENT_INVALID", 402)
    assert body["invoice"] != ch["invoice"]  # a fresh challenge
    assert len(wrong.headers.get_list("WWW-Authenticate")) == 3  # L402 x2, charge

    raw = bytearray(base64.b64decode(ch["macaroon"]))
    raw[-1] ^= 1  # flip a signature bit
    tampered = base64.b64encode(bytes(raw)).decode()
    assert_envelope(await post(f"L402 {tampered}:{preimage}"), "PAYMENT_INVALID", 402)

    # A caveat appended without the key cannot be signed: chain fails.
    from pymacaroons import Macaroon
    from pymacaroons.serializers.binary_serializer import BinarySerializer

    mac = Macaroon.deserialize(
        b64url(base64.b64decode(ch["macaroon"])), serializer=BinarySerializer()
    )
    mac.add_first_party_caveat("services=html-to-pdf:0")
    forged = base64.b64encode(BinarySerializer().serialize_raw(mac)).decode()
    # Appending a caveat is allowed by macaroons (it only narrows): the chain
    # still verifies, but the narrowed service list no longer includes render-card.
    assert_envelope(await post(f"L402 {forged}:{preimage}"), "PAYMENT_INVALID", 402)

    for malformed in (
        f"L402 {ch['macaroon']}",
        "L402 !!!:" + "00" * 32,
        "LSAT !!!:" + "00" * 32,
        "Bearer abc",
        f"L402 {ch['macaroon']},{ch['macaroon']}:{preimage}",
    ):
        refused = assert_fresh_l402_challenge(await post(malformed), "MALFORMED_CREDENTIAL")
        assert refused["invoice"] != ch["invoice"]
    # Another service's macaroon, paid: refused with a fresh challenge for this one.
    pdf = await challenge(client, "html-to-pdf", {"markdown": "# hi"})
    pdf_auth = f"L402 {pdf['macaroon']}:{await dev_pay(client, pdf['invoice'])}"
    elsewhere = assert_fresh_l402_challenge(await post(pdf_auth), "PAYMENT_INVALID")
    assert "html-to-pdf" in elsewhere["error"] and elsewhere["service"] == "render-card"
    two = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers=[
            ("Authorization", f"L402 {ch['macaroon']}:{preimage}"),
            ("Authorization", f"L402 {ch['macaroon']}:{preimage}"),
        ],
    )
    assert_envelope(two, "MALFORMED_CREDENTIAL", 400)
    # After all that, the real credential still works once.
    assert (await post(f"L402 {ch['macaroon']}:{preimage}")).status_code == 200


async def test_unpaid_credential_gets_same_invoice_again(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ch = await challenge(client, "render-card", CARD)
    # Read the preimage straight from the node without paying: a thief's best case.
    preimage = server.call(
        lambda: server.backend._run(
            lambda: (
                server.backend._db()
                .execute("SELECT preimage FROM invoices WHERE bolt11 = ?", (ch["invoice"],))
                .fetchone()[0]
            )
        )
    )
    resp = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {ch['macaroon']}:{preimage}"},
    )
    body = assert_envelope(resp, "PAYMENT_PENDING", 402)
    assert body["retry_after_seconds"] == 5
    assert body["invoice"] == ch["invoice"] and body["macaroon"] == ch["macaroon"]


async def test_credential_is_bound_to_its_service(client: httpx.AsyncClient) -> None:
    auth = await paid_l402_auth(client, "render-card", CARD)
    resp = await client.post(
        "/api/l402/html-to-pdf", json={"markdown": "# hi"}, headers={"Authorization": auth}
    )
    assert_envelope(resp, "PAYMENT_INVALID", 402)
    ok = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert ok.status_code == 200


def mpp_credential(resp: httpx.Response, preimage: str) -> str:
    line = next(v for v in resp.headers.get_list("WWW-Authenticate") if v.startswith("Payment "))
    params = {}
    for part in line[len("Payment ") :].split(", "):
        k, v = part.split("=", 1)
        params[k] = v.strip('"')
    doc = {"challenge": params, "payload": {"preimage": preimage}}
    return "Payment " + b64url(json.dumps(doc).encode())


async def test_mpp_credential_serves_with_receipt(client: httpx.AsyncClient) -> None:
    first = await client.post("/api/l402/render-card", json=CARD)
    preimage = await dev_pay(client, first.json()["invoice"])
    auth = mpp_credential(first, preimage)
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    receipt = json.loads(b64url_decode(resp.headers["Payment-Receipt"]))
    assert receipt["status"] == "success" and receipt["method"] == "lightning"
    assert receipt["reference"] == first.json()["paymentHash"]
    assert receipt["reference"] == hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
    # Tampered challenge (amount changed): the HMAC id no longer matches.
    doc = json.loads(b64url_decode(auth.split(" ", 1)[1]))
    doc["challenge"]["expires"] = "2099-01-01T00:00:00Z"
    forged = "Payment " + b64url(json.dumps(doc).encode())
    refused = await client.post(
        "/api/l402/render-card", json=CARD, headers={"Authorization": forged}
    )
    assert_envelope(refused, "PAYMENT_INVALID", 402)
    assert refused.json()["type"] == "https://paymentauth.org/problems/invalid-challenge"


async def test_l402_and_mpp_for_one_invoice_serve_once(client: httpx.AsyncClient) -> None:
    first = await client.post("/api/l402/render-card", json=CARD)
    body = first.json()
    preimage = await dev_pay(client, body["invoice"])
    l402_auth = f"L402 {body['macaroon']}:{preimage}"
    mpp_auth = mpp_credential(first, preimage)
    other = {**CARD, "title": "second"}
    a = await client.post("/api/l402/render-card", json=CARD, headers={"Authorization": l402_auth})
    b = await client.post("/api/l402/render-card", json=other, headers={"Authorization": mpp_auth})
    assert a.status_code == 200
    # The Payment scheme answers a used challenge with 402, a fresh challenge and the
    # core draft's invalid-challenge; satsgate's code stays in the body.
    used = assert_envelope(b, "PAYMENT_ALREADY_USED", 402)
    assert used["type"] == "https://paymentauth.org/problems/invalid-challenge"
    assert used["invoice"] != body["invoice"]


async def test_independent_l402_client_pays_and_gets_served(server: ThreadedServer) -> None:
    from l402_requests import AsyncL402Client  # type: ignore[import-untyped]

    class DevWallet:
        async def pay_invoice(self, bolt11: str) -> str:
            async with httpx.AsyncClient(base_url=server.url) as c:
                return await dev_pay(c, bolt11)

    async with AsyncL402Client(wallet=DevWallet(), budget=None) as l402_client:
        resp = await l402_client.post(f"{server.url}/api/l402/render-card", json=CARD)
    assert resp.status_code == 200, resp.text
    assert Image.open(io.BytesIO(base64.b64decode(resp.json()["image_base64"]))).format == "PNG"


async def test_error_catalog_covers_the_spec(client: httpx.AsyncClient) -> None:
    resp = await client.get("/api/error-codes")
    doc = resp.json()
    assert doc["version"] == 1
    served = {c["error_code"]: c for c in doc["codes"]}
    assert set(SPEC_CODES) <= set(served)
    assert len(SPEC_CODES) == 23
    assert served["PAYMENT_ALREADY_USED"]["http_status"] == 403
    assert served["PAYMENT_PENDING"]["retry_after_seconds"] == 5
    assert served["TIMEOUT"]["retry_after_seconds"] == 20
    assert served["RATE_LIMITED"]["retry_after_seconds"] == 10
    assert set(served) == set(CODES)


async def test_unknown_service_and_method(client: httpx.AsyncClient) -> None:
    assert_envelope(await client.post("/api/l402/no-such", json={}), "NOT_FOUND", 404)
    assert_envelope(await client.delete("/api/l402/render-card"), "METHOD_NOT_ALLOWED", 405)
    assert_envelope(await client.get("/api/nothing"), "NOT_FOUND", 404)


async def test_oversized_body_is_refused_early(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/api/l402/render-card",
        content=b"{" + b" " * 200_000 + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert_envelope(resp, "PAYLOAD_TOO_LARGE", 413)


# The default of each category on the test node, which has local engines only: the
# catalog's default where it runs (Receipt OCR), the local model a request naming none is
# moved to where the catalog's cannot run (Global TTS for Premium TTS), none where no model
# of the category runs (image, text: no provider; depth estimation: no provider).
@pytest.mark.parametrize(
    "category,defaults",
    [("image", []), ("speech", [43]), ("text", []), ("utility", [30]), ("image_process", [])],
)
async def test_models_catalog(
    client: httpx.AsyncClient, category: str, defaults: list[int]
) -> None:
    resp = await client.get("/api/l402/models", params={"category": category})
    models = resp.json()["models"]
    assert models and all(m["category"] == category for m in models)
    assert [m["id"] for m in models if m["isDefault"]] == defaults
    for m in models:
        assert {"id", "name", "tier", "sats", "isDefault", "available"} <= set(m)


async def test_models_full_list_and_bad_category(client: httpx.AsyncClient) -> None:
    models = (await client.get("/api/l402/models")).json()["models"]
    by_id = {m["id"]: m for m in models}
    assert by_id[16]["sats"] == 1200 and by_id[16]["tier"] == "best"
    assert by_id[53]["sats"] == 5 and by_id[17]["sats"] == 1600 and by_id[22]["sats"] == 7500
    assert by_id[23]["pricing"] == "dynamic"
    assert_envelope(
        await client.get("/api/l402/models", params={"category": "nope"}),
        "L402_INVALID_PARAMS",
        400,
    )


@pytest.mark.parametrize(
    "query,sats",
    [
        ({"service": "image"}, 1200),
        ({"service": "image", "model": "better"}, 150),
        ({"service": "image", "model": "2"}, 100),
        ({"service": "image-edit", "resolution": "4K"}, 200),
        ({"service": "music"}, 300),
        ({"service": "email"}, 200),
        ({"service": "voice-cloning"}, 7500),
        ({"service": "html-to-pdf"}, 50),
        ({"service": "render-card"}, 5),
        ({"service": "detect-nsfw"}, 2),
        ({"service": "deblur-image"}, 110),
        ({"service": "vision"}, 21),
        ({"service": "text-to-speech", "chars": "160"}, 10),
        ({"service": "text-to-speech", "chars": "1060", "model": "standard"}, 10),
        ({"service": "translate", "chars": "2500"}, 3),
        ({"service": "translate", "chars": "10"}, 1),
        ({"service": "video", "seconds": "5"}, 1250),
        ({"service": "video-from-image", "seconds": "15", "resolution": "2K"}, 6000),
        ({"service": "transcribe-audio", "minutes": "2.5"}, 30),
        ({"service": "ocr", "pages": "3"}, 30),
        ({"service": "receipt-ocr"}, 25),
    ],
)
async def test_estimate_cost(client: httpx.AsyncClient, query: dict[str, str], sats: int) -> None:
    before_resp = await client.get("/api/health")
    resp = await client.get("/api/estimate-cost", params=query)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["amountSats"] == sats
    assert body["error_code"] == "L402_ESTIMATE_ONLY"
    assert resp.headers["X-Error-Code"] == "L402_ESTIMATE_ONLY"
    assert "invoice" not in body
    assert before_resp.status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        {"service": "text-to-speech"},  # chars required
        {"service": "text-to-speech", "chars": "5001"},
        {"service": "video"},  # seconds required
        {"service": "video", "seconds": "20"},
        {"service": "translate"},
        {"service": "transcribe-audio"},
        {"service": "nope"},
        {},
    ],
)
async def test_estimate_cost_rejects(client: httpx.AsyncClient, query: dict[str, str]) -> None:
    resp = await client.get("/api/estimate-cost", params=query)
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)


async def test_dev_pay_refuses_unknown_and_repeat(client: httpx.AsyncClient) -> None:
    ch = await challenge(client, "render-card", CARD)
    await dev_pay(client, ch["invoice"])
    again = await client.post("/api/dev/pay", json={"invoice": ch["invoice"]})
    assert again.status_code == 400 and "already paid" in again.json()["error"]
    junk = await client.post("/api/dev/pay", json={"invoice": "lnbcrt1junk"})
    assert junk.status_code == 400


async def test_official_mpp_client_pays_and_gets_served(server: ThreadedServer) -> None:
    from mpp import Credential
    from mpp.client import Mpp  # type: ignore[attr-defined]
    from mpp.methods import Method
    from mpp.runtime import ClientMethod, CredentialParams
    from pydantic import BaseModel, ConfigDict

    class LightningRequest(BaseModel):
        model_config = ConfigDict(extra="allow")
        amount: str
        currency: str

    class LightningPayload(BaseModel):
        preimage: str

    paid: list[str] = []

    async def create_credential(params: CredentialParams) -> str:
        invoice = params.challenge.request["methodDetails"]["invoice"]
        async with httpx.AsyncClient(base_url=server.url) as c:
            preimage = await dev_pay(c, invoice)
        paid.append(invoice)
        echo = params.challenge.to_echo()
        return Credential(challenge=echo, payload={"preimage": preimage}).to_authorization()

    lightning = ClientMethod(
        method=Method(
            name="lightning",
            intent="charge",
            request_model=LightningRequest,
            payload_model=LightningPayload,
        ),
        create_credential=create_credential,
    )
    mpp_client = Mpp(methods=[lightning], allowed_origins=[server.url])
    async with mpp_client, mpp_client.client() as http:
        resp = await http.post(f"{server.url}/api/l402/render-card", json=CARD)
    assert resp.status_code == 200, resp.text
    assert len(paid) == 1
    receipt = json.loads(b64url_decode(resp.headers["Payment-Receipt"]))
    assert receipt["reference"] == decode_invoice(paid[0]).payment_hash


async def test_expired_invoices_and_credentials(tmp_path: Any) -> None:
    from tests.conftest import make_settings

    # Long enough for the pay to come in time on a loaded machine, short for the test.
    expiry_s = 3
    srv = ThreadedServer(make_settings(tmp_path, invoice_expiry_s=expiry_s, credential_ttl_s=0))
    try:
        async with httpx.AsyncClient(base_url=srv.url) as c:
            # Paid in time, used too late: the credential has expired.
            asked = time.monotonic()
            ch = await challenge(c, "render-card", CARD)
            preimage = await dev_pay(c, ch["invoice"])
            unpaid = await challenge(c, "render-card", CARD)
            await asyncio.sleep(max(0.0, asked + expiry_s + 1.2 - time.monotonic()))
            late = await c.post(
                "/api/l402/render-card",
                json=CARD,
                headers={"Authorization": f"L402 {ch['macaroon']}:{preimage}"},
            )
            body = assert_envelope(late, "PAYMENT_EXPIRED", 402)
            assert body["invoice"] != ch["invoice"]  # a fresh challenge to pay
            # An expired invoice cannot be paid any more.
            refused = await c.post("/api/dev/pay", json={"invoice": unpaid["invoice"]})
            assert refused.status_code == 400 and "expired" in refused.json()["error"]
    finally:
        srv.stop()


async def test_settlement_stream_marks_paid_and_persists_cursor(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ch = await challenge(client, "render-card", CARD)
    await dev_pay(client, ch["invoice"])
    status = None
    for _ in range(100):  # the watcher applies it without anybody asking the node
        payment = server.call(lambda: server.store.payments.get(ch["paymentId"]))
        status = str(payment.status)
        if status == "paid":
            break
        await asyncio.sleep(0.02)
    assert status == "paid"
    cursor = server.call(lambda: server.store.cursors.get("settle:dev"))
    settled = server.call(
        lambda: server.backend._run(
            lambda: (
                server.backend._db().execute("SELECT MAX(settle_index) FROM invoices").fetchone()[0]
            )
        )
    )
    assert cursor == settled


async def test_card_text_that_cannot_fit_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    body = {
        "template": "quote",
        "text": "word " * 199 + "end",
        "author": "a" * 120,
        "width": 200,
        "height": 200,
    }
    memo = server.app[PRECHECKS]  # this app's kept outcomes of checks before invoices
    kept = len(memo)
    for _ in range(2):  # the second answer comes from the kept layout check
        resp = await client.post("/api/l402/render-card", json=body)
        assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert "fit" in resp.json()["error"].lower()
        assert len(memo) == kept + 1
    assert payment_count(server) == before


async def test_oversized_chunked_body_is_refused_while_reading(client: httpx.AsyncClient) -> None:
    async def body() -> Any:
        yield b"{"
        for _ in range(100):
            yield b" " * 4096  # no Content-Length: counted as it arrives
        yield b"}"

    resp = await client.post(
        "/api/l402/render-card", content=body(), headers={"Content-Type": "application/json"}
    )
    assert_envelope(resp, "PAYLOAD_TOO_LARGE", 413)


async def test_macaroon_minted_with_a_stored_random_root_key_still_serves_once(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    """Rows from before derived root keys: the stored key verifies them."""
    import secrets

    from satsgate.payments import l402

    ch = await challenge(client, "render-card", CARD)
    preimage = await dev_pay(client, ch["invoice"])
    payment = server.call(lambda: server.store.payments.get(ch["paymentId"]))
    legacy_key = secrets.token_bytes(32)
    server.call(
        lambda: server.store.db.run_sync(
            lambda c: c.execute(
                "UPDATE payments SET root_key = ? WHERE payment_id = ?",
                (legacy_key.hex(), payment.payment_id),
            )
        )
    )
    legacy = l402.mint(
        payment.payment_hash,
        "render-card",
        payment.expires_at + 3600,
        legacy_key,
        bytes.fromhex(payment.token_id),
    )

    async def post(mac: str) -> httpx.Response:
        return await client.post(
            "/api/l402/render-card",
            json=CARD,
            headers={"Authorization": f"L402 {mac}:{preimage}", "X-No-Cache": "1"},
        )

    # Signed with some other random key: neither derived nor stored.
    forged = l402.mint(
        payment.payment_hash,
        "render-card",
        payment.expires_at + 3600,
        secrets.token_bytes(32),
        bytes.fromhex(payment.token_id),
    )
    assert_envelope(await post(forged.macaroon_b64), "PAYMENT_INVALID", 402)
    assert (await post(legacy.macaroon_b64)).status_code == 200
    assert_fresh_l402_challenge(await post(legacy.macaroon_b64), "PAYMENT_ALREADY_USED")


async def test_credential_whose_payment_row_is_gone_is_refused(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ch = await challenge(client, "render-card", CARD)
    preimage = await dev_pay(client, ch["invoice"])
    server.call(
        lambda: server.store.db.run_sync(
            lambda c: c.execute("DELETE FROM payments WHERE payment_id = ?", (ch["paymentId"],))
        )
    )
    resp = await client.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {ch['macaroon']}:{preimage}"},
    )
    body = assert_envelope(resp, "PAYMENT_INVALID", 402)
    assert "revoked" in body["error"]
    assert body["invoice"] != ch["invoice"]  # a fresh challenge
