"""Local document services: render-card, html-to-pdf, merge-pdf (no provider, no AI)."""

from __future__ import annotations

import asyncio
import base64
from typing import Literal

from pydantic import Field, model_validator

from satsgate.domain import pdf_pages
from satsgate.engines import EngineError
from satsgate.engines.local import cards, pdf
from satsgate.engines.local.image_support import ImageOpError
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.base import (
    FlatPrice,
    Params,
    PrecheckMemo,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.inputs.encoding import BadBase64, decode_base64_file

# -- render-card --------------------------------------------------------------------------


class RenderCardParams(Params):
    template: Literal["headline", "versus", "list", "stat", "quote"]
    format: Literal["png", "jpeg"] = "png"
    width: int = Field(cards.DEFAULT_WIDTH, ge=cards.MIN_SIZE, le=cards.MAX_SIZE)
    height: int = Field(cards.DEFAULT_HEIGHT, ge=cards.MIN_SIZE, le=cards.MAX_SIZE)
    title: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["title"])
    subtitle: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["subtitle"])
    left: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["left"])
    right: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["right"])
    items: list[str] | None = Field(None, min_length=1, max_length=cards.MAX_LIST_ITEMS)
    value: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["value"])
    label: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["label"])
    text: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["text"])
    author: str | None = Field(None, min_length=1, max_length=cards.FIELD_MAX_LENGTHS["author"])
    modelId: Literal[53, "53"] | None = None

    @model_validator(mode="after")
    def _fields_match_template(self) -> RenderCardParams:
        required, optional = cards.TEMPLATE_FIELDS[self.template]
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            raise ValueError(f"template {self.template!r} needs {', '.join(missing)}")
        allowed = set(required) | set(optional)
        extra = [f for f in _ALL_TEXT_FIELDS if f not in allowed and getattr(self, f) is not None]
        if extra:
            raise ValueError(f"template {self.template!r} does not take {', '.join(extra)}")
        for item in self.items or ():
            if not item or len(item) > cards.MAX_ITEM_LENGTH:
                raise ValueError(f"each item must be 1 to {cards.MAX_ITEM_LENGTH} characters")
        # The renderer's own rules (a field of spaces is empty), before any invoice.
        cards.validate_fields(self.template, self._text_fields())
        return self

    def _text_fields(self) -> dict[str, str | list[str]]:
        present = (name for name in _ALL_TEXT_FIELDS if getattr(self, name) is not None)
        return {name: getattr(self, name) for name in present}

    def to_request(self) -> cards.CardRequest:
        return cards.CardRequest(
            template=self.template,
            fmt=self.format,
            width=self.width,
            height=self.height,
            fields=self._text_fields(),
        )


_ALL_TEXT_FIELDS = (
    "title",
    "subtitle",
    "left",
    "right",
    "items",
    "value",
    "label",
    "text",
    "author",
)


def _fit_error(params: RenderCardParams) -> str | None:
    try:
        cards.check_fits(params.to_request())
    except cards.CardTextError as exc:
        return str(exc)
    return None


async def _check_card_fits(params: RenderCardParams, memo: PrecheckMemo) -> None:
    # The layout check is deterministic: the 402 and the paid repeat of the same card
    # (and retries) share one run of it, through the app's memo.
    error = await memo.outcome(
        f"render-card\n{params.model_dump_json()}",
        lambda: asyncio.to_thread(_fit_error, params),
    )
    if error is not None:
        raise ApiError(ErrorCode.L402_INVALID_PARAMS, error)


async def render_card(ctx: ServiceContext, params: RenderCardParams) -> ServiceResult:
    image = await ctx.run_cpu(cards.render_card, params.to_request(), quick=True)
    stored = await ctx.files.save(image.data, image.fmt)
    return ServiceResult(
        {
            "image_url": stored.url,
            "image_base64": base64.b64encode(image.data).decode("ascii"),
            "format": image.fmt,
            "width": image.width,
            "height": image.height,
            "modelId": 53,
        }
    )


RENDER_CARD = ServiceSpec(
    slug="render-card",
    tool_name="render_card",
    category="utility",
    title="Render card",
    description=(
        "Render a headline, versus, list, stat or quote card as PNG or JPEG. Deterministic "
        "layout, no AI: the text sent is the text shown, wrapped to fit."
    ),
    params=RenderCardParams,
    price_msat=FlatPrice.of_sats(5, "render-card"),
    handler=render_card,
    model_ids=(53,),
    failure_codes=(ErrorCode.L402_INVALID_PARAMS, ErrorCode.SERVICE_ERROR),
    max_body_bytes=64 * 1024,
    prevalidate=_check_card_fits,
    example={"template": "headline", "title": "Lightning is fast", "subtitle": "satsgate"},
)

# -- html-to-pdf ---------------------------------------------------------------------------

# A page that takes longer to lay out is refunded (TIMEOUT), not left to hold a worker.
HTML_TO_PDF_LIMIT_S = 60.0

MAX_HTML_CHARS = 2_000_000


