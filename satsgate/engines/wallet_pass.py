"""Capability: boarding passes (PDF or photo) to wallet passes (boardingpass-wallet).
Adapter: satsgate/engines/local/pkpass.py (zxing-cpp, IATA BCBP, .pkpass)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WalletPass:
    """One wallet pass: one passenger on one leg."""

    document: int  # index of the document it came from
    passenger: str  # "LUC DESMARAIS"
    flight: str  # "AC834"
    origin: str  # IATA airport codes
    destination: str
    date: str | None  # ISO date of the flight; None when the barcode has none
    seat: str | None
    compartment: str | None
    sequence: str | None
    pnr: str
    barcode_format: str  # "PDF417", "Aztec", "QRCode"
    signed: bool
    pkpass: bytes  # the .pkpass file (a zip)


@dataclass(frozen=True)
class PassBatch:
    passes: tuple[WalletPass, ...]
    warnings: tuple[str, ...]


class WalletPassEngine(Protocol):
    async def passes(self, documents: Sequence[bytes]) -> PassBatch:
        """Read every boarding-pass barcode of the documents (PDFs or images) and build one
        pass per passenger per leg; what cannot be used becomes a warning."""
