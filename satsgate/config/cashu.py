"""The ``[cashu]`` table (Cashu ecash payments, satsgate/payments/cashu.py): its keys, types
and checks. Kept apart from the payment code so that the settings' check at start
(satsgate/config/settings.py) reads it without importing the services it pays for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class CashuConfig:
    """``[cashu]``: the mints the operator trusts (unit sat) and the melt schedule."""

    mints: tuple[str, ...]
    unit: str = "sat"
    # Melt held ecash into the node's Lightning balance (on by default: every satsgate
    # runs with a Lightning backend).
    melt: bool = True
    melt_interval_s: int = 900
    # Melt a mint's ecash once at least this much is held there.
    melt_min_sat: int = 100
    # Skip a melt whose fee reserve plus input fees exceed this share of the amount.
    melt_max_fee_pct: float = 5.0
    # A mint that takes longer than this is treated as unreachable.
    mint_timeout_s: float = 20.0


_KEYS: dict[str, type | tuple[type, ...]] = {
    "mints": list,
    "unit": str,
    "melt": bool,
    "melt_interval_s": int,
    "melt_min_sat": int,
    "melt_max_fee_pct": (int, float),
    "mint_timeout_s": (int, float),
}


def normalize_mint_url(url: str) -> str:
    return url.strip().rstrip("/")


def parse_config(raw: Mapping[str, Any]) -> CashuConfig | None:
    """The ``[cashu]`` table; None when no mint is configured (Cashu is off)."""
    unknown = set(raw) - set(_KEYS)
    if unknown:
        raise ValueError(f"unknown [cashu] settings: {', '.join(sorted(unknown))}")
    for key, kind in _KEYS.items():
        if key in raw and not isinstance(raw[key], kind):
            raise ValueError(f"[cashu] {key} has the wrong type")
    mints = tuple(normalize_mint_url(str(m)) for m in raw.get("mints", []))
    if not mints:
        return None
    for mint in mints:
        parts = urlsplit(mint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"[cashu] mints: {mint!r} is not an http(s) URL")
    if raw.get("unit", "sat") != "sat":
        raise ValueError('[cashu] unit: only "sat" is supported')
    config = CashuConfig(
        mints=mints,
        melt=bool(raw.get("melt", True)),
        melt_interval_s=int(raw.get("melt_interval_s", 900)),
        melt_min_sat=int(raw.get("melt_min_sat", 100)),
        melt_max_fee_pct=float(raw.get("melt_max_fee_pct", 5.0)),
        mint_timeout_s=float(raw.get("mint_timeout_s", 20.0)),
    )
    if config.melt_interval_s < 10 or config.melt_min_sat < 1:
        raise ValueError("[cashu] melt_interval_s must be >= 10 and melt_min_sat >= 1")
    return config
