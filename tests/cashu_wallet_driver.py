"""A Nutshell wallet driven over stdin/stdout, run by the tests in the mint's own virtual
environment (Nutshell's pins cannot share satsgate's): one JSON command per line, one JSON
answer per line.

    {"op": "mint", "amount": 21}           -> {"token": "cashuB..."}   (minted at once: the
                                               mint's FakeWallet pays its own invoices)
    {"op": "mint_split", "amounts": [..]}  -> {"token": "cashuB..."}   (those denominations)
    {"op": "receive", "token": "cashuB.."} -> {"amount": 21}           (swapped into this wallet)
    {"op": "balance"}                      -> {"balance": 42}
    {"op": "decode_request", "request": "creqA..."}, {"op": "decode_token", "token": ...}:
                                              what Nutshell's own readers make of them

Errors answer {"error": "..."}. Not part of satsgate: a payer's wallet, for the tests only.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def main(mint_url: str, wallet_dir: str) -> None:
    from cashu.core.settings import settings
    from cashu.wallet.helpers import deserialize_token_from_string, receive
    from cashu.wallet.wallet import Wallet

    settings.tor = False
    wallet = await Wallet.with_db(mint_url, db=wallet_dir, name="payer")
    await wallet.load_mint()
    await wallet.load_proofs()
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        try:
            answer = await handle(wallet, command, deserialize_token_from_string, receive)
        except Exception as exc:  # the test reads the mint's refusal
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


async def handle(wallet: Any, command: dict[str, Any], deserialize: Any, receive: Any) -> Any:
    op = command["op"]
    if op in ("mint", "mint_split"):
        split = command.get("amounts")
        amount = sum(split) if split else int(command["amount"])
        quote = await wallet.request_mint(amount)
        proofs = await wallet.mint(amount, quote_id=quote.quote, split=split)
        token = await wallet.serialize_proofs(proofs)
        # The token leaves this wallet: its proofs are no longer counted here.
        await wallet.invalidate(proofs, check_spendable=False)
        return {"token": token}
    if op == "receive":
        await wallet.load_proofs(reload=True)
        before = _sats(wallet.available_balance)
        await receive(wallet, deserialize(command["token"]))
        await wallet.load_proofs(reload=True)
        return {"amount": _sats(wallet.available_balance) - before}
    if op == "decode_request":  # Nutshell's own NUT-18 reader
        from cashu.core.nuts.nut18 import deserialize as read_request

        request = read_request(command["request"])
        return {"request": request.model_dump(exclude_none=True)}
    if op == "decode_token":  # Nutshell's own V4 reader
        token = deserialize(command["token"])
        return {
            "mint": token.mint,
            "unit": token.unit,
            "amounts": sorted(p.amount for p in token.proofs),
        }
    if op == "balance":
        await wallet.load_proofs(reload=True)
        return {"balance": _sats(wallet.available_balance)}
    return {"error": f"unknown op {op}"}


def _sats(value: Any) -> int:
    return int(getattr(value, "amount", value))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
