"""e-signature: a PDF sent for signature on the ``esign`` engine (Documenso:
satsgate/engines/providers/documenso.py), screened like every outgoing contact; the
signed copy goes out by the ``email`` engine, followed by
satsgate.services.documents.esign_desk.
"""

from __future__ import annotations

import asyncio
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from satsgate.domain.media import (
    pdf_pages,
)
from satsgate.engines import EngineError, esign
from satsgate.errors import ErrorCode
from satsgate.services.base import (
    FlatPrice,
    Params,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.comms.screening import Outreach, screen
from satsgate.services.documents.esign_desk import ESIGN_DESK, new_request_id, status_url
from satsgate.services.inputs.params import (
    MiB,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_email_address,
    decode_file,
    read_media,
)

# -- e-signature ---------------------------------------------------------------------------

ESIGN_MAX_BYTES = 20 * MiB
MAX_SIGNERS = 10


class Signer(Params):
    name: str = Field(min_length=1, max_length=120)
    email: str

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        return check_email_address(value)


class ESignatureParams(ServiceParams):
    """No model choice (model 46 is the service itself, as send-email's): the node's
    ``esign`` engine serves it without a ``[providers.NAME.models]`` entry."""

    documentBase64: str = Field(
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(ESIGN_MAX_BYTES),
        description="The PDF to sign, base64, 20 MB.",
    )
    signers: list[Signer] = Field(min_length=1, max_length=MAX_SIGNERS)
    customerEmail: str = Field(
        validation_alias=alias("customerEmail", "customer_email"),
        description="Receives the signed copy once everyone has signed.",
    )
    note: str | None = Field(None, min_length=1, max_length=1000)

    @field_validator("customerEmail")
    @classmethod
    def _email(cls, value: str) -> str:
        return check_email_address(value)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        emails = [s.email.lower() for s in self.signers]
        if len(set(emails)) != len(emails):
            raise ValueError("each signer needs their own e-mail address")
        return self

    def check(self) -> int:
        data = decode_file(self.documentBase64, "documentBase64", ESIGN_MAX_BYTES)
        return read_media(data, "documentBase64", pdf_pages)


async def e_signature(ctx: ServiceContext, params: ESignatureParams) -> ServiceResult:
    """Screen what reaches people (the note, the signers' names), send the PDF for
    signature, record the request for the desk that delivers the signed copy
    (satsgate.services.documents.esign_desk). A failure before the request went out is an
    EngineError: refunded. Re-runnable from params alone (a held request's release)."""
    desk = ctx.desk(ESIGN_DESK)
    if desk is None:
        raise EngineError(ErrorCode.SERVICE_ERROR, "E-signature requests cannot be followed here.")
    pages = await asyncio.to_thread(params.checked)
    pdf = await asyncio.to_thread(
        decode_file, params.documentBase64, "documentBase64", ESIGN_MAX_BYTES
    )
    signers = tuple(esign.Signer(s.name, s.email) for s in params.signers)
    names = ", ".join(s.name for s in signers)
    await screen(
        ctx,
        Outreach(
            channel="e_signature",
            recipients=(*(s.email for s in signers), params.customerEmail),
            text=f"Signers: {names}\n{params.note or ''}".strip(),
        ),
    )
    request_id = new_request_id()
    request = esign.SigningRequest(
        pdf=pdf,
        pages=int(pages),
        signers=signers,
        title=ESIGN_TITLE,
        message=params.note,
        reference=request_id,
    )
    sent = await ctx.engines.run(
        "esign",
        esign.ESignEngine,
        lambda engine, _model: engine.send_for_signature(request),
    )
    await desk.record(
        request_id=request_id,
        payment_id=ctx.call_id,  # the payment's id
        sent=sent,
        customer_email=params.customerEmail,
        signers_total=len(signers),
    )
    count = len(signers)
    return ServiceResult(
        {
            "success": True,
            "message": f"Sent for signature to {count} signer{'s' if count > 1 else ''}; "
            "the signed copy will be e-mailed to the customer once everyone has signed "
            "(hours to days).",
            "requestId": request_id,
            "status": "pending",
            "status_url": status_url(ctx.settings.public_base_url, request_id),
        }
    )


ESIGN_TITLE = "Document for signature"

E_SIGNATURE = ServiceSpec(
    slug="e-signature",
    tool_name="e_signature",
    category="utility",
    title="E-signature",
    description="Send a PDF for signature (each signer gets a signing link by e-mail; a "
    "signature field per signer on the last page); the signed copy is e-mailed to "
    "customerEmail as a PDF attachment once all signers have signed (hours to days): "
    "{ success, message, requestId, status, status_url }. Follow it free with "
    "GET status_url (tool get_e_signature_status). One price per document.",
    params=ESignatureParams,
    price_msat=FlatPrice.of_sats(1000, "e-signature"),
    handler=e_signature,
    model_ids=(46,),
    failure_codes=(
        ErrorCode.INVALID_INPUT,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.TIMEOUT,
        ErrorCode.RATE_LIMITED,
        ErrorCode.CONTENT_POLICY_HELD,
        ErrorCode.RECIPIENT_OPTED_OUT,
    ),
    max_body_bytes=body_limit(ESIGN_MAX_BYTES),
    example={
        "documentBase64": "<base64 PDF>",
        "signers": [{"name": "Alice", "email": "alice@example.org"}],
        "customerEmail": "me@example.org",
    },
    engine="esign",
    recipients=lambda p: (*(s.email for s in p.signers), p.customerEmail),
    also_engines=("email",),  # the signed copy goes out through the e-mail engine
)

SERVICES: tuple[ServiceSpec[Any], ...] = (E_SIGNATURE,)
