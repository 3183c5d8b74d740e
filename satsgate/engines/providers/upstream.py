"""What the provider kinds share: turning an upstream's HTTP answer into the catalog code a
caller sees, the retry hint, one bounded retry for calls that are safe to repeat, and the
rule that no upstream detail (provider name, URL, key, its own message) leaves satsgate.

Callers see only the messages below, and one exception: a content-policy refusal's message
(the model's refusal) is shown as ``model_said``, cleaned by
:func:`satsgate.engines.refusals.said_by_model` (one line, no names, no addresses).
Operators see a log line naming the engine, the adapter kind and the upstream status,
never the base URL or the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from satsgate.engines.config import DEFAULT_TIMEOUT_S, EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.refusals import said_by_model
from satsgate.errors import ErrorCode

log = logging.getLogger("satsgate.engines.providers")

# How far a platform's webhook timestamp may be from now (the platforms' own tolerance).
WEBHOOK_TOLERANCE_S = 300


def fresh_unix_stamp(stamp: str, now: float | None = None) -> bool:
    """Whether a webhook's timestamp header (unix seconds) is within WEBHOOK_TOLERANCE_S
    of now. Only ASCII digits count: ``str.isdigit`` also takes "²", which ``int``
    refuses, and a number of thousands of digits makes ``int`` raise."""
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
        return False
    return abs((time.time() if now is None else now) - int(stamp)) <= WEBHOOK_TOLERANCE_S


T = TypeVar("T")

# One more try for a request that failed before the upstream could act on it (connection
# reset) or with a transient server error, when the request is safe to repeat (it has no
# effect beyond its answer and is cheap). Never for 429 (the chain's next provider or the
# caller's own retry is the answer) nor after a timeout (the time is spent).
RETRY_PAUSE_S = 0.25
RETRY_STATUSES = frozenset({500, 502, 503, 504})

TIMEOUT_MESSAGE = "The AI engine did not answer in time."
RATE_LIMITED_MESSAGE = "The AI engine is rate-limited right now."
UNAVAILABLE_MESSAGE = "The AI engine failed."
MALFORMED_MESSAGE = "The AI engine returned an unusable answer."
REFUSED_MESSAGE = "The AI engine refused this request under its content policy."
REJECTED_MESSAGE = "The AI engine rejected the request."

# Upstream error codes that mean "refused by a safety system" (OpenAI-compatible APIs).
CONTENT_POLICY_CODES = frozenset(
    {"content_policy_violation", "moderation_blocked", "content_filter"}
)
DEFAULT_RETRY_AFTER_S = 10.0
MAX_RETRY_AFTER_S = 3600.0


def error_message(body: object) -> str | None:
    """The ``message`` of an error body as OpenAI-style and Anthropic APIs write it
    (``{"error": {"message": ...}}``; the SDKs hand over the inner object), else None."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return None


def retry_after_s(headers: Mapping[str, str] | None) -> float:
    """The upstream's retry hint (``retry-after-ms``, then ``retry-after`` in seconds or
    as an HTTP date), else 10 s; bounded to an hour."""
    if headers:
        raw_ms = headers.get("retry-after-ms")
        if raw_ms:
            try:
                return _bounded(float(raw_ms) / 1000)
            except ValueError:
                pass
        raw = headers.get("retry-after")
        if raw:
            try:
                return _bounded(float(raw))
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(raw) if raw.strip() else None
                if parsed is not None:
                    return _bounded(parsed.timestamp() - time.time())
    return DEFAULT_RETRY_AFTER_S


def retry_after_whole_s(headers: Mapping[str, str]) -> float | None:
    """``retry-after`` when it is whole seconds; None otherwise (absent, a date, a
    fraction): then the caller gets no retry hint."""
    retry = headers.get("retry-after")
    return float(retry) if retry and retry.isdigit() else None


def _bounded(seconds: float) -> float:
    return min(MAX_RETRY_AFTER_S, max(1.0, seconds))


def timeout_error() -> EngineError:
    return EngineError(ErrorCode.TIMEOUT, TIMEOUT_MESSAGE, retry_after_s=20)


def malformed_error() -> EngineError:
    return EngineError(ErrorCode.SERVICE_ERROR, MALFORMED_MESSAGE)


