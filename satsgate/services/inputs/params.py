"""Pieces shared by the service families: field aliases, file checks before payment,
callbacks, model selection fields, engine availability and the no-engine handler.

Checks before payment come in two layers, both before any invoice:

1. the schema (pydantic): types, lengths, ranges, enums, aliases -> L402_INVALID_PARAMS
   listing every bad field;
2. :meth:`ServiceParams.check`, run by :meth:`ServiceParams.prechecks` in a worker thread:
   base64 decoding, content sniffing and measuring (pages, seconds, characters)
   that the price needs; the result is kept on the params object, so the quote
   never decodes a file twice.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar, cast

from pydantic import AliasChoices, Field, PrivateAttr, model_validator

from satsgate import public_urls
from satsgate.domain.languages import TranslationLanguage
from satsgate.domain.media import ImageInfo, MediaError, image_info
from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.base import Params, ServiceContext, ServiceResult
from satsgate.services.catalog.routing import select_model
from satsgate.services.inputs.encoding import BadBase64, decode_base64_file

MiB = 1024 * 1024

T = TypeVar("T")


def alias(*names: str) -> AliasChoices:
    """Accepted spellings of one field (the first is the one documented in the schema)."""
    return AliasChoices(*names)


def b64_chars(max_bytes: int) -> int:
    """Longest base64 text (with a data-URI prefix and line breaks) for ``max_bytes``."""
    encoded = 4 * math.ceil(max_bytes / 3)
    return encoded + encoded // 64 + 256


def body_limit(*file_bytes: int, slack: int = 64 * 1024) -> int:
    """A request-body cap for services carrying these files as base64 (-> 413 early)."""
    return sum(b64_chars(n) for n in file_bytes) + slack


class InvalidField(ValueError):
    """A check before payment failed for one field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def decode_file(value: str, field: str, max_bytes: int) -> bytes:
    try:
        return decode_base64_file(value, max_bytes=max_bytes)
    except BadBase64 as exc:
        raise InvalidField(field, str(exc)) from None


def read_media(data: bytes, field: str, reader: Callable[[bytes], T]) -> T:
    """``reader(data)``; a file the reader cannot read (MediaError) is refused as an
    InvalidField of ``field``, with the reader's words."""
    try:
        return reader(data)
    except MediaError as exc:
        raise InvalidField(field, str(exc)) from None


class ServiceParams(Params):
    """Params with an optional file check before payment (see the module docstring)."""

    _checked: Any = PrivateAttr(default=None)

    def check(self) -> Any:
        """Decode and measure caller files; raise InvalidField or ValueError. Runs once."""
        return True

    async def prechecks(self) -> None:
        """The caller's files decoded and measured (:meth:`checked`) in a worker thread,
        after the checks of the params' other kinds (a callback URL)."""
        await super().prechecks()
        await asyncio.to_thread(self.checked)

    def checked(self) -> Any:
        """The result of :meth:`check`, computed on first use."""
        private = _private(self)
        if private["_checked"] is None:
            try:
                private["_checked"] = self.check()
            except InvalidField as exc:
                raise invalid_field(exc.field, exc.message) from None
            except ValueError as exc:
                raise invalid_field("(body)", str(exc)) from None
        return private["_checked"]


def _private(params: Params) -> dict[str, Any]:
    """The private attributes of ``params``, read from pydantic's own slot: every read on
    the hot path goes here, not through ``BaseModel.__getattr__`` (its fallback for a
    private name probes the attribute's descriptor and raises inside, on every read)."""
    return cast(dict[str, Any], params.__pydantic_private__)


def invalid_field(field: str, message: str, **extra: Any) -> ApiError:
    """L402_INVALID_PARAMS naming one field (and ``extra`` members), before any invoice."""
    return ApiError(
        ErrorCode.L402_INVALID_PARAMS,
        f"Invalid parameters: {field}: {message}",
        extra={"fields": [{"field": field, "message": message}], **extra},
    )


class CallbackFields(Params):
    """Opt-in signed callbacks for async jobs (polling always works)."""

    callback_url: str | None = Field(
        None,
        validation_alias=alias("callback_url", "callbackUrl"),
        max_length=public_urls.MAX_URL_CHARS,
        description="Public https:// URL to receive a signed completion callback. Loopback, "
        "private and link-local addresses are refused (L402_CALLBACK_INVALID).",
    )
    callback_id: str | None = Field(
        None,
        validation_alias=alias("callback_id", "callbackId"),
        min_length=1,
        max_length=public_urls.MAX_CALLBACK_ID_CHARS,
        description="Opaque id echoed in the callback (at most 128 characters; no personal data).",
    )

    def callback_target(self) -> tuple[str, str | None] | None:
        return (self.callback_url, self.callback_id) if self.callback_url else None

    async def prechecks(self) -> None:
        """The callback URL (L402_CALLBACK_INVALID) before anything else is checked."""
        public_urls.check_callback(self.callback_url)
        await super().prechecks()


class TranslationTarget(Params):
    """The language a translation goes into: one of the 119, by code, name or locale tag."""

    targetLanguage: TranslationLanguage = Field(
        validation_alias=alias("targetLanguage", "target_language"),
        description="ISO 639 code, English name or locale tag; one of 119.",
    )


ModelId = str | int | None
TierName = Literal["best", "better", "standard"]


