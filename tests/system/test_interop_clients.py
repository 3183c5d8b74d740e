"""Independent clients buy calls from a live satsgate: mppx (the MPP TypeScript SDK),
Alby's lightning-tools (fetchWithL402, fetchWithMpp), Lightning Labs' l402sdk, pyl402,
bolthub, routeweiler and ln-church-agent, each through its own documented API, two calls in
a row from one URL (issue 34: a client that keeps its credential per URL must get a 402
with a fresh challenge for the second call, and a client that reads only the first
challenge must find the one it pays there). ln-church-agent cannot read a 402 with more
than one challenge, a bug of its own: its tests show that, and how far it gets.

mppx and Alby's tools run in node (tests/js, installed by scripts/setup.sh --test):
mppx with a small lightning charge method, both with a payer that is the dev node's
/api/dev/pay. l402sdk pays through an LND node's REST API: :class:`LndRestShim` speaks
that wire (``POST /v2/router/send`` streaming ``{"result": Payment}`` lines, the
macaroon in ``Grpc-Metadata-macaroon``) and pays through the dev node. pyl402 (which pins
httpx<0.28), routeweiler (cryptography<45) and ln-church-agent (bolt11<2.1.1) each run in an
environment of their own (tests/pyl402_buyer.py, tests/routeweiler_buyer.py,
tests/ln_church_buyer.py) with a wallet that pays through the dev node.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.metadata
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from satsgate.lightning.invoices import decode_invoice
from satsgate.payments.mpp import b64url_decode
from tests.conftest import ThreadedServer, free_port, skip_unless_ci
from tests.payments.test_gateway import CARD, payment_count

JS_DIR = Path(__file__).parent.parent / "js"
PRICE_SATS = 5  # render-card, flat


def card(title: str) -> dict[str, Any]:
    return {**CARD, "title": title}


# -- the node clients ------------------------------------------------------------------------


def node_package_version(name: str) -> str:
    """The version of ``name`` installed in tests/js; skips (fails in CI) without node or it."""
    package = JS_DIR / "node_modules" / name / "package.json"
    if shutil.which("node") is None or not package.is_file():
        skip_unless_ci(f"{name} is not installed (node and tests/js: scripts/setup.sh --test)")
    return str(json.loads(package.read_text())["version"])


def run_node(
    server: ThreadedServer, script: str, mode: str | None, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run a buyer in tests/js against render-card; one JSON answer per body."""
    proc = subprocess.run(
        [
            "node",
            str(JS_DIR / script),
            *([mode] if mode is not None else []),
            f"{server.url}/api/l402/render-card",
            f"{server.url}/api/dev/pay",
            *(json.dumps(body) for body in bodies),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=JS_DIR,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


# -- mppx -----------------------------------------------------------------------------------


def buy_with_mppx(server: ThreadedServer, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert node_package_version("mppx") == "0.11.0"  # docs/payments.md names this version
    return run_node(server, "mppx_buy.mjs", None, bodies)


def test_mppx_buys_two_calls_in_a_row_from_one_url(server: ThreadedServer) -> None:
    before = payment_count(server)
    first, second = buy_with_mppx(server, [card("mppx one"), card("mppx two")])
    references = []
    for answer in (first, second):
        assert answer["status"] == 200, answer
        assert answer["body"]["format"] == "png" and answer["body"]["image_base64"]
        assert len(answer["paid"]) == 1  # paid its own invoice, once
        # mppx declares what it pays with; the 402 then leads with that challenge (the
        # joined header starts with Payment: what Alby's fetchWithMpp checks).
        assert answer["acceptPayment"][0] == "lightning/charge"
        assert len(answer["challenges"]) == 1
        assert answer["challenges"][0].startswith('Payment id="')
        assert 'intent="session"' not in answer["challenges"][0]  # not accepted: left out
        receipt = json.loads(b64url_decode(answer["receipt"]))
        assert (receipt["status"], receipt["method"]) == ("success", "lightning")
        assert receipt["reference"] == decode_invoice(answer["paid"][0]).payment_hash
        references.append(receipt["reference"])
    assert first["paid"] != second["paid"] and references[0] != references[1]
    # Each call made its own challenge and nothing more: a charge per call, no sessions.
    assert payment_count(server) - before == 2


# -- Alby's lightning-tools -------------------------------------------------------------------


def buy_with_alby(
    server: ThreadedServer, mode: str, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    assert node_package_version("@getalby/lightning-tools") == "9.0.1"  # as docs/payments.md
    return run_node(server, "alby_buy.mjs", mode, bodies)


@pytest.mark.parametrize("mode", ["l402", "mpp"])
def test_alby_buys_two_calls_in_a_row_from_one_url(server: ThreadedServer, mode: str) -> None:
    """fetchWithL402 pays the first challenge it reads; fetchWithMpp pays only when the
    (joined) WWW-Authenticate starts with Payment, even when the request declared
    Accept-Payment: lightning/charge. Both buy a call each time."""
    before = payment_count(server)
    answers = buy_with_alby(server, mode, [card(f"alby {mode} one"), card(f"alby {mode} two")])
    for answer in answers:
        assert answer["status"] == 200, answer
        assert answer["body"]["format"] == "png" and answer["body"]["image_base64"]
        assert len(answer["paid"]) == 1
        assert answer["authorization"] == ["L402" if mode == "l402" else "Payment"]
        assert (answer["receipt"] is not None) is (mode == "mpp")
    assert answers[0]["paid"] != answers[1]["paid"]
    assert payment_count(server) - before == 2


# -- l402sdk --------------------------------------------------------------------------------


class LoopbackApp:
    """An aiohttp application on 127.0.0.1 in a thread and event loop of its own, as a
    separate server would be; subclasses add their routes in :meth:`routes`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class LndRestShim(LoopbackApp):
    """LND's REST API as far as l402sdk's LndRestBackend uses it, paying through the dev
    node: ``POST /v2/router/send`` (a stream of ``{"result": Payment}`` lines, int64
    fields as strings, the preimage and hash as hex, as LND answers) and ``GET
    /v1/getinfo``. The hex macaroon must come in ``Grpc-Metadata-macaroon``; LND refuses
    a request without it."""

    def __init__(self, dev_node_url: str) -> None:
        super().__init__()
        self.macaroon = secrets.token_hex(32)
        self.dev_node_url = dev_node_url
        self.payments: list[dict[str, Any]] = []

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Grpc-Metadata-macaroon") == self.macaroon

    async def _getinfo(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": 2, "message": "verification failed"}, status=500)
        return web.json_response(
            {"identity_pubkey": "02" + "11" * 32, "alias": "shim", "num_active_channels": 1}
        )

    async def _send(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.json_response({"code": 2, "message": "verification failed"}, status=500)
        send = await request.json()
        async with httpx.AsyncClient(timeout=30) as client:
            paid = await client.post(
                f"{self.dev_node_url}/api/dev/pay", json={"invoice": send["payment_request"]}
            )
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if paid.status_code != 200:
            failed = {"status": "FAILED", "failure_reason": "FAILURE_REASON_ERROR"}
            await resp.write(json.dumps({"result": failed}).encode() + b"\n")
            await resp.write_eof()
            return resp
        preimage = str(paid.json()["preimage"])
        payment_hash = hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
        self.payments.append({"request": send, "payment_hash": payment_hash})
        for status, extra in (("IN_FLIGHT", {}), ("SUCCEEDED", {"payment_preimage": preimage})):
            update = {
                "payment_hash": payment_hash,
                "payment_request": send["payment_request"],
                "status": status,
                "value_sat": str(PRICE_SATS),
                "value_msat": str(PRICE_SATS * 1000),
                "fee_sat": "0",
                "fee_msat": "0",
                "payment_preimage": "",
                **extra,
            }
            await resp.write(json.dumps({"result": update}).encode() + b"\n")
        await resp.write_eof()
        return resp

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/getinfo", self._getinfo)
        app.router.add_post("/v2/router/send", self._send)


@pytest.fixture
def lnd_rest(server: ThreadedServer) -> Iterator[LndRestShim]:
    shim = LndRestShim(server.url)
    shim.start()
    yield shim
    shim.stop()


def l402sdk_version() -> str:
    try:
        return importlib.metadata.version("l402sdk")
    except importlib.metadata.PackageNotFoundError:
        skip_unless_ci("l402sdk is not installed (the [test] extra)")
        raise


def buy_with_l402sdk(
    server: ThreadedServer, lnd: LndRestShim, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """l402sdk in a process of its own (tests/l402sdk_buyer.py: its calls hold the GIL)."""
    assert l402sdk_version() == "0.1.0"  # docs/payments.md names this version
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parent.parent / "l402sdk_buyer.py"),
            lnd.url,
            lnd.macaroon,
            str(PRICE_SATS),
            f"{server.url}/api/l402/render-card",
            *(json.dumps(body) for body in bodies),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_l402sdk_buys_two_calls_in_a_row_from_one_url(
    server: ThreadedServer, lnd_rest: LndRestShim
) -> None:
    before = payment_count(server)
    # Same URL, another request: l402sdk first sends the token it keeps for this URL,
    # which is spent; the 402 with a fresh challenge makes it pay again (a 403 ended it).
    *answers, spent = buy_with_l402sdk(server, lnd_rest, [card("l402sdk one"), card("l402sdk two")])
    assert len(answers) == 2, answers
    for answer in answers:
        assert answer["status"] == 200, answer
        assert answer["paid"] is True and answer["cached_token"] is False
        receipt = answer["receipt"]
        assert receipt["amount_sats"] == PRICE_SATS and receipt["response_status"] == 200
        body = json.loads(answer["body"])
        assert body["format"] == "png" and base64.b64decode(body["image_base64"])
    hashes = [answer["receipt"]["payment_hash"] for answer in answers]
    assert hashes[0] != hashes[1]
    assert [p["payment_hash"] for p in lnd_rest.payments] == hashes  # paid through LND REST
    assert spent == {"total_spent": 2 * PRICE_SATS}
    # One challenge per purchase, plus the one the spent token was answered with.
    assert payment_count(server) - before == 3


# -- pyl402 ----------------------------------------------------------------------------------


def own_venv(env_var: str, default_dir: str, distribution: str, requirements: list[str]) -> Path:
    """The environment of its own of a client whose pins satsgate's cannot share:
    scripts/setup.sh --test makes it (the same ``requirements``); here, on first use, when
    it is missing or holds another version; ``env_var`` overrides the place.
    ``requirements[0]`` is ``distribution==version``."""
    root = Path(__file__).resolve().parents[2]
    venv = Path(os.environ.get(env_var, root / default_dir))
    python = str(venv / "bin" / "python")
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    version = requirements[0].partition("==")[2]
    check = f"import importlib.metadata as m; assert m.version({distribution!r}) == {version!r}"
    if subprocess.run([python, "-c", check], check=False, capture_output=True).returncode:
        subprocess.run([python, "-m", "pip", "install", "-q", *requirements], check=True)
    return venv


def run_buyer(venv: Path, script: str, *args: str) -> list[dict[str, Any]]:
    """Run tests/<script> with the Python of ``venv``; one JSON object per line it prints."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(Path(__file__).parent.parent / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


# docs/payments.md names these versions; scripts/setup.sh --test installs the same.
PYL402 = ["pyl402==0.1.2"]
ROUTEWEILER = ["routeweiler==0.1.2"]
LN_CHURCH = ["ln-church-agent==1.18.17", "bitstring<5"]  # its bolt11 2.1 breaks on bitstring 5


def pyl402_venv() -> Path:
    return own_venv("SATSGATE_PYL402_VENV", ".venv-pyl402", "pyl402", PYL402)


def test_pyl402_buys_two_calls_in_a_row_from_one_url(server: ThreadedServer) -> None:
    """pyl402 keeps its token per URL and reads the joined WWW-Authenticate from its start:
    L402 must come first (it took LSAT before), and its spent token must get a 402 with a
    fresh challenge, which it pays (a 403 ended it)."""
    venv = pyl402_venv()
    before = payment_count(server)
    *answers, total = run_buyer(
        venv,
        "pyl402_buyer.py",
        server.url,
        "/api/l402/render-card",
        json.dumps(card("pyl402 one")),
        json.dumps(card("pyl402 two")),
    )
    assert [a["status"] for a in answers] == [200, 200], answers
    assert all(len(a["paid"]) == 1 and a["bytes"] > 1000 for a in answers), answers
    assert total == {"paid": 2}
    paid = [decode_invoice(a["paid"][0]).amount_msat for a in answers]
    assert paid == [PRICE_SATS * 1000] * 2
    # Two challenges: the first call's, and the fresh one the spent token was answered
    # with, which pyl402 paid for the second call.
    assert payment_count(server) - before == 2


# -- bolthub ---------------------------------------------------------------------------------


class DevNodeWallet:
    """bolthub's WalletAdapter (``pay_invoice(bolt11) -> preimage hex``) over the dev
    node's pay endpoint."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.paid: list[str] = []

    def pay_invoice(self, bolt11: str) -> str:
        resp = httpx.post(f"{self.base_url}/api/dev/pay", json={"invoice": bolt11}, timeout=30)
        resp.raise_for_status()
        self.paid.append(bolt11)
        return str(resp.json()["preimage"])


def test_bolthub_buys_two_calls_in_a_row_from_one_url(server: ThreadedServer) -> None:
    """bolthub 0.7.0's L402Client (its documented buyer API) with a wallet adapter of its
    protocol: it reads the macaroon and invoice out of the joined WWW-Authenticate and
    pays each call's challenge."""
    assert importlib.metadata.version("bolthub") == "0.7.0"  # docs/payments.md names it
    from bolthub import L402Client

    wallet = DevNodeWallet(server.url)
    paid: list[dict[str, Any]] = []
    url = f"{server.url}/api/l402/render-card"
    with L402Client(wallet, budget_sats=4 * PRICE_SATS, on_paid=paid.append) as client:
        answers = [client.post(url, json=card(title)) for title in ("bolthub one", "bolthub two")]
        spent = client.total_spent
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert all(base64.b64decode(a.json()["image_base64"]) for a in answers)
    assert len(wallet.paid) == 2 and spent == 2 * PRICE_SATS
    hashes = [p["payment_hash"] for p in paid]
    assert hashes == [decode_invoice(bolt11).payment_hash for bolt11 in wallet.paid]


# -- routeweiler -----------------------------------------------------------------------------


def routeweiler_venv() -> Path:
    return own_venv("SATSGATE_ROUTEWEILER_VENV", ".venv-routeweiler", "routeweiler", ROUTEWEILER)


def test_routeweiler_buys_two_calls_in_a_row_from_one_url(
    server: ThreadedServer, tmp_path: Path
) -> None:
    """routeweiler 0.1.2's Routeweiler client (its documented async API) with a
    LightningFundingSource: it reads the first challenge of the joined WWW-Authenticate
    (L402, with its macaroon and invoice), pays it, and records each call in its SQLite
    trace sink. It keeps no token per URL: each call pays its own challenge."""
    before = payment_count(server)
    *answers, first_trace, second_trace = run_buyer(
        routeweiler_venv(),
        "routeweiler_buyer.py",
        server.url,
        "/api/l402/render-card",
        str(tmp_path),
        json.dumps(card("routeweiler one")),
        json.dumps(card("routeweiler two")),
    )
    assert [a["status"] for a in answers] == [200, 200], answers
    assert all(len(a["paid"]) == 1 and a["bytes"] > 1000 for a in answers), answers
    invoices = [decode_invoice(a["paid"][0]) for a in answers]
    assert [i.amount_msat for i in invoices] == [PRICE_SATS * 1000] * 2
    assert invoices[0].payment_hash != invoices[1].payment_hash
    # Its own record of each call: the L402 rail, the price in sats, and the preimage it
    # proved the payment with (the paid invoice's).
    for trace, invoice in zip((first_trace, second_trace), invoices, strict=True):
        assert (trace["trace"], trace["status"], trace["amount"]) == ("l402", 200, str(PRICE_SATS))
        preimage = bytes.fromhex(trace["preimage"])
        assert hashlib.sha256(preimage).hexdigest() == invoice.payment_hash
    assert payment_count(server) - before == 2


# -- ln-church-agent --------------------------------------------------------------------------


def ln_church_venv() -> Path:
    return own_venv("SATSGATE_LN_CHURCH_VENV", ".venv-ln-church", "ln-church-agent", LN_CHURCH)


class FirstChallengeProxy(LoopbackApp):
    """A reverse proxy in front of satsgate that passes on only the first
    ``WWW-Authenticate`` line of an answer (L402, as satsgate orders them), and everything
    else as it is: what ln-church-agent can read."""

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{path:.*}", self._forward)

    async def _forward(self, request: web.Request) -> web.Response:
        skip = {"host", "content-length"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        async with httpx.AsyncClient(timeout=30) as client:
            upstream = await client.request(
                request.method,
                f"{self.upstream}{request.path_qs}",
                headers=headers,
                content=await request.read(),
            )
        answer = web.Response(status=upstream.status_code, body=upstream.content)
        hop = {"content-length", "content-encoding", "transfer-encoding", "date", "server"}
        for name, value in upstream.headers.multi_items():
            if name.lower() not in hop and name.lower() != "www-authenticate":
                answer.headers.add(name, value)
        challenges = upstream.headers.get_list("WWW-Authenticate")
        if challenges:
            answer.headers.add("WWW-Authenticate", challenges[0])
        return answer


def buy_with_ln_church(base_url: str, dev_node_url: str, titles: list[str]) -> list[dict[str, Any]]:
    bodies = [json.dumps(card(title)) for title in titles]
    path = "/api/l402/render-card"
    return run_buyer(ln_church_venv(), "ln_church_buyer.py", base_url, path, dev_node_url, *bodies)


def test_ln_church_agent_refuses_a_402_with_more_than_one_challenge(server: ThreadedServer) -> None:
    """ln-church-agent 1.18.17 cannot pay satsgate's 402, for a bug of its own: its
    Payment402Client reads the (joined) WWW-Authenticate as one challenge. An auth scheme
    it does not know (LSAT) makes the whole header "malformed", and without LSAT it reads
    the L402 challenge's parameters on into the next challenge and finds no valid invoice.
    RFC 9110 (11.6.1) lets a 402 carry several challenges, and satsgate offers three (L402,
    LSAT, Payment charge), as aperture offers L402 and LSAT. It stops before
    paying anything."""
    before = payment_count(server)
    answers = buy_with_ln_church(server.url, server.url, ["church one", "church two"])
    refused = {"error": "PaymentChallengeError", "message": "Malformed payment challenge."}
    assert answers == [{**refused, "paid": []}] * 2
    assert payment_count(server) - before == 2  # each 402 made its challenge; none paid


@pytest.fixture
def first_challenge_proxy(server: ThreadedServer) -> Iterator[FirstChallengeProxy]:
    proxy = FirstChallengeProxy(server.url)
    proxy.start()
    yield proxy
    proxy.stop()


def test_ln_church_agent_buys_two_calls_in_a_row_given_one_challenge(
    server: ThreadedServer, first_challenge_proxy: FirstChallengeProxy
) -> None:
    """How far ln-church-agent gets: shown satsgate's 402 with its first challenge alone
    (L402), its execute_detailed pays it and gets the call, twice from one URL, paying
    each call's invoice through its ln_adapter. The refusal above is its header parsing
    alone."""
    before = payment_count(server)
    answers = buy_with_ln_church(first_challenge_proxy.url, server.url, ["church 1", "church 2"])
    assert [a.get("scheme") for a in answers] == ["L402", "L402"], answers
    for answer in answers:
        assert len(answer["paid"]) == 1
        assert {"format", "image_base64"} <= set(answer["keys"])
        assert decode_invoice(answer["paid"][0]).amount_msat == PRICE_SATS * 1000
    assert answers[0]["paid"] != answers[1]["paid"]
    assert payment_count(server) - before == 2
