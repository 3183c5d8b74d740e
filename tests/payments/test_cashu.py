"""Cashu ecash payments (NUT-24) through the gate, against a real Nutshell mint on loopback
(FakeWallet backend) whose tokens a real Nutshell wallet mints and receives.

One mint, one wallet and one satsgate server for the module (tests/fakes/cashu_mint.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from openapi_spec_validator import validate
from PIL import Image

from satsgate.config.cashu import parse_config
from satsgate.config.settings import load_settings
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.operator import ledger_text
from satsgate.payments.cashu_wire import decode_payment_request, decode_token, y_of
from tests.conftest import ThreadedServer, free_port, http_client, make_settings
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.fakes.cashu_mint import MintProxy, NutshellMint, PayerWallet, mint_venv
from tests.fakes.lnbits_fake import LnbitsFake
from tests.ledger_check import assert_ledger_balances
from tests.store_access import store_rows

CARD = {"template": "headline", "title": "Paid in ecash", "subtitle": "NUT-24"}
VOTE = {"slug": "voice-changer"}


@pytest.fixture(scope="module")
def venv() -> Path:
    return mint_venv()


@pytest.fixture(scope="module")
def lnbits() -> Iterator[LnbitsFake]:
    fake = LnbitsFake(free_port())
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def mint(
    venv: Path, lnbits: LnbitsFake, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NutshellMint]:
    started = NutshellMint(
        venv, tmp_path_factory.mktemp("mint"), free_port(), lnbits_url=lnbits.url
    )
    yield started
    started.stop()


@pytest.fixture(scope="module")
def proxy(mint: NutshellMint) -> Iterator[MintProxy]:
    """The mint's address as the payer and satsgate know it (a proxy that can lose a swap)."""
    forwarding = MintProxy(mint.url, free_port())
    yield forwarding
    forwarding.stop()


@pytest.fixture(scope="module")
def wallet(
    venv: Path, proxy: MintProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PayerWallet]:
    payer = PayerWallet(venv, proxy.url, tmp_path_factory.mktemp("payer"))
    yield payer
    payer.close()


@pytest.fixture(scope="module")
def cashu_server(
    proxy: MintProxy, lnbits: LnbitsFake, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    """satsgate taking ecash of ``mint`` (whose melts pay into this node's dev node); the
    text engine is down (a paid call of generate-text fails after payment and is
    refunded). Melting is left to the test that calls it."""
    settings = make_settings(
        tmp_path_factory.mktemp("cashu-node"),
        cashu={
            "mints": [proxy.url + "/"],
            "melt": False,
            "melt_min_sat": 1,
            "melt_max_fee_pct": 50,
        },
        **down_engines(["text"]),
    )
    srv = ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS})
    lnbits.pay_into = srv.url
    yield srv
    srv.stop()


