"""Cashu's wire formats and its mint API, as far as a receiving server needs them.

- NUT-18 payment requests (``creqA`` + base64url of CBOR ``{"a", "u", "m"}``, the fields
  NUT-24 names) for the 402's ``X-Cashu`` header;
- NUT-00 V4 tokens (``cashuB`` + base64url of CBOR: mint ``m``, unit ``u``, groups ``t``
  of keyset id ``i`` (bytes) and proofs ``p`` with amount ``a``, secret ``s``, signature
  ``c`` (bytes)), read from a payer and written for change and refunds;
- BDHKE (NUT-00) through Nutshell's own implementation (``cashu.core.crypto.b_dhke``,
  the ``cashu`` package installed without its dependencies: see scripts/setup.sh), never
  a blind signature of satsgate's own making;
- the mint's v1 API (NUT-01 keys, NUT-02 keysets and input fees, NUT-03 swap, NUT-05
  melt, NUT-07 check state, NUT-08 blank outputs, NUT-09 restore) over httpx.
"""

from __future__ import annotations

import base64
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import cbor2
import httpx

from satsgate.store.ecash import HeldProof, Output


class CashuFormatError(ValueError):
    """A token or payment request that does not decode."""


# -- NUT-18 payment requests -----------------------------------------------------------------


def encode_payment_request(amount: int, unit: str, mints: Sequence[str]) -> str:
    """``creqA...``: the NUT-18 request NUT-24 puts in a 402's ``X-Cashu``."""
    body = cbor2.dumps({"a": amount, "u": unit, "m": list(mints)})
    return "creqA" + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_payment_request(text: str) -> dict[str, Any]:
    if not text.startswith("creqA"):
        raise CashuFormatError("a NUT-18 payment request starts with creqA")
    decoded = cbor2.loads(_b64(text[5:]))
    if not isinstance(decoded, dict):
        raise CashuFormatError("a payment request is a CBOR map")
    return decoded


def _b64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise CashuFormatError(f"not base64url: {exc}") from None


# -- NUT-00 V4 tokens --------------------------------------------------------------------------


@dataclass(frozen=True)
class Proof:
    keyset_id: str  # hex
    amount: int
    secret: str
    c: str  # hex, compressed point
    witness: str | None = None

    def wire(self) -> dict[str, Any]:
        """The proof as the mint's API takes it (an input of a swap or a melt)."""
        out: dict[str, Any] = {
            "id": self.keyset_id,
            "amount": self.amount,
            "secret": self.secret,
            "C": self.c,
        }
        if self.witness:
            out["witness"] = self.witness
        return out


@dataclass(frozen=True)
class Token:
    mint: str
    unit: str
    proofs: tuple[Proof, ...]
    memo: str | None = None

    @property
    def amount(self) -> int:
        return sum(p.amount for p in self.proofs)


MAX_PROOFS = 256
# No token is worth more than all the bitcoin there will be (21 million BTC, in sats):
# a larger sum is forged, and would not fit the store's 64-bit msat columns.
MAX_TOKEN_AMOUNT = 21_000_000 * 100_000_000


