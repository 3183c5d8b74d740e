"""Cashu payments at a mint that charges input fees (NUT-02 ``input_fee_ppk``): the fee
of spending the payer's proofs comes out of the token, never out of the price; melting
pays the fee of its inputs too. A real Nutshell mint (FakeWallet) with 100 ppk: a tenth
of a sat per proof, rounded up per operation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import ThreadedServer, free_port, http_client, make_settings
from tests.fakes.cashu_mint import NutshellMint, PayerWallet, mint_venv
from tests.ledger_check import assert_ledger_balances
from tests.payments.test_cashu import VOTE, assert_refused, price_of


@pytest.fixture(scope="module")
def fee_mint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NutshellMint]:
    started = NutshellMint(
        mint_venv(), tmp_path_factory.mktemp("fee-mint"), free_port(), input_fee_ppk=100
    )
    yield started
    started.stop()


@pytest.fixture(scope="module")
def fee_wallet(
    fee_mint: NutshellMint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PayerWallet]:
    payer = PayerWallet(mint_venv(), fee_mint.url, tmp_path_factory.mktemp("fee-payer"))
    yield payer
    payer.close()


@pytest.fixture(scope="module")
def fee_server(
    fee_mint: NutshellMint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("fee-node"),
        cashu={"mints": [fee_mint.url], "melt": False, "melt_min_sat": 1, "melt_max_fee_pct": 400},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def client(fee_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(fee_server):
        yield c


async def test_input_fees_come_out_of_the_token(
    client: httpx.AsyncClient, fee_server: ThreadedServer, fee_wallet: PayerWallet
) -> None:
    price = await price_of(client, "vote", VOTE)
    exact = fee_wallet.token(price)
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": exact})
    body = assert_refused(resp, "CASHU_AMOUNT_TOO_SMALL")
    assert body["inputFeeSats"] == 1 and body["amountSats"] == price
    assert "after the mint's input fee" in body["error"]
    # One sat more pays the fee: served, nothing left over.
    covered = fee_wallet.token_of([price, 1] if price != 1 else [2])
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": covered})
    assert resp.status_code == 200, resp.text
    assert "X-Cashu-Change" not in resp.headers
    # Overpaid by 9 beyond the fee: 8 back as change, which the payer's wallet receives
    # (paying the mint's fee of its own swap: one proof, one sat).
    over = fee_wallet.token_of([price, 1, 8])
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": over})
    assert resp.status_code == 200, resp.text
    assert fee_wallet.receive(resp.headers["X-Cashu-Change"]) == 8 - 1
    figures = fee_server.call(fee_server.store.ecash.figures)
    assert figures["swap_fees_sat"] == 2
    assert figures["received_sat"] == (
        figures["swap_fees_sat"] + figures["change_sat"] + figures["kept_sat"]
    )
    assert_ledger_balances(fee_server)


async def test_a_melt_pays_its_input_fee(
    client: httpx.AsyncClient,
    fee_server: ThreadedServer,
    fee_wallet: PayerWallet,
    fee_mint: NutshellMint,
) -> None:
    price = await price_of(client, "vote", VOTE)
    for _ in range(3):
        token = fee_wallet.token_of([price, 1])
        resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
        assert resp.status_code == 200, resp.text
    figures = fee_server.call(fee_server.store.ecash.figures)
    held = figures["held_sat"]
    # A call's proofs are meltable once its answered mark is written, which joins a group
    # commit just after the answer: on a loaded machine the last one can lag.
    meltable = 0
    for _ in range(250):
        proofs = fee_server.call(lambda: fee_server.store.ecash.meltable(fee_mint.url))
        meltable = sum(p.amount for p in proofs)
        if meltable == held:
            break
        await asyncio.sleep(0.02)
    assert meltable == held
    assert fee_server.call(fee_server.gate.cashu.melt_all)
    after = fee_server.call(fee_server.store.ecash.figures)
    # ceil(proofs x 100 / 1000) of input fee, plus what the FakeWallet's routing cost.
    assert after["melt_inputs_sat"] == held
    assert after["melted_sat"] + after["melt_fees_sat"] + after["melt_change_sat"] == held
    assert after["melt_fees_sat"] >= 1
    # This mint's FakeWallet only pretends to pay (tests/payments/test_cashu.py melts into the dev
    # node for real): the node's invoice is not seen settled.
    assert after["melted_settled_sat"] == 0
    assert after["kept_sat"] + after["melt_change_sat"] == (
        after["refunded_sat"] + after["melt_inputs_sat"] + after["held_sat"]
    )


def test_fee_mint_setup(fee_mint: NutshellMint) -> None:
    keysets = httpx.get(fee_mint.url + "/v1/keysets", timeout=10).json()["keysets"]
    assert {k["input_fee_ppk"] for k in keysets if k["active"]} == {100}
