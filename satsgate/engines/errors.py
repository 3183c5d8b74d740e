"""What an engine raises when it fails: a catalog code the gate turns into a refund."""

from __future__ import annotations

from typing import Any

from satsgate.errors import ApiError, ErrorCode

# Codes on which a chain of providers (``[engines] text = ["a", "b"]``) tries the next
# one by default: the upstream refused or broke before doing anything for the caller.
FALLBACK_CODES = frozenset(
    {ErrorCode.RATE_LIMITED, ErrorCode.SERVICE_ERROR, ErrorCode.L402_UPSTREAM_FAILED}
)


class EngineError(Exception):
    """An engine failed after payment; the gate refunds the call and answers ``code``.

    ``code`` is an error-catalog code (TIMEOUT, RATE_LIMITED, CONTENT_FILTERED,
    INVALID_INPUT, SERVICE_ERROR, L402_UPSTREAM_FAILED, ...). ``message`` is shown to
    the caller: it never names a provider, an upstream URL or a key.

    ``may_fall_back``: whether the next provider of a chain may be tried. It must be
    False whenever the upstream may already have acted (a message possibly sent, a
    call possibly placed), so a caller's request is never carried out twice.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retry_after_s: float | None = None,
        may_fall_back: bool | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.may_fall_back = code in FALLBACK_CODES if may_fall_back is None else may_fall_back
        # Envelope fields beyond code and message (e.g. the rework fields of
        # CONTENT_FILTERED_RETRY); merged into the error body as they are.
        self.extra = dict(extra or {})

    def envelope_extra(self) -> dict[str, object]:
        """Fields for the error body beyond code and message: ``extra``, and the retry
        hint (``retry_after_seconds``, whole seconds) when the engine gave one."""
        fields = dict(self.extra)
        if self.retry_after_s is not None:
            fields["retry_after_seconds"] = retry_seconds(self.retry_after_s)
        return fields

    def api_error(
        self, *, refund: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
    ) -> ApiError:
        """The answer to the caller: this code and message, ``envelope_extra`` (then
        ``extra``) in the body, ``Retry-After`` when the engine gave a retry hint. The one
        place an engine failure becomes an error envelope."""
        return ApiError(
            self.code,
            self.message,
            refund=refund,
            extra={**self.envelope_extra(), **(extra or {})},
            headers=self.http_headers(),
        )

    def http_headers(self) -> dict[str, str]:
        """``Retry-After`` when the engine gave a retry hint."""
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(retry_seconds(self.retry_after_s))}


def retry_seconds(seconds: float) -> int:
    return max(1, round(seconds))
