"""OPERATIONS: every free operation, in the order the documents list them."""

from __future__ import annotations

from satsgate.operations.base import AnyOperation
from satsgate.operations.catalog import ESTIMATE_COST, LIST_PLANNED
from satsgate.operations.comms import (
    CALL_STATUS,
    CLAIM_REFUND,
    CONFIRM_AI_CALL,
    POLL_AI_CALL,
    SMS_STATUS,
    VOICE_BRIDGE_END,
    VOICE_BRIDGE_POLL,
    VOICE_BRIDGE_SAY,
)
from satsgate.operations.esign import E_SIGNATURE_STATUS
from satsgate.operations.faxes import CHECK_FAX_INBOX, GET_FAX_STATUS
from satsgate.operations.jobs import JOB_RESULT, JOB_STATUS
from satsgate.operations.payments import CHECK_PAYMENT_STATUS, REQUEST_REFUND
from satsgate.operations.rework import DECLINE_RETRY

OPERATIONS: tuple[AnyOperation, ...] = (
    CHECK_PAYMENT_STATUS,
    REQUEST_REFUND,
    DECLINE_RETRY,
    JOB_STATUS,
    JOB_RESULT,
    LIST_PLANNED,
    ESTIMATE_COST,
    SMS_STATUS,
    CALL_STATUS,
    CONFIRM_AI_CALL,
    POLL_AI_CALL,
    CLAIM_REFUND,
    VOICE_BRIDGE_SAY,
    VOICE_BRIDGE_POLL,
    VOICE_BRIDGE_END,
    E_SIGNATURE_STATUS,
    GET_FAX_STATUS,
    CHECK_FAX_INBOX,
)
BY_NAME: dict[str, AnyOperation] = {op.name: op for op in OPERATIONS}
BY_TOOL: dict[str, AnyOperation] = {op.tool: op for op in OPERATIONS if op.tool is not None}


def _check() -> None:
    """Names, tools and routes are unique; a form on a service's path says when it applies
    unless it is the only form of that method there."""
    assert len(BY_NAME) == len(OPERATIONS), "duplicate operation name"
    assert len(BY_TOOL) == len([op for op in OPERATIONS if op.tool]), "duplicate tool name"
    own = [
        (op.http.method, op.http.path)
        for op in OPERATIONS
        if op.http is not None and op.http.on_service is None
    ]
    assert len(own) == len(set(own)), "two operations on one route"


_check()
