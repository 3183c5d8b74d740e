"""convert-file: documents, images, audio and video between formats, on this node
(satsgate.engines.local.convert: Pillow, WeasyPrint, pypdfium2, pandoc, LibreOffice,
ffmpeg). Always available; a file whose tool is missing here is refused before any
invoice.
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from satsgate.domain.media import (
    image_info,
    pdf_pages,
)
from satsgate.engines import EngineError
from satsgate.engines.local import convert as conv
from satsgate.engines.local import libreoffice
from satsgate.engines.local.image_support import ImageOpError
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.base import (
    FlatPrice,
    PrecheckMemo,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.inputs.params import (
    InvalidField,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    invalid_field,
)

# -- convert-file (local) ------------------------------------------------------------------

CONVERT_MAX_BYTES = 20 * MiB
Target = Literal[
    "png", "jpeg", "webp", "gif", "bmp", "tiff", "pdf", "txt", "html", "md", "docx", "odt",
    "rtf", "epub", "xlsx", "ods", "csv", "pptx", "odp", "mp3", "wav", "flac", "ogg", "opus",
    "m4a", "mp4", "webm", "mkv", "mov",
]  # fmt: skip


@dataclass(frozen=True)
class _Conversion:
    data: bytes
    source: conv.Source
    tool: str  # "" (satsgate's own), pandoc, libreoffice or ffmpeg
    # An image to an uncompressed target: its size in bytes (known before converting).
    raw_bytes: int | None = None
    size: str = ""  # the image's width x height, for the refusal


class ConvertFileParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (11,)
    DEFAULT: ClassVar[int] = 11

    file: str = Field(
        validation_alias=alias("file", "fileBase64", "documentBase64"),
        max_length=b64_chars(CONVERT_MAX_BYTES),
        description="The file as base64, at most 20 MB: an image, a PDF, an office or e-book "
        "file (DOCX, ODT, RTF, EPUB; DOC, XLS, XLSX, ODS, PPT, PPTX, ODP where the node has "
        "LibreOffice), audio (MP3, WAV, FLAC, Ogg, M4A; at most 60 minutes) or video (MP4, "
        "MOV, WebM, MKV, AVI; at most 5 minutes and 1920 px a side), or UTF-8 Markdown, "
        "HTML or text (say which with fileName).",
    )
    fileName: str | None = Field(
        None,
        max_length=255,
        validation_alias=alias("fileName", "file_name"),
        description="Original name; its extension tells text formats (.md, .html, .txt) and "
        "legacy Office files (.doc, .xls, .ppt) apart.",
    )
    targetFormat: Target = Field(
        validation_alias=alias("targetFormat", "target_format", "to", "format"),
        description="Images: png, jpeg, webp, gif, bmp, tiff, pdf. PDF: txt, png (every page; "
        "a ZIP of PNGs for several pages, at most 50). Markdown, HTML, text, DOCX, ODT, RTF, "
        "EPUB: pdf, txt, html, md, docx, odt, rtf, epub. Spreadsheets: pdf, xlsx, ods, csv. "
        "Presentations: pdf, pptx, odp. Audio: mp3, wav, flac, ogg, opus, m4a. Video: mp4, "
        "webm, mkv, mov, or its sound as an audio format.",
    )

    def check(self) -> _Conversion:
        data = decode_file(self.file, "file", CONVERT_MAX_BYTES)
        try:
            kind = conv.sniff(data, self.fileName)
            source = conv.Source(kind)
            if kind == "pdf":
                source = conv.Source("pdf", pages=pdf_pages(data))
            elif kind == "media":
                container = conv.media_container(data)
                assert container is not None
                if (missing := conv.missing_tool("ffmpeg")) is not None:
                    raise _unavailable("audio and video", missing)
                source = conv.probe_media(data, container)
        except ValueError as exc:
            raise InvalidField("file", str(exc)) from None
        targets = conv.targets_of(source.kind)
        if self.targetFormat not in targets:
            raise InvalidField(
                "targetFormat",
                f"{source.kind} converts to {', '.join(targets)}, not {self.targetFormat}",
            )
        if (
            source.kind == "video"
            and not source.has_audio
            and (self.targetFormat in conv.AUDIO_TARGETS)
        ):
            raise InvalidField("targetFormat", "the video has no sound to convert")
        raw, size = None, ""
        if source.kind == "image":
            info = image_info(data)
            raw = conv.raw_image_bytes(info.width, info.height, self.targetFormat)
            size = f"{info.width}x{info.height}"
        if self.targetFormat == "png" and (source.pages or 0) > conv.MAX_PNG_PAGES:
            raise InvalidField(
                "file", f"{source.pages} pages; at most {conv.MAX_PNG_PAGES} as PNG pages"
            )
        tool = conv.tool_for(source.kind, self.targetFormat)
        if (missing := conv.missing_tool(tool)) is not None:
            raise _unavailable(f"{source.kind} to {self.targetFormat}", missing)
        if tool == "libreoffice" and (why := libreoffice.external_reference(data, source.kind)):
            raise InvalidField("file", why)
        return _Conversion(data, source, tool, raw, size)


async def _prevalidate_convert(params: ConvertFileParams, memo: PrecheckMemo) -> None:
    """The file's checks, then an image converted to BMP or TIFF against the output cap
    this node holds the paid call to (``memo.caps``: the configured one), so a conversion
    that would be refused after payment is refused before the invoice instead."""
    await params.prechecks()
    job: _Conversion = params.checked()
    target = params.targetFormat
    cap = memo.caps.cap_for(CONVERT_SLUG, target)
    if job.raw_bytes is not None and job.raw_bytes > cap:
        raise invalid_field(
            "targetFormat",
            f"{job.size} as {target} would be {job.raw_bytes:,} bytes: more than the "
            f"{cap:,} bytes this node stores for one call; send a smaller image or convert "
            "to png, jpeg or webp",
            output_bytes=job.raw_bytes,
            max_output_bytes=cap,
        )


def _unavailable(what: str, missing: str) -> ApiError:
    return ApiError(
        ErrorCode.SERVICE_UNAVAILABLE,
        f"Converting {what} is not offered on this node ({missing}); nothing was charged.",
    )


_INLINE_MAX_BYTES = 5 * MiB


async def _converted(ctx: ServiceContext, job: _Conversion, target: str, title: str) -> bytes:
    kind, data = job.source.kind, job.data
    limit = ctx.settings.cpu_job_time_limit_s
    try:
        if job.tool == "ffmpeg":
            return await conv.ffmpeg_convert(data, job.source, target, limit)
        if job.tool == "libreoffice":
            return await libreoffice.libreoffice_convert(data, kind, target, limit)
        if job.tool == "pandoc":
            out = await conv.pandoc_convert(data, kind, target, title, limit)
            return await ctx.run_cpu(conv.html_document_to_pdf, out) if target == "pdf" else out
        if kind == "image":
            return await ctx.run_cpu(conv.convert_image, data, target)
        if kind == "pdf":
            return await ctx.run_cpu(conv.pdf_text, data)
        return await ctx.run_cpu(conv.text_document, data, kind, target)
    except conv.ToolFailed as exc:
        code = ErrorCode.TIMEOUT if exc.timed_out else ErrorCode.SERVICE_ERROR
        raise EngineError(code, f"The conversion failed: {exc}") from None
    except ImageOpError as exc:  # the file's own data: INVALID_INPUT, refunded
        raise EngineError(ErrorCode.INVALID_INPUT, f"The file cannot be converted: {exc}") from None


async def convert_file(ctx: ServiceContext, params: ConvertFileParams) -> ServiceResult:
    job: _Conversion = params.checked()
    target = params.targetFormat
    body: dict[str, Any] = {"format": target, "sourceFormat": job.source.kind, "modelId": 11}
    if job.source.kind == "pdf" and target == "png":
        pages = await ctx.run_cpu(conv.pdf_to_pngs, job.data)
        stored_pages = [await ctx.files.save(page.data, "png") for page in pages]
        body["pages"] = [
            {"page": n, "file_url": f.url, "width": p.width, "height": p.height, "size": f.size}
            for n, (p, f) in enumerate(zip(pages, stored_pages, strict=True), 1)
        ]
        if len(pages) == 1:
            output, ext = pages[0].data, "png"
        else:
            output, ext = await ctx.run_cpu(conv.zip_pages, pages), "zip"
            body["format"] = "zip"
    else:
        title = posixpath.splitext(params.fileName or "")[0] or "Document"
        output, ext = await _converted(ctx, job, target, title), target
    stored = await ctx.files.save(output, ext)
    body.update(file_url=stored.url, size=len(output))
    if len(output) <= _INLINE_MAX_BYTES:
        body["file_base64"] = base64.b64encode(output).decode("ascii")
    return ServiceResult(body)


CONVERT_SLUG = "convert-file"
CONVERT_FILE = ServiceSpec(
    slug=CONVERT_SLUG,
    tool_name="convert_file",
    category="utility",
    title="Convert file",
    description="Convert images (PNG, JPEG, WebP, GIF, BMP, TIFF, to PDF too), PDF to text "
    "or PNG pages, Markdown, HTML, text, DOCX, ODT, RTF and EPUB among themselves and to "
    "PDF, spreadsheets and presentations (where LibreOffice is installed), audio and video "
    "containers: { file_url, file_base64, format }. Runs on this node.",
    params=ConvertFileParams,
    price_msat=FlatPrice.of_sats(100, "file-conversion"),
    handler=convert_file,
    model_ids=(11,),
    failure_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.SERVICE_UNAVAILABLE,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.TIMEOUT,
    ),
    max_body_bytes=body_limit(CONVERT_MAX_BYTES),
    prevalidate=_prevalidate_convert,
    example={"file": "<base64 PNG>", "targetFormat": "jpeg"},
)

SERVICES: tuple[ServiceSpec[Any], ...] = (CONVERT_FILE,)
