"""Free follow-ups of the fax services: a sent fax's status (a form of the send-fax path,
and MCP ``get_fax_status``) and a leased number's inbox (a form of the receive-fax path,
and MCP ``check_fax_inbox``). The work is done in satsgate.services.comms.faxes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from satsgate.errors import ApiError, ErrorCode
from satsgate.operations.answers import Body, Refund
from satsgate.operations.base import (
    AnySpec,
    Call,
    Family,
    OperationEnv,
    OperationSpec,
    free_status_read,
)
from satsgate.payments.proof import proves
from satsgate.services.comms import faxes
from satsgate.services.comms.handlers import RECEIVE_FAX, SEND_FAX

Token = Annotated[str, StringConstraints(min_length=8, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


class FaxStatusParams(BaseModel):
    model_config = ConfigDict(extra="forbid", title="fax status query")

    faxId: Token = Field(description="The faxId send-fax answered.")
    paymentId: str | None = Field(
        None,
        max_length=200,
        description="A payment made with create_payment: its paymentId shows a failed fax's "
        "refund link (an HTTP payer polls with its credential instead).",
    )


class FaxInboxParams(BaseModel):
    model_config = ConfigDict(extra="forbid", title="fax inbox query")

    inboxId: Token = Field(description="The inboxId receive-fax answered (keep it secret).")


class FaxStatusRecord(Body):
    """A sent fax: status queued, sending, delivered or failed (final once delivered or
    failed; a failed fax is refunded in full)."""

    model_config = ConfigDict(title="FaxStatusRecord")

    success: bool
    faxId: str
    status: str
    status_url: str
    final: bool
    pages: int | None = None
    updated_at: str | None = None
    error: str | None = None
    refund: Refund | None = None


class ReceivedFaxEntry(Body):
    model_config = ConfigDict(title="ReceivedFax")

    faxId: str
    receivedAt: str
    status: str  # received | unavailable | deleted
    pages: int | None = None
    url: str | None = None  # a fresh signed link to the PDF, while it is kept
    expiresAt: str | None = None


class FaxInboxRecord(Body):
    """A leased inbound number and the faxes it received."""

    model_config = ConfigDict(title="FaxInboxRecord")

    success: bool
    inboxId: str
    faxNumber: str
    expiresAt: str
    active: bool
    poll_url: str
    faxes: list[ReceivedFaxEntry]


def _desk(env: OperationEnv, service: AnySpec) -> faxes.FaxDesk:
    """The fax desk, or SERVICE_UNAVAILABLE naming ``service`` (no fax engine here)."""
    unavailable = ApiError(
        ErrorCode.SERVICE_UNAVAILABLE,
        f"{service.title} has no engine configured on this node; nothing charged.",
    )
    if not service.is_available(env.engines) or env.faxes is None:
        raise unavailable
    return env.faxes


async def get_fax_status(env: OperationEnv, args: FaxStatusParams, call: Call) -> FaxStatusRecord:
    desk = _desk(env, SEND_FAX)
    fax = await desk.status(args.faxId)
    if fax is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"No fax {args.faxId!r}.")
    payment = await env.gate.get_payment(fax.payment_id)
    payer = payment is not None and proves(
        env.gate.verifier, payment, authorization=call.authorization, payment_id=args.paymentId
    )
    return FaxStatusRecord.model_validate(await desk.status_body(fax, payer))


async def check_fax_inbox(env: OperationEnv, args: FaxInboxParams, call: Call) -> FaxInboxRecord:
    inbox = _desk(env, RECEIVE_FAX)
    lease = await inbox.get(args.inboxId)
    if lease is None:
        raise ApiError(ErrorCode.NOT_FOUND, "No fax inbox with this inboxId.")
    return FaxInboxRecord.model_validate(await inbox.lease_body(lease))


FAX_SEND = Family("Fax", SEND_FAX.slug)
FAX_RECEIVE = Family("Fax inbox", RECEIVE_FAX.slug)
_CODES = (
    ErrorCode.L402_INVALID_PARAMS,
    ErrorCode.NOT_FOUND,
    ErrorCode.SERVICE_UNAVAILABLE,
    ErrorCode.INTERNAL_ERROR,
)

GET_FAX_STATUS: OperationSpec[FaxStatusParams, FaxStatusRecord] = free_status_read(
    name="get_fax_status",
    title="Fax status",
    description="The status of a fax sent with send_fax, free: { success, faxId, status, "
    "final, pages, status_url, error?, refund? }; status is queued, sending, delivered or "
    "failed (a failed fax is refunded in full; its refund link is shown to the payer: "
    "the HTTP credential, or paymentId). Unknown fax: NOT_FOUND.",
    params=FaxStatusParams,
    result=FaxStatusRecord,
    handler=get_fax_status,
    service=SEND_FAX,
    path=faxes.SEND_PATH,
    keys=("faxId",),
    reads="read one fax's status",
    llms="`GET {url}?faxId=<faxId>` reads a sent fax's status (queued, sending, delivered, failed)",
    error_codes=_CODES,
    family=FAX_SEND,
)

CHECK_FAX_INBOX: OperationSpec[FaxInboxParams, FaxInboxRecord] = free_status_read(
    name="check_fax_inbox",
    title="Fax inbox",
    description="The faxes received on a number leased with receive_fax, free: { success, "
    "inboxId, faxNumber, expiresAt, active, poll_url, faxes: [{ faxId, receivedAt, from?, "
    "pages, status, url?, expiresAt? }] }. url is a fresh signed link to the PDF, valid "
    "until the document is deleted (12 hours after arrival). Unknown inbox: NOT_FOUND.",
    params=FaxInboxParams,
    result=FaxInboxRecord,
    handler=check_fax_inbox,
    service=RECEIVE_FAX,
    path=faxes.RECEIVE_PATH,
    keys=("inboxId",),
    reads="list one inbox's faxes",
    llms="`GET {url}?inboxId=<inboxId>` lists the faxes a leased number received",
    error_codes=_CODES,
    family=FAX_RECEIVE,
)
