"""The free status read of an e-signature request: ``GET /api/l402/e-signature?requestId=``
(a form of the service's own path) and the MCP tool ``get_e_signature_status``. The work
is done in satsgate.services.documents.esign_desk."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from satsgate.errors import ApiError, ErrorCode
from satsgate.operations.answers import Body
from satsgate.operations.base import Call, Family, OperationEnv, OperationSpec, free_status_read
from satsgate.services.base import Params
from satsgate.services.documents.e_signature import E_SIGNATURE
from satsgate.services.documents.esign_desk import STATUS_PATH
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
        raise ApiError(ErrorCode.INTERNAL_ERROR, "E-signature requests are not available.")
    return ESignStatus.model_validate(await env.esign.status(args.requestId))


E_SIGNATURE_STATUS: OperationSpec[ESignStatusParams, ESignStatus] = free_status_read(
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
    service=E_SIGNATURE,
    path=STATUS_PATH,
    keys=("requestId", "request_id"),
    reads="read one request's status",
    llms="`GET {url}?requestId=<requestId>` reads a signing request's status (free)",
    error_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.SIGNING_REQUEST_NOT_FOUND,
        ErrorCode.INTERNAL_ERROR,
    ),
    family=Family("E-signature", E_SIGNATURE.slug),
)
