"""The error codes as a StrEnum, the catalog keyed by it, and the exception tree's
mappings: one place each turns a domain exception into its envelope."""

from __future__ import annotations

import json

import pytest

from satsgate.engines import EngineError
from satsgate.errors import CODES, ApiError, CodeSpec, ErrorCode, catalog_document, envelope
from satsgate.payments import l402, mpp
from satsgate.payments.session_wire import SessionProblem


def test_every_code_has_one_catalog_entry_and_its_name_is_its_wire_value() -> None:
    assert list(CODES) == list(ErrorCode)  # the catalog's order is the enum's
    for code, spec in CODES.items():
        assert isinstance(spec, CodeSpec) and spec.code is code
        assert code.value == code.name == str(code) == f"{code}"
    assert len({spec.code for spec in CODES.values()}) == len(CODES) == len(ErrorCode)


def test_the_catalog_document_and_the_envelope_carry_plain_strings() -> None:
    doc = catalog_document()
    assert [c["error_code"] for c in doc["codes"]] == [c.value for c in ErrorCode]
    assert all(type(c["error_code"]) is str for c in doc["codes"])
    body = envelope(ErrorCode.RATE_LIMITED, "slow down")
    assert type(body["error_code"]) is str
    assert json.loads(json.dumps(body)) == {
        "error": "slow down",
        "error_code": "RATE_LIMITED",
        "suggestion": "Wait and retry.",
        "example": "",
        "retry_after_seconds": 10,
    }


def test_an_api_error_takes_a_stored_code_string_and_refuses_an_unknown_one() -> None:
    stored = ApiError("PAYMENT_PENDING", "pay first")  # type: ignore[arg-type]  # a row's text
    assert stored.code is ErrorCode.PAYMENT_PENDING and stored.http_status == 402
    with pytest.raises(ValueError, match="NO_SUCH_CODE"):
        ApiError("NO_SUCH_CODE", "nope")  # type: ignore[arg-type]


def test_an_engine_failure_becomes_its_envelope_in_one_place() -> None:
    exc = EngineError(ErrorCode.RATE_LIMITED, "busy", retry_after_s=7.4, extra={"model": 3})
    err = exc.api_error(refund={"lnurl": "x"}, extra={"creditedSats": 5})
    assert (err.code, err.message, err.refund) == (ErrorCode.RATE_LIMITED, "busy", {"lnurl": "x"})
    assert err.headers == {"Retry-After": "7"}
    body = err.envelope()
    assert (body["retry_after_seconds"], body["model"], body["creditedSats"]) == (7, 3, 5)
    assert body["refund"] == {"lnurl": "x"}
    plain = EngineError(ErrorCode.SERVICE_ERROR, "down").api_error()
    assert plain.headers == {} and plain.refund is None and plain.http_status == 502


def test_credential_errors_carry_their_code_and_problem_type() -> None:
    cases: list[tuple[Exception, ErrorCode, str]] = [
        (l402.CredentialError("bad"), ErrorCode.PAYMENT_INVALID, "verification-failed"),
        (l402.CredentialExpired("late"), ErrorCode.PAYMENT_EXPIRED, "payment-expired"),
        (mpp.InvalidChallenge("not ours"), ErrorCode.PAYMENT_INVALID, "invalid-challenge"),
        (l402.MalformedCredential("junk"), ErrorCode.MALFORMED_CREDENTIAL, "malformed-credential"),
    ]
    for exc, code, problem in cases:
        assert isinstance(exc, l402.CredentialError | l402.MalformedCredential)
        assert (exc.code, exc.problem) == (code, problem)


def test_a_session_refusal_becomes_its_envelope() -> None:
    problem = SessionProblem(
        "session-closed", ErrorCode.PAYMENT_ALREADY_USED, "closed", {"sessionId": "s"}
    )
    err = problem.api_error()
    assert (err.code, err.message, err.extra) == (
        ErrorCode.PAYMENT_ALREADY_USED,
        "closed",
        {"sessionId": "s"},
    )
    assert err.envelope()["error_code"] == "PAYMENT_ALREADY_USED"