def decode_token(text: str) -> Token:
    """A ``cashuB`` (V4) token, checked for shape (not for value: the mint decides that)."""
    text = text.strip()
    if text.startswith("cashuA"):
        raise CashuFormatError("V3 (cashuA) tokens are not accepted here: send a cashuB token")
    if not text.startswith("cashuB"):
        raise CashuFormatError("a Cashu token starts with cashuB")
    try:
        data = cbor2.loads(_b64(text[6:]))
    except CashuFormatError:
        raise
    except Exception as exc:  # cbor2 raises several kinds on garbage
        raise CashuFormatError(f"the token's CBOR does not decode ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise CashuFormatError("a token is a CBOR map")
    mint, unit, groups, memo = data.get("m"), data.get("u"), data.get("t"), data.get("d")
    if not isinstance(mint, str) or not mint:
        raise CashuFormatError("the token names no mint (m)")
    if not isinstance(unit, str) or not unit:
        raise CashuFormatError("the token names no unit (u)")
    if not isinstance(groups, list) or not groups:
        raise CashuFormatError("the token holds no proofs (t)")
    proofs: list[Proof] = []
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("i"), bytes):
            raise CashuFormatError("each token group has a keyset id (i) in bytes")
        entries = group.get("p")
        if not isinstance(entries, list) or not entries:
            raise CashuFormatError("each token group has proofs (p)")
        for entry in entries:
            proofs.append(_proof(group["i"].hex(), entry))
    if len(proofs) > MAX_PROOFS:
        raise CashuFormatError(f"at most {MAX_PROOFS} proofs in one token")
    if sum(p.amount for p in proofs) > MAX_TOKEN_AMOUNT:
        raise CashuFormatError("the token's proofs add up to more than all bitcoin")
    return Token(mint, unit, tuple(proofs), memo if isinstance(memo, str) else None)


def _proof(keyset_id: str, entry: Any) -> Proof:
    if not isinstance(entry, dict):
        raise CashuFormatError("a proof is a CBOR map")
    amount, secret, sig = entry.get("a"), entry.get("s"), entry.get("c")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise CashuFormatError("a proof's amount (a) is a positive integer")
    if amount & (amount - 1) or amount >= 2**63:
        raise CashuFormatError("a proof's amount is a power of two")
    if not isinstance(secret, str) or not secret or len(secret) > 1024:
        raise CashuFormatError("a proof's secret (s) is a string")
    if not isinstance(sig, bytes) or len(sig) != 33:
        raise CashuFormatError("a proof's signature (c) is a 33-byte point")
    witness = entry.get("w")
    return Proof(
        keyset_id, amount, secret, sig.hex(), witness if isinstance(witness, str) else None
    )


def encode_token(mint: str, unit: str, proofs: Sequence[HeldProof]) -> str:
    """A ``cashuB`` token of proofs satsgate holds (change, refunds)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in proofs:
        groups.setdefault(token_keyset_id(p.keyset_id), []).append(
            {"a": p.amount, "s": p.secret, "c": bytes.fromhex(p.c)}
        )
    body = {
        "t": [{"i": bytes.fromhex(k), "p": ps} for k, ps in groups.items()],
        "m": mint,
        "u": unit,
    }
    return "cashuB" + base64.urlsafe_b64encode(cbor2.dumps(body)).decode().rstrip("=")


# -- BDHKE, through Nutshell --------------------------------------------------------------------


@cache
def _dhke() -> tuple[ModuleType, Any, Any]:
    """Nutshell's BDHKE module and its key classes, imported on first use (only when a
    [cashu] mint is configured: the plain install runs without the package)."""
    from cashu.core.crypto import b_dhke
    from cashu.core.crypto.secp import PrivateKey, PublicKey

    return b_dhke, PrivateKey, PublicKey


def crypto_missing() -> str:
    """'' when Nutshell's BDHKE imports, else why not (for the start-up check)."""
    try:
        _dhke()
    except ImportError as exc:
        return f"the cashu package (Nutshell) is not installed: {exc}"
    return ""


def y_of(secret: str) -> str:
    """Y = hash_to_curve(secret), compressed hex: a proof's identity at the mint (NUT-07)."""
    b_dhke, _, _ = _dhke()
    return str(b_dhke.hash_to_curve(secret.encode()).format().hex())


def blind(amount: int, keyset_id: str, role: str, position: int) -> Output:
    """A fresh secret and its blinded message B_ = Y + rG (NUT-00 step 1)."""
    b_dhke, _, _ = _dhke()
    secret = secrets.token_hex(32)
    b_, r = b_dhke.step1_alice(secret)
    return Output(b_.format().hex(), keyset_id, amount, secret, r.to_hex(), role, position)


