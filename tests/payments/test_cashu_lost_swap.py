"""A Cashu token whose swap answer was lost is served once or handed back, never burned
(issue 28, hole 3), against a real Nutshell mint behind a proxy that loses, delays or
holds the swap, with a real Nutshell wallet making and receiving the tokens.

The rule checked in every test: the token pays for exactly one call, or its value is
restored into satsgate's wallet (NUT-09) and comes back; a payer is never told
``CASHU_TOKEN_SPENT`` ("nothing was charged") while the mint holds satsgate's swap.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import cbor2
import httpx
import pytest

from satsgate.payments.cashu_wire import decode_token, y_of
from tests.conftest import ThreadedServer, free_port, http_client, make_settings
from tests.fakes.cashu_mint import MintProxy, NutshellMint, PayerWallet, mint_venv
from tests.killable_server import KillableServer
from tests.ledger_check import assert_ledger_balances
from tests.store_access import StoreSettings, store_rows, store_value

VOTE = {"slug": "voice-changer"}
ROUNDS = 16  # the issue saw 4 of 14 rounds burn the token on the old code
MINT_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def venv() -> Path:
    return mint_venv()


@pytest.fixture(scope="module")
def mint(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NutshellMint]:
    started = NutshellMint(venv, tmp_path_factory.mktemp("mint"), free_port())
    yield started
    started.stop()


@pytest.fixture(scope="module")
def proxy(mint: NutshellMint) -> Iterator[MintProxy]:
    forwarding = MintProxy(mint.url, free_port())
    yield forwarding
    forwarding.stop()


@pytest.fixture
def clear_proxy(proxy: MintProxy) -> Iterator[MintProxy]:
    yield proxy
    proxy.lose, proxy.lose_times, proxy.delays = "", 0, []
    proxy.forwarded.clear()


@pytest.fixture(scope="module")
def wallet(
    venv: Path, proxy: MintProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PayerWallet]:
    payer = PayerWallet(venv, proxy.url, tmp_path_factory.mktemp("payer"))
    yield payer
    payer.close()


@pytest.fixture(scope="module")
def cashu_server(
    proxy: MintProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("cashu-lost-swap"),
        cashu={"mints": [proxy.url + "/"], "melt": False, "mint_timeout_s": MINT_TIMEOUT_S},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def client(cashu_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(cashu_server):
        yield c


def receipt_id_of(token: str) -> str:
    ys = sorted(y_of(p.secret) for p in decode_token(token).proofs)
    return hashlib.sha256("".join(ys).encode()).hexdigest()


def mint_states(mint: NutshellMint, token: str) -> set[str]:
    ys = [y_of(p.secret) for p in decode_token(token).proofs]
    resp = httpx.post(mint.url + "/v1/checkstate", json={"Ys": ys}, timeout=10)
    return {s["state"] for s in resp.json()["states"]}


def held_for(db: StoreSettings, token: str) -> tuple[str, str, int]:
    """(receipt status, its payment's status, sat held for that payment)."""
    ((status, payment_status, held),) = store_rows(
        db,
        "SELECT r.status, p.status, (SELECT COALESCE(SUM(e.amount), 0) FROM ecash_proofs e"
        " WHERE e.payment_id = r.payment_id AND e.state = 'held') FROM ecash_receipts r"
        " LEFT JOIN payments p ON p.payment_id = r.payment_id WHERE r.receipt_id = ?",
        receipt_id_of(token),
    )
    return str(status), str(payment_status), int(held)


def served_for(db: StoreSettings, token: str) -> tuple[str, str, int]:
    """:func:`held_for` once the served call's payment is recorded spent (that write joins
    the group commit after the answer was sent)."""
    deadline = time.monotonic() + 10
    found = held_for(db, token)
    while found[1] == "serving" and time.monotonic() < deadline:
        time.sleep(0.05)
        found = held_for(db, token)
    return found


def never_burned(responses: list[httpx.Response]) -> None:
    """No answer calls the token spent while it is pending or the mint took our swap:
    the only refusals besides "retry" are the spend rule's (the one call was made)."""
    for resp in responses:
        if resp.status_code == 200:
            continue
        code = resp.json()["error_code"]
        assert code in ("CASHU_TOKEN_PENDING", "PAYMENT_ALREADY_USED", "CASHU_TOKEN_SPENT"), (
            resp.text
        )
        if code == "CASHU_TOKEN_PENDING":
            assert resp.status_code == 503 and resp.headers["Retry-After"] == "5", resp.text
            assert "Nothing was charged" not in resp.json()["error"]


async def test_lost_swaps_with_concurrent_retries_serve_each_token_once(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    clear_proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """The issue's failure, end to end: the swap request (or its answer) is lost, and the
    payer retries the same token from 2 to 6 requests at once; every third round the
    swap of one of those retries is lost too. Every round: exactly one call served, its
    change a token the payer's wallet receives, the price held by satsgate, the token
    spent at the mint; more retries are refused as used."""
    proxy, db = clear_proxy, cashu_server.settings
    price = int((await client.post("/api/l402/vote", json=VOTE)).json()["amountSats"])
    outcomes: list[str] = []
    for round_no in range(ROUNDS):
        lose = ("request", "answer")[round_no % 2]
        retries = (2, 2, 3, 4, 6)[round_no % 5]
        token = wallet.token(price + 1)
        proxy.lose, proxy.lose_times = lose, (2 if round_no % 3 == 2 else 1)
        first = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
        assert first.status_code == 503, first.text
        assert first.json()["error_code"] == "CASHU_TOKEN_PENDING"
        try:
            answers = list(
                await asyncio.gather(
                    *[
                        client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
                        for _ in range(retries)
                    ]
                )
            )
        finally:
            proxy.lose, proxy.lose_times = "", 0
        for _ in range(6):  # a retry told "retry" while nobody was served tries again
            if any(r.status_code == 200 for r in answers):
                break
            if not any(r.status_code == 503 for r in answers):
                break
            answers.append(
                await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
            )
        served = [r for r in answers if r.status_code == 200]
        outcomes.append(f"{lose}x{retries}: {[r.status_code for r in answers]}")
        assert len(served) == 1, (outcomes, [r.text for r in answers])
        never_burned(answers)
        assert wallet.receive(served[0].headers["X-Cashu-Change"]) == 1
        assert mint_states(mint, token) == {"SPENT"}
        assert served_for(db, token) == ("redeemed", "spent", price)
        again = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
        assert again.status_code in (400, 403), again.text
    spent = "SELECT COUNT(*) FROM payments WHERE mode = 'cashu' AND status = 'spent'"
    assert store_value(db, spent) >= ROUNDS
    assert_ledger_balances(cashu_server)


async def test_proofs_pending_at_the_mint_are_not_spent(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    clear_proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """The mint answers the swap "proofs are pending" (11002): not spent. The payer is told
    to retry (503, Retry-After) without "nothing was charged"; the retry asks the mint,
    finds the proofs unspent, swaps them and serves the call once."""
    proxy, db = clear_proxy, cashu_server.settings
    price = int((await client.post("/api/l402/vote", json=VOTE)).json()["amountSats"])
    token = wallet.token(price)
    proxy.lose = "pending"
    try:
        first = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    finally:
        proxy.lose = ""
    assert first.status_code == 503, first.text
    assert first.json()["error_code"] == "CASHU_TOKEN_PENDING"
    assert first.headers["Retry-After"] == "5"
    assert "Nothing was charged" not in first.json()["error"]
    assert mint_states(mint, token) == {"UNSPENT"}
    retry = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert retry.status_code == 200, retry.text
    assert served_for(db, token) == ("redeemed", "spent", price)
    assert_ledger_balances(cashu_server)


async def test_a_swap_of_ours_that_reached_the_mint_late_is_restored_not_called_spent(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    clear_proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """A slow network: the first swap reaches the mint after satsgate gave up on it (503).
    The retry finds the proofs unspent and swaps again; meanwhile the first swap lands,
    so the mint refuses the retry's swap as spent. That spend is satsgate's own: the
    saved outputs are restored (NUT-09) and the call is served, never refused as spent."""
    proxy, db = clear_proxy, cashu_server.settings
    price = int((await client.post("/api/l402/vote", json=VOTE)).json()["amountSats"])
    token = wallet.token(price + 2)
    # The first swap lands 3 s after it was sent (satsgate gives up after 2 s); the
    # retry's, sent at about 2 s, waits 1.6 s: it lands after the first.
    proxy.delays = [3.0, 1.6]
    first = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert first.status_code == 503, first.text
    assert first.json()["error_code"] == "CASHU_TOKEN_PENDING"
    retry = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert retry.status_code == 200, retry.text
    assert proxy.delays == []  # both swaps went through the proxy
    assert wallet.receive(retry.headers["X-Cashu-Change"]) == 2
    assert mint_states(mint, token) == {"SPENT"}
    assert served_for(db, token) == ("redeemed", "spent", price)
    assert_ledger_balances(cashu_server)


async def test_a_swap_answer_that_does_not_unblind_is_restored(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    clear_proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """The mint swapped but its answer carries signatures that are not points: no 500 and
    no "nothing was charged"; the retry restores the outputs (NUT-09) and is served."""
    proxy, db = clear_proxy, cashu_server.settings
    price = int((await client.post("/api/l402/vote", json=VOTE)).json()["amountSats"])
    token = wallet.token(price)
    proxy.lose, proxy.lose_times = "garble", 1
    first = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert first.status_code == 503, first.text
    assert first.json()["error_code"] == "CASHU_TOKEN_PENDING"
    assert "Nothing was charged" not in first.json()["error"]
    assert mint_states(mint, token) == {"SPENT"}
    retry = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert retry.status_code == 200, retry.text
    assert served_for(db, token) == ("redeemed", "spent", price)
    assert_ledger_balances(cashu_server)


G = "0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"  # secp256k1's


def forged(token: str) -> str:
    """The same proofs (secrets, amounts) with signatures the mint never made."""
    data = cbor2.loads(base64.urlsafe_b64decode(token[6:] + "=" * (-len(token[6:]) % 4)))
    for group in data["t"]:
        for entry in group["p"]:
            entry["c"] = bytes.fromhex(G)
    return "cashuB" + base64.urlsafe_b64encode(cbor2.dumps(data)).decode().rstrip("=")


async def test_a_token_the_mint_refuses_as_invalid_leaves_nothing_behind(
    client: httpx.AsyncClient,
    cashu_server: ThreadedServer,
    mint: NutshellMint,
    clear_proxy: MintProxy,
    wallet: PayerWallet,
) -> None:
    """Forged signatures: the mint refuses the swap, the proofs are unspent. 400
    CASHU_TOKEN_INVALID, and the receipt, its Ys and its outputs are gone (invalid tokens
    fill no table); the genuine token with the same secrets then pays its call."""
    db = cashu_server.settings
    price = int((await client.post("/api/l402/vote", json=VOTE)).json()["amountSats"])
    token = wallet.token(price)
    fake = forged(token)
    resp = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": fake})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == "CASHU_TOKEN_INVALID"
    assert resp.json()["error"].endswith("Nothing was charged.")
    receipt_id = receipt_id_of(token)
    for table, column in (
        ("ecash_receipts", "receipt_id"),
        ("ecash_inputs", "receipt_id"),
        ("ecash_outputs", "op_id"),
    ):
        left = store_value(db, f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", receipt_id)
        assert left == 0, table
    assert mint_states(mint, token) == {"UNSPENT"}
    paid = await client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert paid.status_code == 200, paid.text
    assert served_for(db, token) == ("redeemed", "spent", price)


# -- a crash after the swap was sent --------------------------------------------------------


@pytest.fixture
def serve(tmp_path: Path, clear_proxy: MintProxy) -> Iterator[KillableServer]:
    config = f'[cashu]\nmints = ["{clear_proxy.url}/"]\nmelt = false\nmint_timeout_s = 60\n'
    server = KillableServer(tmp_path / "data", config)
    try:
        yield server
    finally:
        server.kill()


def test_a_crash_after_the_swap_was_sent_is_restored_at_restart(
    serve: KillableServer, mint: NutshellMint, clear_proxy: MintProxy, wallet: PayerWallet
) -> None:
    """satsgate is killed (SIGKILL) after the mint made its swap and before the answer
    came back. At restart the receipt, left 'swapping' by the dead process, is settled at
    once: the saved outputs are restored (NUT-09) into satsgate's wallet and the payment
    is recorded, paid and unused; the token presented again serves its call."""
    proxy, db = clear_proxy, serve
    serve.start()
    with httpx.Client(base_url=serve.url, timeout=30) as client:
        price = int(client.post("/api/l402/vote", json=VOTE).json()["amountSats"])
        token = wallet.token(price + 1)
        proxy.lose = "hang"
        lost = send_then_kill(
            client.build_request("POST", "/api/l402/vote", json=VOTE, headers={"X-Cashu": token}),
            client,
            proxy,
            serve,
        )
    assert isinstance(lost, httpx.TransportError)  # the connection died with the server
    proxy.lose = ""
    assert mint_states(mint, token) == {"SPENT"}  # the mint swapped: the value is ours
    ((status,),) = store_rows(
        db, "SELECT status FROM ecash_receipts WHERE receipt_id = ?", receipt_id_of(token)
    )
    assert status == "swapping"  # what the dead process left
    serve.start()
    deadline = time.monotonic() + 30
    while held_for(db, token)[0] != "redeemed" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert held_for(db, token) == ("redeemed", "paid", price)
    ((change,),) = store_rows(
        db, "SELECT change_token FROM ecash_receipts WHERE receipt_id = ?", receipt_id_of(token)
    )
    with httpx.Client(base_url=serve.url, timeout=30) as client:
        again = client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
    assert again.status_code == 200, again.text
    assert again.headers["X-Cashu-Change"] == change
    assert wallet.receive(change) == 1
    assert served_for(db, token) == ("redeemed", "spent", price)


def send_then_kill(
    request: httpx.Request, client: httpx.Client, proxy: MintProxy, serve: KillableServer
) -> BaseException | None:
    """Send ``request`` on a thread; once the mint has made the swap, kill satsgate. What
    the send raised (None: it was answered)."""
    failure: list[BaseException] = []

    def send() -> None:
        try:
            client.send(request)
        except httpx.HTTPError as exc:
            failure.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    assert proxy.forwarded.wait(30), "the swap never reached the mint"
    serve.kill()
    sender.join(30)
    return failure[0] if failure else None
