"""The free status read of an e-signature request: ``GET /api/l402/e-signature?requestId=``
(a form of the service's own path) and the MCP tool ``get_e_signature_status``. The work
is done in satsgate.services.documents.esign_desk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints

from satsgate.errors import ApiError
from satsgate.operations.base import Call, Family, HttpRoute, OperationEnv, OperationSpec
from satsgate.operations.models import Body
from satsgate.services.base import Params
from satsgate.services.documents.esign_desk import STATUS_PATH
from satsgate.services.documents.ocr_convert_esign_wallet import E_SIGNATURE
from satsgate.services.inputs.params import alias

RequestId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[!-~]+$")]


class ESignStatusParams(Params):
    """The query of ``GET /api/l402/e-signature?requestId=<requestId>``."""

    model_config = ConfigDict(title="get_e_signature_status arguments")

    requestId: RequestId = Field(
        validation_alias=alias("requestId", "request_id"),
        description="The requestId of the e-signature answer.",
    )


class ESignStatus(Body):
    """An e-signature request: status is pending (waiting for signers), signed (everyone
    signed; the copy is being e-mailed), done (e-mailed), rejected, cancelled, expired
    or undeliverable (everyone signed, the e-mail failed every attempt)."""

    model_config = ConfigDict(title="ESignStatus")

    success: bool
    requestId: str
    status: str
    final: bool
    signers: int
    signed: int
    message: str
    created_at: int
    completed_at: int | None = None
    delivered_at: int | None = None
    status_url: str


async def e_signature_status(env: OperationEnv, args: ESignStatusParams, call: Call) -> ESignStatus:
    if env.esign is None:
        raise ApiError("INTERNAL_ERROR", "E-signature requests are not available.")
    return ESignStatus.model_validate(await env.esign.status(args.requestId))


def _asks_status(query: Mapping[str, Any]) -> bool:
    return "requestId" in query or "request_id" in query


E_SIGNATURE_STATUS: OperationSpec[ESignStatusParams, ESignStatus] = OperationSpec(
    name="get_e_signature_status",
    title="E-signature request status",
    description="The state of a request sent with e_signature, free: { success, requestId, "
    "status, final, signers, signed, message, created_at, completed_at, delivered_at, "
    "status_url }. status: pending (k of n signed), signed (everyone signed, the copy is "
    "being e-mailed), done (the signed PDF was e-mailed to customerEmail), rejected, "
    "cancelled, expired, undeliverable. Unknown requestId: SIGNING_REQUEST_NOT_FOUND.",
    params=ESignStatusParams,
    result=ESignStatus,
    handler=e_signature_status,
    http=HttpRoute(
        "GET",
        STATUS_PATH,
        example=f"GET {STATUS_PATH}?requestId=<requestId>",
        on_service=E_SIGNATURE.slug,
        when=_asks_status,
        headers={"Cache-Control": "no-store"},
        summary=f"Describe {E_SIGNATURE.title}, or read one request's status with requestId (free)",
        llms="`GET {url}?requestId=<requestId>` reads a signing request's status (free)",
    ),
    tool="get_e_signature_status",
    error_codes=("L402_INVALID_PARAMS", "SIGNING_REQUEST_NOT_FOUND", "INTERNAL_ERROR"),
    family=Family("E-signature", E_SIGNATURE.slug),
    tags=(E_SIGNATURE.category, "free"),
)
