"""boardingpass-wallet: boarding passes (PDF or image) to Apple Wallet passes on the
local ``wallet_pass`` engine (satsgate/engines/local/pkpass.py: zxing-cpp, IATA BCBP,
.pkpass, signed when a pass certificate is configured).
"""

from __future__ import annotations

import asyncio
import datetime
import io
import zipfile
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from satsgate.domain.media import (
    document_pages,
)
from satsgate.engines import EngineError
from satsgate.engines.wallet_pass import WalletPass, WalletPassEngine
from satsgate.errors import ErrorCode
from satsgate.services.base import (
    PriceShape,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.pricing import MSAT, PER_PASS_SATS
from satsgate.services.inputs.params import (
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    read_media,
)

# -- boardingpass-wallet -------------------------------------------------------------------

PASS_DOC_MAX_BYTES = 10 * MiB
MAX_PASS_DOCUMENTS = 8


class BoardingPassParams(ServiceParams, ModelChoice):
    """One of documentBase64 or documents (up to 8). Priced 100 per document before
    parsing (one pass per document is the common case); a document yielding fewer passes
    is refunded the difference after parsing."""

    MODELS: ClassVar[tuple[int, ...]] = (47,)
    DEFAULT: ClassVar[int] = 47

    documentBase64: str | None = Field(
        None,
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(PASS_DOC_MAX_BYTES),
        description="One boarding pass (PDF or image) as base64, at most 10 MB.",
    )
    documents: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_PASS_DOCUMENTS,
        description="Up to 8 boarding passes (PDF or image) as base64.",
    )

    @field_validator("documents")
    @classmethod
    def _sizes(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(len(d) > b64_chars(PASS_DOC_MAX_BYTES) for d in value):
            raise ValueError("a document is larger than 10 MB")
        return value

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.documentBase64 is None) == (self.documents is None):
            raise ValueError("send exactly one of documentBase64 or documents")
        return self

    @property
    def all_documents(self) -> list[str]:
        return (
            [self.documentBase64] if self.documentBase64 is not None else list(self.documents or [])
        )

    def decoded(self) -> list[bytes]:
        out: list[bytes] = []
        for index, doc in enumerate(self.all_documents):
            field = "documentBase64" if self.documentBase64 is not None else f"documents[{index}]"
            out.append(decode_file(doc, field, PASS_DOC_MAX_BYTES))
        return out

    def check(self) -> int:
        for index, data in enumerate(self.decoded()):
            field = "documentBase64" if self.documentBase64 is not None else f"documents[{index}]"
            read_media(data, field, document_pages)
        return len(self.all_documents)


PASS_LINK_TTL_S = 30 * 60  # the spec: each save link expires after 30 minutes


def _bundle(named: list[tuple[str, bytes]]) -> bytes:
    """A .pkpasses bundle: the passes, each a .pkpass, in one zip (Wallet adds them all)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, data in named:
            archive.writestr(name, data)
    return out.getvalue()


def _file_stem(wallet_pass: WalletPass, number: int) -> str:
    surname = wallet_pass.passenger.rsplit(" ", 1)[-1]
    words = [
        f"{number:02d}",
        wallet_pass.flight,
        wallet_pass.origin,
        wallet_pass.destination,
        surname,
    ]
    return "-".join("".join(ch for ch in w if ch.isalnum()) for w in words if w)


async def boardingpass_wallet(ctx: ServiceContext, params: BoardingPassParams) -> ServiceResult:
    """One wallet pass per passenger per leg. Quoted per document; charged per pass found,
    up to the quote: documents that yield no pass are refunded (``partial_refund``)."""
    documents = await asyncio.to_thread(params.decoded)
    batch = await ctx.engines.run(
        "wallet_pass",
        WalletPassEngine,
        lambda engine, _model: engine.passes(documents),
    )
    if not batch.passes:
        raise EngineError(
            ErrorCode.INVALID_INPUT,
            "No boarding pass could be read: " + "; ".join(batch.warnings),
            may_fall_back=False,
        )
    entries: list[dict[str, Any]] = []
    named: list[tuple[str, bytes]] = []
    for number, wallet_pass in enumerate(batch.passes, 1):
        stored = await ctx.files.save(wallet_pass.pkpass, "pkpass", ttl_s=PASS_LINK_TTL_S)
        named.append((f"{_file_stem(wallet_pass, number)}.pkpass", wallet_pass.pkpass))
        entries.append(
            {
                "passenger": wallet_pass.passenger,
                "flight": wallet_pass.flight,
                "from": wallet_pass.origin,
                "to": wallet_pass.destination,
                "date": wallet_pass.date,
                "seat": wallet_pass.seat,
                # Not in the barcode (IATA BCBP has no zone, gate or boarding time).
                "zone": None,
                "gate": None,
                "boarding_time": None,
                "class": wallet_pass.compartment,
                "sequence": wallet_pass.sequence,
                "pnr": wallet_pass.pnr,
                "barcode_format": wallet_pass.barcode_format,
                "document": wallet_pass.document + 1,
                "signed": wallet_pass.signed,
                "save_url": stored.url,
            }
        )
    bundle = await asyncio.to_thread(_bundle, named)
    saved_all = await ctx.files.save(bundle, "pkpasses", ttl_s=PASS_LINK_TTL_S)
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=PASS_LINK_TTL_S)
    body = {
        "passes": entries,
        "count": len(entries),
        "save_all_url": saved_all.url,
        "links_expire_at": expires.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "signed": all(p.signed for p in batch.passes),
        "warnings": list(batch.warnings),
    }
    quoted = len(documents)
    charged = min(len(entries), quoted)
    return ServiceResult(
        body, charged_msat=charged * PER_PASS_SATS * MSAT if charged < quoted else None
    )


BOARDINGPASS_WALLET = ServiceSpec(
    slug="boardingpass-wallet",
    tool_name="boardingpass_wallet",
    category="utility",
    title="Boarding pass to wallet",
    description="Boarding passes (PDF or image, up to 8) to wallet passes: { passes, count, "
    "save_all_url, warnings, partial_refund? }; one Apple Wallet pass (.pkpass) per passenger "
    f"per leg, read from the PDF417, Aztec or QR code. {PER_PASS_SATS} sats per pass, quoted "
    "per document "
    "and refunded down to the passes found; save links expire after 30 minutes.",
    params=BoardingPassParams,
    price_msat=lambda p, _book: len(p.all_documents) * PER_PASS_SATS * MSAT,
    handler=boardingpass_wallet,
    price_shape=PriceShape(
        "per_pass",
        "per pass",
        PER_PASS_SATS * MSAT,
        note="Quoted per document sent; a document holding fewer passes is refunded the "
        "difference after parsing.",
    ),
    model_ids=(47,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(*[PASS_DOC_MAX_BYTES] * MAX_PASS_DOCUMENTS),
    example={"documentBase64": "<base64 PDF>"},
    engine="wallet_pass",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (BOARDINGPASS_WALLET,)