def refused_error(detail: str = "", said: object = None) -> EngineError:
    """A content refusal; ``said``: the model's own refusal text when the upstream gave
    one (the free-retry answer shows it as ``model_said``, trimmed and without names)."""
    message = REFUSED_MESSAGE + (f" {detail}" if detail else "") + " Rephrase and retry."
    shown = said_by_model(said)
    extra: dict[str, object] | None = None if shown is None else {"model_said": shown}
    return EngineError(ErrorCode.CONTENT_FILTERED, message, extra=extra)


def status_error(
    status: int,
    headers: Mapping[str, str] | None,
    upstream_code: str | None,
    upstream_message: object = None,
) -> EngineError:
    """An upstream HTTP error status -> the caller's code (refunded by the gate). A content
    policy refusal keeps the upstream's message as the model's words (``model_said``,
    cleaned by :func:`satsgate.engines.refusals.said_by_model`); no other message leaves."""
    if upstream_code in CONTENT_POLICY_CODES:
        return refused_error(said=upstream_message)
    if status == 429 and upstream_code != "insufficient_quota":
        return EngineError(
            ErrorCode.RATE_LIMITED, RATE_LIMITED_MESSAGE, retry_after_s=retry_after_s(headers)
        )
    if status == 529:  # overloaded (Anthropic): retry later, or the next provider now
        return EngineError(
            ErrorCode.L402_UPSTREAM_FAILED,
            UNAVAILABLE_MESSAGE,
            retry_after_s=retry_after_s(headers),
        )
    if status >= 500 or status < 400:
        # < 400: an error event inside a stream that had begun well (200): the upstream
        # failed while answering.
        return EngineError(ErrorCode.L402_UPSTREAM_FAILED, UNAVAILABLE_MESSAGE)
    # 400 (a request this adapter built and the upstream refused), 401/403 (the operator's
    # key), 404 (a model name the upstream does not know), 413, 422 ...: nothing the caller
    # can fix; the next provider of a chain may do better.
    return EngineError(ErrorCode.SERVICE_ERROR, REJECTED_MESSAGE)


class StatusError(Exception):
    """An error answer (HTTP status >= 400) to an adapter's own request, with what an
    SDK's status error carries: ``status_code``, ``body`` (its JSON, else its text) and
    ``response.headers``. The text names no URL (it reaches logs)."""

    def __init__(self, status_code: int, response: Any, body: object) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.response = response  # anything with ``headers``: Retry-After, rate limits
        self.body = body


class _Closable(Protocol):
    """An upstream response that holds a connection until closed."""

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class SdkErrors:
    """How an official SDK (openai, anthropic: the same generated layout) fails, and what
    each failure is to a caller: one rule for every adapter built on such an SDK."""

    kind: str  # the adapter kind, for the operator's log line
    # A subclass of ``connection`` in these SDKs: tested first. Each may name the
    # transport's own exception too: reading a stream's body, the SDKs let it through.
    timeout: type[BaseException] | tuple[type[BaseException], ...]
    connection: type[BaseException] | tuple[type[BaseException], ...]
    # Carries status_code, body and response (the SDK's, and StatusError for a request an
    # adapter makes itself).
    status: type[BaseException] | tuple[type[BaseException], ...]
    # The upstream's own error code or type in an error body, for the log line; with
    # ``code_decides`` it also picks the caller's code (content policy, quota).
    code_of: Callable[[object], str | None]
    code_decides: bool = True

    def retryable(self, exc: BaseException) -> bool:
        """Safe to send once more: a dropped connection or a transient server error."""
        if isinstance(exc, self.timeout):
            return False
        if isinstance(exc, self.connection):
            return True
        return isinstance(exc, self.status) and cast(Any, exc).status_code in RETRY_STATUSES

    def read(self, engine: str, read: Callable[[Any], T], body: Any, refusal: str) -> T:
        """``read(body)``, the adapter's reading of an answer: an EngineError it raises
        (the upstream refused, or answered nothing usable) is logged as ``refusal``; any
        other error reading the body is mapped (an unusable answer)."""
        try:
            return read(body)
        except EngineError as exc:
            log_failure(engine, self.kind, exc, refusal)
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise self.mapped(exc, engine) from None

    @contextlib.asynccontextmanager
    async def reading_stream(self, engine: str, response: _Closable) -> AsyncIterator[None]:
        """While an opened stream is read: an EngineError passes as it is, any other
        failure is :meth:`mapped`; the response is closed however the reading ends
        (a failure to close it is ignored)."""
        try:
            yield
        except EngineError:
            raise
        except Exception as exc:
            raise self.mapped(exc, engine) from None
        finally:
            with contextlib.suppress(Exception):
                await response.aclose()

    def mapped(self, exc: BaseException, engine: str) -> EngineError:
        """An SDK exception -> the caller's EngineError (and one operator log line)."""
        if isinstance(exc, EngineError):
            return exc
        if isinstance(exc, self.timeout):
            error, cause = timeout_error(), "timeout"
        elif isinstance(exc, self.connection):
            error = EngineError(ErrorCode.L402_UPSTREAM_FAILED, UNAVAILABLE_MESSAGE)
            cause = "connection failure"
        elif isinstance(exc, self.status):
            failed = cast(Any, exc)  # the SDK's status error: status_code, body, response
            code = self.code_of(failed.body)
            error = status_error(
                failed.status_code,
                failed.response.headers,
                code if self.code_decides else None,
                error_message(failed.body),
            )
            cause = f"HTTP {failed.status_code}" + (f" ({code})" if code else "")
        else:  # a body the SDK could not read, or one the adapter could not use
            error, cause = malformed_error(), f"unusable answer ({type(exc).__name__})"
        log_failure(engine, self.kind, error, cause)
        return error


