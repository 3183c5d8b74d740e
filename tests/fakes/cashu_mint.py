"""A real Nutshell mint on loopback, and a payer's Nutshell wallet, for the Cashu tests.

Both run in a virtual environment of their own (Nutshell pins httpx<0.26 and bitstring<4,
which cannot share satsgate's): ``.venv-cashu-mint`` at the repository root, made by
scripts/setup.sh --test (or here, on first use; ``SATSGATE_CASHU_MINT_VENV`` overrides the
place). The mint's Lightning side is either Nutshell's FakeWallet (it pays its own
invoices: tokens are minted at once) or an LNbits-speaking fake (tests/fakes/lnbits_fake.py)
that pays real invoices of satsgate's dev node, for the melt.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
NUTSHELL = "cashu==0.20.2"
PINS = ("marshmallow<4", "limits<5")  # what 0.20.2 needs but does not pin


def mint_venv() -> Path:
    """The mint's environment, made (about a minute, from PyPI) when missing."""
    venv = Path(os.environ.get("SATSGATE_CASHU_MINT_VENV", ROOT / ".venv-cashu-mint"))
    if not (venv / "bin" / "mint").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", NUTSHELL, *PINS],
            check=True,
        )
    return venv


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MINT_", "CASHU_", "FAKEWALLET_", "LIGHTNING_", "TOR", "SOCKS"))
    }
    env.update(extra)
    return env


class NutshellMint:
    """``mint`` (Nutshell's own server) on 127.0.0.1:``port``; ``url`` once it answers."""

    def __init__(
        self,
        venv: Path,
        workdir: Path,
        port: int,
        *,
        input_fee_ppk: int = 0,
        lnbits_url: str | None = None,
    ) -> None:
        self.url = f"http://127.0.0.1:{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        env = {
            "MINT_PRIVATE_KEY": "satsgate-tests-mint-key",
            "MINT_LISTEN_HOST": "127.0.0.1",
            "MINT_LISTEN_PORT": str(port),
            "MINT_DATABASE": str(workdir / "mint-db"),
            "MINT_RATE_LIMIT": "FALSE",
            "MINT_INPUT_FEE_PPK": str(input_fee_ppk),
            "MINT_URL": self.url,
            "CASHU_DIR": str(workdir / "mint-home"),
            "TOR": "FALSE",
            "DEBUG": "FALSE",
            "LOG_LEVEL": "WARNING",
            "FAKEWALLET_DELAY_INCOMING_PAYMENT": "0",
            "FAKEWALLET_DELAY_OUTGOING_PAYMENT": "0",
        }
        if lnbits_url is None:
            env["MINT_BACKEND_BOLT11_SAT"] = "FakeWallet"
        else:
            env["MINT_BACKEND_BOLT11_SAT"] = "LNbitsWallet"
            env["MINT_LNBITS_ENDPOINT"] = lnbits_url
            env["MINT_LNBITS_KEY"] = "satsgate-tests"
        self._log = open(workdir / "mint.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [str(venv / "bin" / "mint"), "--host", "127.0.0.1", "--port", str(port)],
            env=_clean_env(env),
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.log_path = workdir / "mint.log"
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the mint exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/keysets", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the mint did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()


class PayerWallet:
    """A Nutshell wallet of the mint's environment, driven line by line
    (tests/cashu_wallet_driver.py)."""

    def __init__(self, venv: Path, mint_url: str, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                str(venv / "bin" / "python"),
                str(ROOT / "tests" / "cashu_wallet_driver.py"),
                mint_url,
                str(workdir),
            ],
            env=_clean_env({"CASHU_DIR": str(workdir), "TOR": "FALSE", "DEBUG": "FALSE"}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._answer().get("ready") is True

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the wallet driver exited")
            if line.startswith("{"):  # Nutshell prints its own lines too
                return dict(json.loads(line))

    def command(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def token(self, amount: int) -> str:
        answer = self.command(op="mint", amount=amount)
        assert "token" in answer, answer
        return str(answer["token"])

    def token_of(self, amounts: list[int]) -> str:
        answer = self.command(op="mint_split", amounts=amounts)
        assert "token" in answer, answer
        return str(answer["token"])

    def receive(self, token: str) -> int:
        """Swap ``token`` into this wallet at the mint; its value (raises when refused)."""
        answer = self.command(op="receive", token=token)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return int(answer["amount"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


class MintProxy:
    """The mint as its clients reach it, through a forwarding proxy that can lose a swap
    (or the request at ``lose_path``):
    ``lose = "request"`` answers 502 without forwarding (the mint never sees the swap);
    ``lose = "answer"`` forwards it and answers 502 (the mint swapped; its answer is lost);
    ``lose = "pending"`` answers as Nutshell does while another operation holds the
    proofs (400, code 11002 "proofs are pending") without forwarding;
    ``lose = "garble"`` forwards it and answers its signatures with points that are not
    on the curve (a broken mint's answer: satsgate cannot unblind it);
    ``lose = "hang"`` forwards it, sets ``forwarded`` once the mint answered, and never
    answers (the client waits until it gives up, or is killed).
    ``lose_times``: how many swaps are lost before ``lose`` clears itself (0: until it is
    cleared). ``delays``: seconds each next swap waits in the proxy before it is
    forwarded (a slow network: a request can reach the mint after its client gave up)."""

    def __init__(self, target: str, port: int) -> None:
        from aiohttp import web

        self.url = f"http://127.0.0.1:{port}"
        self.lose = ""
        self.lose_path = "/v1/swap"  # the request whose request or answer is lost
        self.lose_times = 0
        self.delays: list[float] = []
        self.forwarded = threading.Event()
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)

        async def start() -> None:
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", port).start()

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)

    async def _forward(self, request: Any) -> Any:
        from aiohttp import web

        swap = request.path == self.lose_path
        lose = self.lose if swap else ""
        if lose and self.lose_times:
            self.lose_times -= 1
            if not self.lose_times:
                self.lose = ""
        if lose == "request":
            return web.json_response({"detail": "proxy lost the request"}, status=502)
        if lose == "pending":
            return web.json_response({"detail": "proofs are pending", "code": 11002}, status=400)
        body = await request.read()
        if swap and self.delays:  # forwarded even when the client gave up meanwhile
            await asyncio.sleep(self.delays.pop(0))
        async with httpx.AsyncClient(timeout=30) as client:
            resp = await client.request(
                request.method,
                self._target + request.path_qs,
                content=body,
                headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
            )
        if lose == "answer":
            return web.json_response({"detail": "proxy lost the answer"}, status=502)
        if lose == "garble":
            signatures = resp.json().get("signatures", [])
            for signature in signatures:
                signature["C_"] = "02" + "ff" * 32
            return web.json_response({"signatures": signatures})
        if lose == "hang":
            self.forwarded.set()
            await asyncio.sleep(3600)
        return web.Response(
            body=resp.content,
            status=resp.status_code,
            content_type=resp.headers.get("content-type", "application/json").split(";")[0],
        )

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