@pytest.fixture
async def client(cashu_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(cashu_server):
        yield c


def rows(server: ThreadedServer, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return store_rows(server.settings, sql, *args)


def payment_count(server: ThreadedServer) -> int:
    return int(rows(server, "SELECT COUNT(*) FROM payments")[0][0])


async def price_of(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> int:
    resp = await client.post(f"/api/l402/{slug}", json=body)
    assert resp.status_code == 402, resp.text
    return int(resp.json()["amountSats"])


def retarget(token: str, **fields: Any) -> str:
    """The same token with some top-level fields changed (a payer's mistake or trick)."""
    data = cbor2.loads(base64.urlsafe_b64decode(token[6:] + "=" * (-len(token[6:]) % 4)))
    data.update(fields)
    return "cashuB" + base64.urlsafe_b64encode(cbor2.dumps(data)).decode().rstrip("=")


def foreign_keyset(token: str) -> str:
    """The same token with its proofs claiming a keyset id no mint here has."""
    data = cbor2.loads(base64.urlsafe_b64decode(token[6:] + "=" * (-len(token[6:]) % 4)))
    for group in data["t"]:
        group["i"] = bytes.fromhex("00ffffffffffffff")
    return "cashuB" + base64.urlsafe_b64encode(cbor2.dumps(data)).decode().rstrip("=")


def inflated(token: str) -> str:
    """The same token with each proof claiming 2^62 sats (forged: together they overflow
    a 64-bit integer)."""
    data = cbor2.loads(base64.urlsafe_b64decode(token[6:] + "=" * (-len(token[6:]) % 4)))
    proofs = [proof for group in data["t"] for proof in group["p"]]
    assert len(proofs) >= 2
    for proof in proofs:
        proof["a"] = 2**62
    return "cashuB" + base64.urlsafe_b64encode(cbor2.dumps(data)).decode().rstrip("=")


def assert_refused(resp: httpx.Response, code: str) -> dict[str, Any]:
    assert resp.status_code == 400, resp.text
    body = dict(resp.json())
    assert body["error_code"] == code, body
    assert resp.headers["X-Error-Code"] == code
    assert "X-Cashu-Change" not in resp.headers
    return body


def mint_states(mint: NutshellMint, token: str) -> set[str]:
    return states_of(mint, [y_of(p.secret) for p in decode_token(token).proofs])


def states_of(mint: NutshellMint, ys: list[str]) -> set[str]:
    """What the mint says of these proofs (NUT-07)."""
    resp = httpx.post(mint.url + "/v1/checkstate", json={"Ys": ys}, timeout=10)
    return {s["state"] for s in resp.json()["states"]}


# -- the 402 ------------------------------------------------------------------------------------


async def test_every_402_carries_a_nut18_request(
    client: httpx.AsyncClient, proxy: MintProxy, wallet: PayerWallet
) -> None:
    resp = await client.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402
    price = resp.json()["amountSats"]
    creq = resp.headers["X-Cashu"]
    assert creq.startswith("creqA")
    assert decode_payment_request(creq) == {"a": price, "u": "sat", "m": [proxy.url]}
    # Nutshell's own NUT-18 reader agrees.
    answer = wallet.command(op="decode_request", request=creq)
    assert answer["request"] == {"a": price, "u": "sat", "m": [proxy.url]}
    # L402 and MPP stay offered beside it.
    schemes = [h.split(" ")[0] for h in resp.headers.get_list("WWW-Authenticate")]
    assert {"L402", "Payment"} <= set(schemes)
    # Agents reading llms.txt and the OpenAPI document learn it too.
    llms = (await client.get("/llms.txt")).text
    assert "X-Cashu: cashuB" in llms and proxy.url in llms
    doc = (await client.get("/api/openapi.json")).json()
    validate(doc)
    operation = doc["paths"]["/api/l402/render-card"]["post"]
    assert [p["name"] for p in operation["parameters"]] == ["X-Cashu"]
    assert "X-Cashu" in operation["responses"]["402"]["headers"]
    assert "X-Cashu-Change" in operation["responses"]["200"]["headers"]
    assert "CASHU_TOKEN_SPENT" in operation["x-error-codes"]


# -- paying ---------------------------------------------------------------------------------------


async def test_pay_with_ecash_runs_the_call_once(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, mint: NutshellMint, wallet: PayerWallet
) -> None:
    price = await price_of(client, "render-card", CARD)
    token = wallet.token(price)
    assert mint_states(mint, token) == {"UNSPENT"}
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
    assert resp.status_code == 200, resp.text
    png = base64.b64decode(resp.json()["image_base64"])
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG" and image.width >= 600
    assert "X-Cashu-Change" not in resp.headers  # paid exactly
    # The payer's proofs are spent at the mint: satsgate swapped them for its own.
    assert mint_states(mint, token) == {"SPENT"}
    (payment,) = rows(
        cashu_server,
        "SELECT p.amount_msat, p.status, p.mode FROM payments p JOIN ecash_receipts r"
        " ON r.payment_id = p.payment_id WHERE r.receipt_id = ?",
        decode_receipt_id(token),
    )
    assert payment[0] == price * 1000 and payment[2] == "cashu"
    held = rows(
        cashu_server,
        "SELECT SUM(e.amount) FROM ecash_proofs e JOIN ecash_receipts r"
        " ON r.payment_id = e.payment_id WHERE r.receipt_id = ? AND e.state = 'held'",
        decode_receipt_id(token),
    )
    assert held[0][0] == price
    # Presented again later: refused, nothing served or charged again.
    before = payment_count(cashu_server)
    again = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
    assert_refused(again, "CASHU_TOKEN_SPENT")
    assert payment_count(cashu_server) == before
    assert_ledger_balances(cashu_server)


def decode_receipt_id(token: str) -> str:
    import hashlib

    ys = sorted(y_of(p.secret) for p in decode_token(token).proofs)
    return hashlib.sha256("".join(ys).encode()).hexdigest()


async def test_overpayment_comes_back_as_change(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, wallet: PayerWallet
) -> None:
    price = await price_of(client, "vote", VOTE)
    token = wallet.token(price + 13)
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert resp.status_code == 200, resp.text
    assert resp.json()["success"] is True and resp.json()["slug"] == "voice-changer"
    change = resp.headers["X-Cashu-Change"]
    assert change.startswith("cashuB")
    assert decode_token(change).amount == 13
    # Nutshell reads it, and the mint honours it: the payer's wallet receives 13 sat.
    assert wallet.command(op="decode_token", token=change)["unit"] == "sat"
    assert wallet.receive(change) == 13
    figures = cashu_server.call(cashu_server.store.ecash.figures)
    assert figures["received_sat"] == figures["change_sat"] + figures["kept_sat"]


async def test_concurrent_presentations_serve_once(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, wallet: PayerWallet
) -> None:
    price = await price_of(client, "vote", VOTE)
    token = wallet.token(price)
    before = payment_count(cashu_server)
    responses = await asyncio.gather(
        *[client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token}) for _ in range(8)]
    )
    served = [r for r in responses if r.status_code == 200]
    assert len(served) == 1, [r.text for r in responses]
    for refused in (r for r in responses if r.status_code != 200):
        if refused.status_code == 503:  # the first was still swapping: retry, it is used
            assert refused.json()["error_code"] == "CASHU_TOKEN_PENDING", refused.text
            assert refused.headers["Retry-After"] == "5"
        elif refused.status_code == 403:  # redeemed, its payment spent by the first
            assert refused.json()["error_code"] == "PAYMENT_ALREADY_USED", refused.text
        else:
            assert_refused(refused, "CASHU_TOKEN_SPENT")
    again = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert_refused(again, "CASHU_TOKEN_SPENT")
    assert payment_count(cashu_server) == before + 1
    assert_ledger_balances(cashu_server)


async def test_a_token_spent_elsewhere_is_refused_by_the_mint(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, wallet: PayerWallet
) -> None:
    price = await price_of(client, "vote", VOTE)
    token = wallet.token(price)
    assert wallet.receive(token) == price  # the payer spent it (swapped it back) first
    before = payment_count(cashu_server)
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    body = assert_refused(resp, "CASHU_TOKEN_SPENT")
    assert "mint says" in body["error"]
    assert payment_count(cashu_server) == before


async def test_wrong_mint_wrong_unit_too_small_and_garbage_charge_nothing(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, mint: NutshellMint, wallet: PayerWallet
) -> None:
    price = await price_of(client, "render-card", CARD)
    token = wallet.token(price)
    receipts = rows(cashu_server, "SELECT COUNT(*) FROM ecash_receipts")[0][0]
    before = payment_count(cashu_server)
    cases = [
        (retarget(token, m="https://other-mint.example"), "CASHU_MINT_NOT_ACCEPTED"),
        (retarget(token, u="usd"), "CASHU_UNIT_NOT_ACCEPTED"),
        # Names our mint, but its proofs are of a keyset our mint does not have.
        (foreign_keyset(token), "CASHU_TOKEN_INVALID"),
        (inflated(token), "CASHU_TOKEN_INVALID"),  # worth more than all bitcoin
        ("cashuBnot-a-token", "CASHU_TOKEN_INVALID"),
        ("cashuAeyJ0b2tlbiI6W119", "CASHU_TOKEN_INVALID"),
    ]
    for value, code in cases:
        resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": value})
        body = assert_refused(resp, code)
        assert body["error"].endswith("Nothing was charged.")
    small = wallet.token(price - 1)
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": small})
    body = assert_refused(resp, "CASHU_AMOUNT_TOO_SMALL")
    assert body["amountSats"] == price
    # Nothing was swapped or recorded: both tokens are still the payer's.
    assert rows(cashu_server, "SELECT COUNT(*) FROM ecash_receipts")[0][0] == receipts
    assert payment_count(cashu_server) == before
    assert mint_states(mint, token) == {"UNSPENT"}
    assert wallet.receive(small) == price - 1
    assert wallet.receive(token) == price
    # Bad params are refused before anything else, as for every payment.
    resp = await client.post(
        "/api/l402/render-card", json={"template": 7}, headers={"X-Cashu": token}
    )
    assert resp.status_code == 400 and resp.json()["error_code"] == "L402_INVALID_PARAMS"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failure_after_payment_refunds_a_fresh_token(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, wallet: PayerWallet, stream: bool
) -> None:
    # Streamed or not: the engine fails before a first token, so the usual envelope.
    body = {"prompt": "hello", "modelId": 31, "stream": stream}
    price = await price_of(client, "generate-text", body)
    token = wallet.token(price + 2)
    resp = await client.post("/api/l402/generate-text", json=body, headers={"X-Cashu": token})
    assert resp.status_code >= 500, resp.text
    error = resp.json()
    refund = error["refund"]
    assert refund["method"] == "cashu" and refund["amount_sats"] == price
    assert "lnurl_withdraw" not in refund
    # The change of the overpayment comes back too, on the error.
    change = resp.headers["X-Cashu-Change"]
    assert wallet.receive(change) == 2
    # The refund token is real ecash of the mint: the payer's wallet receives it.
    assert wallet.receive(refund["cashu_token"]) == price
    # Presented again: refused, with the same refund attached.
    again = await client.post("/api/l402/generate-text", json=body, headers={"X-Cashu": token})
    shown = assert_refused(again, "CASHU_TOKEN_SPENT")
    assert shown["refund"]["cashu_token"] == refund["cashu_token"]
    (payment,) = rows(
        cashu_server,
        "SELECT status FROM payments WHERE payment_id = (SELECT payment_id FROM ecash_receipts"
        " WHERE receipt_id = ?)",
        decode_receipt_id(token),
    )
    assert payment[0] == "spent"
    report = assert_ledger_balances(cashu_server)
    assert report["totals"]["refunded_msat"] >= price * 1000


async def test_melt_pays_held_ecash_into_the_dev_node(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    wallet: PayerWallet,
    lnbits: LnbitsFake,
) -> None:
    price = await price_of(client, "render-card", CARD)
    for _ in range(3):
        token = wallet.token(price)
        resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
        assert resp.status_code == 200
    before = cashu_server.call(cashu_server.store.ecash.figures)
    assert before["held_sat"] > 0
    cashu = cashu_server.gate.cashu
    melted = cashu_server.call(cashu.melt_all)
    assert len(melted) == 1
    figures = cashu_server.call(cashu_server.store.ecash.figures)
    delta = {k: figures[k] - before[k] for k in figures}
    assert delta["melts"] == 1 and delta["melted_sat"] > 0
    # The melt's inputs were what was held; what came back is its unused fee reserve.
    assert delta["melt_inputs_sat"] == before["held_sat"]
    assert figures["held_sat"] == delta["melt_change_sat"]
    assert delta["melt_inputs_sat"] == (
        delta["melted_sat"] + delta["melt_fees_sat"] + delta["melt_change_sat"]
    )
    # What was kept is accounted for, to the sat.
    assert figures["kept_sat"] + figures["melt_change_sat"] == (
        figures["refunded_sat"]
        + figures["refund_fees_sat"]
        + figures["melt_inputs_sat"]
        + figures["held_sat"]
        + figures["melting_sat"]
    )
    melted_ys = [
        r[0]
        for r in rows(
            cashu_server, "SELECT y FROM ecash_proofs WHERE state = 'melted' AND op_id = ?", *melted
        )
    ]
    assert states_of(mint, melted_ys) == {"SPENT"}
    # The mint paid an invoice of the node's own, and the dev node shows it settled.
    ((bolt11, payment_hash, amount, settled),) = rows(
        cashu_server,
        "SELECT bolt11, payment_hash, amount, node_settled FROM ecash_melts WHERE melt_id = ?",
        *melted,
    )
    assert lnbits.paid_out[-1] == bolt11 and settled == 1 and amount == delta["melted_sat"]
    status = cashu_server.call(lambda: cashu_server.backend.lookup_invoice(payment_hash))
    assert status.state.name == "SETTLED" and status.amount_received_msat == amount * 1000
    report = assert_ledger_balances(cashu_server)
    assert report["ecash"] == figures  # in the operator's ledger
    text = ledger_text(report)
    assert f"melted into the node {figures['melted_sat']} in {figures['melts']} melts" in text
    # Nothing left to melt: a second run does nothing.
    assert cashu_server.call(cashu.melt_all) == []


async def test_a_melt_whose_answer_was_lost_is_settled_by_the_schedule(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    proxy: MintProxy,
    wallet: PayerWallet,
    lnbits: LnbitsFake,
) -> None:
    """The mint paid the node's invoice but its answer to the melt was lost: the proofs
    stay melting, and the schedule asks the mint for the quote's state (NUT-05) and
    records the melt, its returned fee reserve (NUT-08) and the node's settlement."""
    price = await price_of(client, "render-card", CARD)
    for _ in range(2):
        token = wallet.token(price)
        resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
        assert resp.status_code == 200
    cashu = cashu_server.gate.cashu
    before = cashu_server.call(cashu_server.store.ecash.figures)
    proxy.lose, proxy.lose_path = "answer", "/v1/melt/bolt11"
    try:
        assert cashu_server.call(cashu.melt_all) == []
    finally:
        proxy.lose, proxy.lose_path = "", "/v1/swap"
    ((melt_id, state, bolt11),) = rows(
        cashu_server, "SELECT melt_id, state, bolt11 FROM ecash_melts WHERE state = 'unknown'"
    )
    assert lnbits.paid_out[-1] == bolt11  # the mint did pay
    mid = cashu_server.call(cashu_server.store.ecash.figures)
    assert mid["melting_sat"] == before["held_sat"] and mid["held_sat"] == 0
    cashu_server.call(cashu.recover)
    after = cashu_server.call(cashu_server.store.ecash.figures)
    ((state, settled),) = rows(
        cashu_server, "SELECT state, node_settled FROM ecash_melts WHERE melt_id = ?", melt_id
    )
    assert (state, settled) == ("paid", 1)
    assert after["melting_sat"] == 0 and after["melts"] == before["melts"] + 1
    assert after["melt_inputs_sat"] - before["melt_inputs_sat"] == before["held_sat"]
    # The unused fee reserve came back too (the mint's blind signatures on the saved blank
    # outputs), held again.
    assert after["held_sat"] == after["melt_change_sat"] - before["melt_change_sat"] > 0
    assert_ledger_balances(cashu_server)


# -- configuration ----------------------------------------------------------------------------


def test_config_is_checked_at_load(tmp_path: Path) -> None:
    assert parse_config({}) is None
    assert parse_config({"mints": ["https://mint.example/"]}).mints == ("https://mint.example",)  # type: ignore[union-attr]
    for bad in (
        {"mints": ["ftp://x"]},
        {"mints": ["https://m"], "unit": "usd"},
        {"mints": ["https://m"], "mintz": 1},
        {"mints": "https://m"},
    ):
        with pytest.raises(ValueError):
            parse_config(bad)
    path = tmp_path / "satsgate.toml"
    path.write_text('[cashu]\nmints = ["https://mint.example"]\nmelt_interval_s = 60\n')
    assert load_settings(path).cashu["melt_interval_s"] == 60
    path.write_text('[cashu]\nmints = ["mint.example"]\n')
    with pytest.raises(ValueError, match="not an http"):
        load_settings(path)


@pytest.mark.parametrize("lose", ["request", "answer"])
async def test_a_lost_swap_answer_is_settled_with_the_mint(
    lose: str,
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """The mint's answer to the swap is lost (or the swap never reached it): the payer is
    told to retry with the same token; the retry asks the mint (NUT-07) and either frees
    the token and swaps it (never reached) or restores the swap's outputs (NUT-09) and
    serves the call it paid for. Either way the call is served once."""
    price = await price_of(client, "vote", VOTE)
    token = wallet.token(price + 1)
    before = payment_count(cashu_server)
    proxy.lose = lose
    try:
        resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    finally:
        proxy.lose = ""
    assert resp.status_code == 503, resp.text
    assert resp.json()["error_code"] == "CASHU_TOKEN_PENDING"
    assert "Nothing was charged" not in resp.json()["error"]  # the mint may hold the swap
    assert payment_count(cashu_server) == before
    assert mint_states(mint, token) == ({"SPENT"} if lose == "answer" else {"UNSPENT"})
    (status,) = rows(
        cashu_server,
        "SELECT status FROM ecash_receipts WHERE receipt_id = ?",
        decode_receipt_id(token),
    )[0]
    assert status == "unknown"
    retry = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert retry.status_code == 200, retry.text
    assert retry.json()["success"] is True
    assert wallet.receive(retry.headers["X-Cashu-Change"]) == 1
    assert payment_count(cashu_server) == before + 1
    again = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert_refused(again, "CASHU_TOKEN_SPENT")
    assert payment_count(cashu_server) == before + 1
    assert_ledger_balances(cashu_server)


async def test_the_schedule_restores_a_lost_swap_nobody_retried(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """A swap the mint made whose answer was lost, and no retry: the scheduled recovery
    restores the outputs and records the payment as paid and unused (open: the payer's,
    usable by presenting the token again)."""
    price = await price_of(client, "vote", VOTE)
    token = wallet.token(price)
    proxy.lose = "answer"
    try:
        resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    finally:
        proxy.lose = ""
    assert resp.status_code == 503
    receipt_id = decode_receipt_id(token)
    cashu_server.call(
        lambda: cashu_server.store.db.run_sync(
            lambda conn: conn.execute(
                "UPDATE ecash_receipts SET updated_at = updated_at - 3600 WHERE receipt_id = ?",
                (receipt_id,),
            )
        )
    )  # as if an hour had passed
    cashu_server.call(cashu_server.gate.cashu.recover)
    ((status, payment_status),) = rows(
        cashu_server,
        "SELECT r.status, p.status FROM ecash_receipts r JOIN payments p"
        " ON p.payment_id = r.payment_id WHERE r.receipt_id = ?",
        receipt_id,
    )
    assert (status, payment_status) == ("redeemed", "paid")
    report = assert_ledger_balances(cashu_server)
    assert report["totals"]["open_msat"] >= price * 1000
    retry = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert retry.status_code == 200, retry.text
    assert_ledger_balances(cashu_server)


async def test_a_partial_refund_splits_the_payment_at_the_mint(
    client: httpx.AsyncClient, cashu_server: ThreadedServer, wallet: PayerWallet
) -> None:
    """A refund of part of an ecash payment that its proofs cannot make up exactly (a call
    that delivered less than quoted) is a swap of those proofs into the refund and the
    rest; never more in total than was paid."""
    price = await price_of(client, "render-card", CARD)
    token = wallet.token(price)
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
    assert resp.status_code == 200, resp.text
    ((payment_id,),) = rows(
        cashu_server,
        "SELECT payment_id FROM ecash_receipts WHERE receipt_id = ?",
        decode_receipt_id(token),
    )
    payment = cashu_server.call(lambda: cashu_server.store.payments.get(payment_id))
    part = next(r for r in range(1, price) if r & ~price)  # not a sum of the held proofs
    cashu = cashu_server.gate.cashu
    # Ecash is whole sats: 400 msat short of ``part`` sats owed is ``part`` sats back.
    owed_msat = part * 1000 - 400
    refund = cashu_server.call(lambda: cashu.refund_spent(payment, owed_msat, "partial"))
    assert refund is not None and refund["amount_sats"] == part
    assert wallet.receive(refund["cashu_token"]) == part
    held = rows(
        cashu_server,
        "SELECT COALESCE(SUM(amount), 0) FROM ecash_proofs WHERE payment_id = ? AND state = 'held'",
        payment_id,
    )[0][0]
    assert held == price - part
    # The rest may be refunded; more than was paid may not.
    assert cashu_server.call(lambda: cashu.refund_spent(payment, price * 1000, "again")) is None
    rest = cashu_server.call(lambda: cashu.refund_spent(payment, (price - part) * 1000, "rest"))
    assert rest is not None and wallet.receive(rest["cashu_token"]) == price - part
    assert assert_ledger_balances(cashu_server)["totals"]["refunded_msat"] >= price * 1000


async def test_a_refund_swap_whose_answer_was_lost_is_restored(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """The mint swapped a partial refund's proofs but its answer was lost: no ecash refund
    is given (the gate falls back to LNURL-withdraw), and the schedule restores the swap's
    outputs (NUT-09) so the node keeps their value."""
    price = await price_of(client, "render-card", CARD)
    token = wallet.token(price)
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"X-Cashu": token})
    assert resp.status_code == 200, resp.text
    ((payment_id,),) = rows(
        cashu_server,
        "SELECT payment_id FROM ecash_receipts WHERE receipt_id = ?",
        decode_receipt_id(token),
    )
    payment = cashu_server.call(lambda: cashu_server.store.payments.get(payment_id))
    part = next(r for r in range(1, price) if r & ~price)
    cashu = cashu_server.gate.cashu
    proxy.lose = "answer"
    try:
        refund = cashu_server.call(lambda: cashu.refund_spent(payment, part * 1000, "partial"))
    finally:
        proxy.lose = ""
    assert refund is None

    def held() -> int:
        return int(
            rows(
                cashu_server,
                "SELECT COALESCE(SUM(amount), 0) FROM ecash_proofs WHERE payment_id = ?"
                " AND state = 'held'",
                payment_id,
            )[0][0]
        )

    assert held() == 0  # the inputs wait, marked swapped
    cashu_server.call(cashu.recover)
    assert held() == 0  # not yet: the swap may still be in flight
    cashu_server.call(
        lambda: cashu_server.store.db.run_sync(
            lambda conn: conn.execute("UPDATE ecash_outputs SET created_at = created_at - 3600")
        )
    )
    cashu_server.call(cashu.recover)
    assert held() == price
    assert_ledger_balances(cashu_server)


async def test_without_nutshell_satsgate_runs_and_cashu_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The plain install has no Nutshell: nothing imports it until [cashu] names a mint,
    and then start-up says what to install."""
    from satsgate.payments import cashu_wire

    for name in [m for m in sys.modules if m == "cashu" or m.startswith("cashu.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cashu", None)  # import cashu -> ImportError
    cashu_wire._dhke.cache_clear()
    try:
        assert "not installed" in cashu_wire.crypto_missing()
        # Without [cashu]: starts, and its 402 offers no ecash.
        plain = await asyncio.to_thread(ThreadedServer, make_settings(tmp_path / "plain"))
        try:
            async with httpx.AsyncClient(base_url=plain.url) as c:
                resp = await c.post("/api/l402/vote", json=VOTE)
            assert resp.status_code == 402 and "X-Cashu" not in resp.headers
        finally:
            await asyncio.to_thread(plain.stop)
        # With [cashu]: refuses to start, saying what to install.
        settings = make_settings(tmp_path / "cashu", cashu={"mints": ["https://mint.example"]})
        with pytest.raises(RuntimeError, match="pip install --no-deps cashu"):
            await asyncio.to_thread(ThreadedServer, settings)
    finally:
        cashu_wire._dhke.cache_clear()


async def test_the_nostr_announcement_names_the_cashu_rail(tmp_path: Path) -> None:
    """With [cashu] mints the kind 31402 event carries ["pmi", "xcashu"]; without, not."""
    from satsgate.cli import _announce

    nostr = {"nostr": {"relays": ["wss://relay.example"]}}
    for cashu, expected in (({"mints": ["https://mint.example"]}, True), ({}, False)):
        settings = make_settings(tmp_path / str(expected), discovery=nostr, cashu=cashu)
        settings.data_dir.mkdir(parents=True)
        event = json.loads(await _announce(settings, True))
        assert (["pmi", "xcashu"] in event["tags"]) is expected