def cause_of(exc: BaseException) -> str:
    """What failed, for an operator's log line, with no address in it: the HTTP status of
    an error answer (``HTTP 404``), else the exception's type (``ConnectError``,
    ``ReadTimeout``). The HTTP clients write the request's URL into their exceptions'
    text (a status error's, and some connection errors'), so that text stays out."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return f"HTTP {status}"
    if isinstance(exc, EngineError):
        return str(exc.code)
    return type(exc).__name__


def log_failure(engine: str, kind: str, error: EngineError, cause: str) -> None:
    """One operator-facing line: engine, adapter kind, what happened upstream (a status or
    an exception type), never an address or a key."""
    log.warning("engine %s (%s): upstream %s -> %s", engine, kind, cause, error.code)


async def with_retry(
    call: Callable[[], Awaitable[T]],
    *,
    retries: int,
    retryable: Callable[[BaseException], bool],
) -> T:
    """``call()``, repeated at most ``retries`` times after a short pause while it fails
    with a retryable error. ``retries`` is 0 for a request that is not safe to repeat. The
    caller pays for one call either way."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except Exception as exc:
            if attempt >= retries or not retryable(exc):
                raise
        await asyncio.sleep(RETRY_PAUSE_S * (attempt + 1))
    raise AssertionError("unreachable")


async def events_within(events: AsyncIterator[T], idle_s: float) -> AsyncIterator[T]:
    """The events of an upstream stream, each within ``idle_s`` of the one before (or of
    the start): past it, TIMEOUT. Closing the stream stays its owner's."""
    it = aiter(events)
    while True:
        try:
            async with asyncio.timeout(idle_s):
                event = await anext(it)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise timeout_error() from None
        yield event


def check_options(config: ProviderConfig, known: frozenset[str]) -> None:
    """Refuse a table with keys the adapter does not know (a typo would be ignored)."""
    unknown = set(config.options) - known
    if unknown:
        raise EngineConfigError(
            f"[providers.{config.name}]: unknown keys {', '.join(sorted(unknown))}"
        )


def timeout_option(config: ProviderConfig, default_s: float) -> float:
    """The table's ``timeout_s``, else ``default_s``: ProviderConfig's own default (60 s)
    is for AI work, long for a send the caller waits on."""
    return default_s if config.timeout_s == DEFAULT_TIMEOUT_S else config.timeout_s


def retries_option(config: ProviderConfig) -> int:
    """``max_retries``: 0, 1 (default) or 2 repeats of a failed idempotent request."""
    value = config.options.get("max_retries", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2:
        raise EngineConfigError(f"[providers.{config.name}] max_retries must be 0, 1 or 2")
    return value


def default_text_model(config: ProviderConfig) -> str | None:
    """The chat model for work that pins no spec model (translation): the standard text
    tier (31), else better (1), else best (6)."""
    for model_id in ("31", "1", "6"):
        if model_id in config.models:
            return config.models[model_id]
    return None