def unblind(output: Output, c_: str, amount: int, mint_key: str, mint: str) -> HeldProof:
    """C = C_ - rK (NUT-00 step 3): the proof of ``output`` from the mint's signature."""
    b_dhke, private_key, public_key = _dhke()
    c = b_dhke.step3_alice(
        public_key(bytes.fromhex(c_)),
        private_key(bytes.fromhex(output.r)),
        public_key(bytes.fromhex(mint_key)),
    )
    secret = output.secret
    return HeldProof(y_of(secret), mint, output.keyset_id, amount, secret, c.format().hex())


def split_amount(amount: int) -> list[int]:
    """``amount`` as powers of two, largest first (the denominations of outputs)."""
    return [1 << i for i in range(amount.bit_length() - 1, -1, -1) if amount >> i & 1]


def blank_outputs_count(fee_reserve: int) -> int:
    """NUT-08: how many blank outputs return any unused part of a fee reserve."""
    return 0 if fee_reserve <= 0 else max(1, math.ceil(math.log2(fee_reserve)))


# -- the mint -------------------------------------------------------------------------------------


# Nutshell's codes for inputs or outputs held by an operation under way.
PENDING_CODES = frozenset({11002, 11004})


class MintUnreachable(Exception):
    """The mint did not answer (or answered 5xx): its state is unknown."""