class HtmlToPdfParams(Params):
    html: str | None = Field(None, min_length=1, max_length=MAX_HTML_CHARS)
    markdown: str | None = Field(None, min_length=1, max_length=MAX_HTML_CHARS)
    modelId: Literal[29, "29"] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> HtmlToPdfParams:
        if (self.html is None) == (self.markdown is None):
            raise ValueError("send exactly one of html or markdown")
        return self


async def _pdf_result(ctx: ServiceContext, rendered: pdf.RenderedPdf) -> ServiceResult:
    stored = await ctx.files.save(rendered.data, "pdf")
    return ServiceResult(
        {
            "pdf_url": stored.url,
            "pdf_base64": base64.b64encode(rendered.data).decode("ascii"),
            "pages": rendered.pages,
        }
    )


async def html_to_pdf(ctx: ServiceContext, params: HtmlToPdfParams) -> ServiceResult:
    try:
        if params.html is not None:
            rendered = await ctx.run_cpu(pdf.html_to_pdf, params.html, limit_s=HTML_TO_PDF_LIMIT_S)
        else:
            assert params.markdown is not None
            rendered = await ctx.run_cpu(
                pdf.markdown_to_pdf, params.markdown, limit_s=HTML_TO_PDF_LIMIT_S
            )
    except ImageOpError as exc:  # an embedded image's own data: INVALID_INPUT, refunded
        raise EngineError(ErrorCode.INVALID_INPUT, f"The page cannot be rendered: {exc}") from None
    return await _pdf_result(ctx, rendered)


HTML_TO_PDF = ServiceSpec(
    slug="html-to-pdf",
    tool_name="html_to_pdf",
    category="utility",
    title="HTML or Markdown to PDF",
    description=(
        "Render HTML or Markdown to a PDF (external resources are not fetched; embed images "
        "as data: URIs)."
    ),
    params=HtmlToPdfParams,
    price_msat=FlatPrice.of_sats(50, "html-to-pdf"),
    handler=html_to_pdf,
    model_ids=(29,),
    max_body_bytes=8 * 1024 * 1024,
    example={"markdown": "# Invoice\n\nThank you."},
)

# -- merge-pdf -----------------------------------------------------------------------------

MAX_PDF_BYTES = 20 * 1024 * 1024
MAX_MERGE_DOCUMENTS = 50
# The whole merge: what it decodes and checks before payment, and what it writes after.
MAX_MERGE_BYTES = 50 * 1024 * 1024
MAX_MERGE_PAGES = 2000


class MergePdfParams(Params):
    documents: list[str] = Field(min_length=2, max_length=MAX_MERGE_DOCUMENTS)
    modelId: Literal[13, "13"] | None = None

    def decoded(self) -> list[bytes]:
        out = []
        total = 0
        for index, doc in enumerate(self.documents):
            try:
                data = decode_base64_file(doc, max_bytes=MAX_PDF_BYTES)
            except BadBase64 as exc:
                raise ApiError(
                    ErrorCode.L402_INVALID_PARAMS, f"documents[{index}]: {exc}"
                ) from None
            total += len(data)
            if total > MAX_MERGE_BYTES:
                raise ApiError(
                    ErrorCode.L402_INVALID_PARAMS,
                    f"documents: more than {MAX_MERGE_BYTES // (1024 * 1024)} MB of PDFs in all",
                )
            out.append(data)
        return out


def _validate_all(documents: list[bytes]) -> None:
    """Every document readable, and MAX_MERGE_PAGES pages in all (each document is
    refused by its declared page count before its pages are walked)."""
    pages = 0
    for index, data in enumerate(documents):
        try:
            pages += pdf_pages.validate_pdf(data, MAX_MERGE_PAGES - pages, index)
        except pdf_pages.TooManyPages:
            message = f"documents: more than {MAX_MERGE_PAGES} pages in all"
            raise ApiError(ErrorCode.L402_INVALID_PARAMS, message) from None
        except pdf_pages.InvalidPdf as exc:
            raise ApiError(
                ErrorCode.L402_INVALID_PARAMS, f"documents[{index}]: {exc.reason}"
            ) from None


async def _check_pdfs(params: MergePdfParams, _memo: PrecheckMemo) -> None:
    await asyncio.to_thread(_validate_all, params.decoded())


async def merge_pdf(ctx: ServiceContext, params: MergePdfParams) -> ServiceResult:
    rendered = await ctx.run_cpu(pdf.merge_pdfs, params.decoded())
    return await _pdf_result(ctx, rendered)


MERGE_PDF = ServiceSpec(
    slug="merge-pdf",
    tool_name="merge_pdf",
    category="utility",
    title="Merge PDFs",
    description="Merge 2 to 50 PDF documents (base64) into one, pages in order.",
    params=MergePdfParams,
    price_msat=FlatPrice.of_sats(100),  # no estimator quotes it
    handler=merge_pdf,
    model_ids=(13,),
    max_body_bytes=MAX_MERGE_BYTES * 4 // 3 + MAX_MERGE_DOCUMENTS * 4 + 4096,
    prevalidate=_check_pdfs,
    example={"documents": ["<base64 PDF>", "<base64 PDF>"]},
)

SERVICES = (RENDER_CARD, HTML_TO_PDF, MERGE_PDF)
