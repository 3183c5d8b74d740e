"""What a Cashu (NUT-24) payment adds to a paid call, with the mint's own time left out.

    python bench/cashu_payment.py [--calls 100]

Starts a real Nutshell mint on loopback (as the tests do: tests/fakes/cashu_mint.py, its own
virtual environment) and satsgate (dev node) in this process, mints the tokens first with
a Nutshell wallet, then times one paid call of ``vote`` (1 sat, a trivial handler) three
ways, one call at a time:

- ``l402``: the call carrying a paid L402 credential (the 402 and the payment made before);
- ``cashu_exact``: the call carrying ``X-Cashu`` with a 1-sat token (one proof in, one out);
- ``cashu_change``: a 100-sat token of three proofs (64+32+4): 1 sat kept, 99 back as a
  change token (7 outputs), the answer carrying ``X-Cashu-Change``.

Every request satsgate makes to the mint is timed where it is made (a wrapper around
``Mint._call``, this process only), so ``satsgate`` = the call's time minus the mint's
round trips: the cost satsgate itself adds (decoding, hash_to_curve and blinding through
Nutshell's BDHKE, the store's transactions, unblinding, the change token). ``added`` =
that minus the L402 call's time. Also the BDHKE steps alone, per proof.

The machine may be shared: run it twice, and read medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from satsgate.payments import cashu_wire  # noqa: E402
from tests.conftest import ThreadedServer, free_port, make_settings  # noqa: E402
from tests.fakes.cashu_mint import NutshellMint, PayerWallet, mint_venv  # noqa: E402
from tests.fakes.lnbits_fake import LnbitsFake  # noqa: E402

VOTE = {"slug": "voice-changer"}
MINT_TIME: list[float] = []


def _timed_mint_calls() -> None:
    original = cashu_wire.Mint._call

    async def timed(self: cashu_wire.Mint, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            MINT_TIME.append(time.perf_counter() - started)

    cashu_wire.Mint._call = timed  # type: ignore[method-assign]


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


def time_cashu(client: httpx.Client, tokens: list[str]) -> dict[str, Any]:
    totals, mint, own = [], [], []
    for token in tokens:
        MINT_TIME.clear()
        started = time.perf_counter()
        resp = client.post("/api/l402/vote", json=VOTE, headers={"X-Cashu": token})
        elapsed = time.perf_counter() - started
        assert resp.status_code == 200, resp.text
        totals.append(elapsed)
        mint.append(sum(MINT_TIME))
        own.append(elapsed - sum(MINT_TIME))
    return {"call": ms(totals), "mint": ms(mint), "satsgate": ms(own), "calls": len(tokens)}


def time_l402(client: httpx.Client, calls: int) -> dict[str, Any]:
    auths = []
    for _ in range(calls):
        challenge = client.post("/api/l402/vote", json=VOTE).json()
        paid = client.post("/api/dev/pay", json={"invoice": challenge["invoice"]}).json()
        auths.append(f"L402 {challenge['macaroon']}:{paid['preimage']}")
    totals = []
    for auth in auths:
        started = time.perf_counter()
        resp = client.post("/api/l402/vote", json=VOTE, headers={"Authorization": auth})
        totals.append(time.perf_counter() - started)
        assert resp.status_code == 200, resp.text
    return {"call": ms(totals), "calls": calls}


def time_bdhke(rounds: int = 2000) -> dict[str, float]:
    """Per proof, satsgate's own use of Nutshell's BDHKE."""
    secrets_ = [f"{i:064x}" for i in range(rounds)]
    started = time.perf_counter()
    for s in secrets_:
        cashu_wire.y_of(s)
    y = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    outputs = [cashu_wire.blind(1, "00" * 8, "keep", i) for i in range(rounds)]
    b = (time.perf_counter() - started) / rounds
    # Unblinding needs a signature: sign as a mint would (k*B_), with Nutshell's step 2.
    b_dhke, private_key, public_key = cashu_wire._dhke()
    k = private_key()
    mint_key = k.public_key.format().hex()
    signed = [
        b_dhke.step2_bob(public_key(bytes.fromhex(o.b_)), k)[0].format().hex() for o in outputs
    ]
    started = time.perf_counter()
    for o, c_ in zip(outputs, signed, strict=True):
        cashu_wire.unblind(o, c_, 1, mint_key, "http://mint")
    u = (time.perf_counter() - started) / rounds
    return {
        "hash_to_curve_us": round(y * 1e6, 1),
        "blind_us": round(b * 1e6, 1),
        "unblind_us": round(u * 1e6, 1),  # includes the new proof's Y
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    _timed_mint_calls()
    venv = mint_venv()
    work = Path(tempfile.mkdtemp(prefix="bench-cashu-"))
    lnbits = LnbitsFake(free_port())
    mint = NutshellMint(venv, work / "mint", free_port(), lnbits_url=lnbits.url)
    wallet = PayerWallet(venv, mint.url, work / "payer")
    settings = make_settings(
        work / "node", cashu={"mints": [mint.url], "melt": False}, challenge_rate_per_min=0
    )
    server = ThreadedServer(settings)
    lnbits.pay_into = server.url
    try:
        exact = [wallet.token(1) for _ in range(args.calls)]
        change = [wallet.token_of([64, 32, 4]) for _ in range(args.calls)]
        with httpx.Client(base_url=server.url, timeout=60) as client:
            # Warm both paths (keysets and keys fetched once, caches filled).
            time_cashu(client, [wallet.token(1) for _ in range(3)])
            time_l402(client, 3)
            result: dict[str, Any] = {
                "l402": time_l402(client, args.calls),
                "cashu_exact": time_cashu(client, exact),
                "cashu_change": time_cashu(client, change),
                "bdhke_per_proof": time_bdhke(),
            }
        base = result["l402"]["call"]["median_ms"]
        for key in ("cashu_exact", "cashu_change"):
            result[key]["added_median_ms"] = round(result[key]["satsgate"]["median_ms"] - base, 3)
        print(json.dumps(result, indent=2))
        out = ROOT / "bench" / "results" / "cashu_payment.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        server.stop()
        wallet.close()
        mint.stop()
        lnbits.stop()


if __name__ == "__main__":
    main()