class ModelChoice(Params):
    """``modelId`` / ``tier`` selection among the service's models (see routing.py).

    Subclasses set MODELS (best first) and DEFAULT, and may override
    :meth:`choose_model` (e.g. for ``model: 'auto'``). The choice is checked by the
    schema, so an unknown id is L402_INVALID_PARAMS before any invoice.
    """

    MODELS: ClassVar[tuple[int, ...]] = ()
    DEFAULT: ClassVar[int] = 0
    TIER_ALIASES: ClassVar[Mapping[str, int]] = {}

    modelId: ModelId = Field(
        None,
        validation_alias=alias("modelId", "model_id"),
        description="Numeric model id to pin, or a tier name (best, better, standard). "
        "Omit for the default model.",
    )
    tier: str | None = Field(
        None, max_length=32, description="best, better or standard: the best model of that tier."
    )
    _model: int | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_model(self) -> Self:
        self.chosen_model  # noqa: B018  # raises ValueError -> L402_INVALID_PARAMS
        return self

    def choose_model(self) -> int:
        return select_model(
            self.modelId,
            self.tier,
            allowed=self.MODELS,
            default=self.DEFAULT,
            tier_aliases=self.TIER_ALIASES,
        )

    @property
    def chosen_model(self) -> int:
        """The model this request runs on (and is priced by); chosen once."""
        private = _private(self)
        model: int | None = private["_model"]
        if model is None:
            model = private["_model"] = self.choose_model()
        return model

    @property
    def auto_routed(self) -> bool:
        return False

    # -- the models this node serves ------------------------------------------------------

    @property
    def pinned(self) -> bool:
        """The request pinned a model by its numeric id (then it runs there or nowhere)."""
        value = self.modelId
        if isinstance(value, int) and not isinstance(value, bool):
            return True
        return isinstance(value, str) and value.strip().isascii() and value.strip().isdecimal()

    @property
    def tier_asked(self) -> bool:
        return not self.pinned and (
            self.tier is not None or (isinstance(self.modelId, str) and bool(self.modelId))
        )

    def same_tier(self, a: int, b: int) -> bool:
        """Whether ``a`` answers a tier ask that chose ``b`` (the catalog's tier)."""
        from satsgate.services.catalog.models import MODELS_BY_ID

        return MODELS_BY_ID[a].tier == MODELS_BY_ID[b].tier

    def accepts_model(self, model_id: int) -> bool:
        """Whether this request is valid on ``model_id`` too (its inputs fit that model)."""
        return True

    def fit_model(self, served: Callable[[int], bool]) -> None:
        """Run on a model this node serves when the one chosen is not served and the
        request did not pin it by id: the default, ``model: 'auto'`` and a tier pick the
        nearest served model (in the service's best-first order) that takes the request;
        a tier ask stays within its tier. Nothing served fits: the choice stands, and the
        gate refuses it before any invoice. Deterministic, so the 402 quote and the paid
        call price the same model."""
        current = self.chosen_model
        if self.pinned or served(current) or current not in self.MODELS:
            return
        order = list(self.MODELS)
        here = order.index(current)
        for candidate in sorted(order, key=lambda m: (abs(order.index(m) - here), order.index(m))):
            if candidate == current or not served(candidate):
                continue
            if self.tier_asked and not self.same_tier(candidate, current):
                continue
            if self.accepts_model(candidate):
                _private(self)["_model"] = candidate
                return


class AutoModelChoice(ModelChoice):
    """A ModelChoice that may also be asked for ``model: 'auto'``: the subclass's
    :meth:`choose_model` picks the model from the request itself, and the answer says
    which one ran. Each subclass declares the ``model`` field, with its own description
    of how it picks and at its own place in the schema."""

    if TYPE_CHECKING:
        model: Literal["auto"] | None

    @property
    def auto_routed(self) -> bool:
        return self.model == "auto"


async def no_engine(ctx: ServiceContext, params: Params) -> ServiceResult:
    """Handler of a service whose engine adapter is not written yet. No engine of its
    name resolves, so it is never sold; if it runs anyway the gate refunds the payment."""
    raise EngineError(ErrorCode.SERVICE_ERROR, "no engine configured")


IMAGE_MAX_BYTES = 10 * MiB


def check_image(value: str, field: str, max_bytes: int = IMAGE_MAX_BYTES) -> ImageInfo:
    """Decode a base64 image and read its header; InvalidField if it is not one."""
    return read_media(decode_file(value, field, max_bytes), field, image_info)


def image_field(
    *names: str,
    description: str = "The image as base64 (data URI or raw): "
    "PNG, JPEG, WebP, GIF, BMP or TIFF, at most 10 MB.",
) -> Any:
    return Field(
        validation_alias=alias(*names),
        max_length=b64_chars(IMAGE_MAX_BYTES),
        description=description,
    )


# -- e-mail addresses ----------------------------------------------------------------------

_ATEXT = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def check_email_address(value: str) -> str:
    """``local@domain`` with a dot-atom local part and a DNS domain (IDN allowed) with a
    TLD; quoted local parts and address literals are refused. Returns the address."""
    if len(value) > 254 or value.count("@") != 1:
        raise ValueError(f"{value!r} is not an e-mail address")
    local, domain = value.split("@")
    if not local or len(local) > 64 or not _ATEXT.match(local):
        raise ValueError(f"{value!r}: the part before @ is not valid")
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{value!r}: the domain is not valid") from None
    labels = ascii_domain.rstrip(".").split(".")
    if (
        len(labels) < 2
        or len(ascii_domain) > 253
        or not all(_LABEL.match(label) for label in labels)
        or not re.match(r"^([A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59})$", labels[-1])
    ):
        raise ValueError(f"{value!r}: the domain is not valid")
    return value


def lightning_address(value: str | None) -> str | None:
    """A Lightning address (user@domain) for automatic refunds of unused time."""
    if value is None:
        return None
    try:
        return check_email_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a Lightning address (name@domain)") from None