class MintError(Exception):
    """The mint answered with a refusal (4xx): ``code`` is its NUT error code. A code is
    never read as what happened to a swap's inputs: 11002 is "proofs pending" to Nutshell
    and "transaction not balanced" in older NUT tables, and a spent answer may be to our
    own earlier swap. The proofs' states (NUT-07) and restore (NUT-09) decide that."""

    def __init__(self, status: int, code: int | None, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail

    @property
    def pending(self) -> bool:
        """Whether the mint says the inputs (or outputs) are held by another operation
        under way (Nutshell: 11002 "proofs are pending", 11004 "outputs are pending"): a
        refusal that may pass on a retry, never a sign the token was spent."""
        return self.code in PENDING_CODES or "pending" in self.detail.lower()


@dataclass(frozen=True)
class Keyset:
    keyset_id: str
    unit: str
    active: bool
    input_fee_ppk: int


KEYSETS_TTL_S = 300.0


class Mint:
    """One trusted mint's v1 API. Keysets are cached for a few minutes (refetched when a
    token names one not seen yet); a keyset's keys never change, so they are kept."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self._http = http
        self._keysets: dict[str, Keyset] = {}
        self._keysets_at = 0.0
        self._keys: dict[str, dict[int, str]] = {}

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        try:
            resp = await self._http.request(method, self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise MintUnreachable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code >= 500:
            raise MintUnreachable(f"HTTP {resp.status_code}")
        try:
            data = resp.json()
        except ValueError:
            raise MintUnreachable(f"HTTP {resp.status_code} without JSON") from None
        if resp.status_code >= 400:
            detail, code = "", None
            if isinstance(data, dict):
                detail = str(data.get("detail", ""))[:300]
                code = data.get("code") if isinstance(data.get("code"), int) else None
            raise MintError(resp.status_code, code, detail or f"HTTP {resp.status_code}")
        return data

    async def keysets(self, refresh: bool = False) -> dict[str, Keyset]:
        if refresh or not self._keysets or time.monotonic() - self._keysets_at > KEYSETS_TTL_S:
            data = await self._call("GET", "/v1/keysets")
            self._keysets = {
                str(k["id"]): Keyset(
                    str(k["id"]),
                    str(k.get("unit", "")),
                    bool(k.get("active", False)),
                    int(k.get("input_fee_ppk") or 0),
                )
                for k in data.get("keysets", [])
            }
            self._keysets_at = time.monotonic()
        return self._keysets

    async def keyset(self, keyset_id: str) -> Keyset | None:
        """The keyset of this id, or of this short id (NUT-02: a version-01 keyset's id is
        shortened to its first 8 bytes in V4 tokens)."""
        found = _find_keyset(await self.keysets(), keyset_id)
        if found is None:
            found = _find_keyset(await self.keysets(refresh=True), keyset_id)
        return found

    async def active_keyset(self, unit: str) -> Keyset:
        for keyset in (await self.keysets()).values():
            if keyset.active and keyset.unit == unit:
                return keyset
        for keyset in (await self.keysets(refresh=True)).values():
            if keyset.active and keyset.unit == unit:
                return keyset
        raise MintError(400, None, f"the mint has no active keyset for {unit}")

    async def keys(self, keyset_id: str) -> dict[int, str]:
        keys = self._keys.get(keyset_id)
        if keys is None:
            data = await self._call("GET", f"/v1/keys/{keyset_id}")
            found = [k for k in data.get("keysets", []) if str(k.get("id")) == keyset_id]
            if not found:
                raise MintError(400, None, f"the mint has no keys for keyset {keyset_id}")
            keys = {int(amount): str(key) for amount, key in found[0]["keys"].items()}
            self._keys[keyset_id] = keys
        return keys

    async def input_fee(self, keyset_ids: Sequence[str]) -> int:
        """NUT-02: the fee of spending these inputs, ceil(sum of input_fee_ppk / 1000)."""
        ppk = 0
        for keyset_id in keyset_ids:
            keyset = await self.keyset(keyset_id)
            ppk += keyset.input_fee_ppk if keyset is not None else 0
        return (ppk + 999) // 1000

    async def swap(
        self, inputs: Sequence[dict[str, Any]], outputs: Sequence[Output]
    ) -> list[dict[str, Any]]:
        data = await self._call(
            "POST", "/v1/swap", {"inputs": list(inputs), "outputs": _blinded(outputs)}
        )
        return list(data.get("signatures", []))

    async def check_state(self, ys: Sequence[str]) -> dict[str, str]:
        data = await self._call("POST", "/v1/checkstate", {"Ys": list(ys)})
        return {str(s["Y"]): str(s["state"]) for s in data.get("states", [])}

    async def restore(self, outputs: Sequence[Output]) -> dict[str, dict[str, Any]]:
        """NUT-09: the signatures the mint made for these outputs, by B_."""
        data = await self._call("POST", "/v1/restore", {"outputs": _blinded(outputs)})
        signatures = data.get("signatures") or data.get("promises") or []
        return {str(o["B_"]): s for o, s in zip(data.get("outputs", []), signatures, strict=False)}

    async def melt_quote(self, bolt11: str, unit: str) -> dict[str, Any]:
        data = await self._call("POST", "/v1/melt/quote/bolt11", {"request": bolt11, "unit": unit})
        return dict(data)

    async def melt_quote_state(self, quote: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/v1/melt/quote/bolt11/{quote}"))

    async def melt(
        self, quote: str, inputs: Sequence[dict[str, Any]], outputs: Sequence[Output]
    ) -> dict[str, Any]:
        body = {"quote": quote, "inputs": list(inputs), "outputs": _blinded(outputs)}
        return dict(await self._call("POST", "/v1/melt/bolt11", body))


def _find_keyset(keysets: Mapping[str, Keyset], keyset_id: str) -> Keyset | None:
    found = keysets.get(keyset_id)
    if found is None and len(keyset_id) == 16:
        matches = [k for k in keysets.values() if k.keyset_id.startswith(keyset_id)]
        found = matches[0] if len(matches) == 1 else None
    return found


def token_keyset_id(keyset_id: str) -> str:
    """A keyset id as V4 tokens carry it: a version-01 id shortened to 8 bytes (NUT-02)."""
    return keyset_id[:16] if keyset_id.startswith("01") else keyset_id


def _blinded(outputs: Sequence[Output]) -> list[dict[str, Any]]:
    return [{"amount": o.amount, "id": o.keyset_id, "B_": o.b_} for o in outputs]


def quote_state(data: Mapping[str, Any]) -> str:
    """A melt quote's state: 'PAID', 'PENDING' or 'UNPAID' (older mints: ``paid``)."""
    state = data.get("state")
    if isinstance(state, str):
        return state.upper()
    return "PAID" if data.get("paid") else "UNPAID"
