"""What the AI services' handlers share: caller images as engine input, engine images as
stored output, and the route header of a model choice."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from satsgate.domain.media import MediaError, image_info
from satsgate.engines import EngineError
from satsgate.engines.chat import ImageInput
from satsgate.engines.image_codec import convert_image, to_png
from satsgate.errors import ErrorCode
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.services.catalog.routing import ROUTE_HEADER, routed_result
from satsgate.services.inputs.params import IMAGE_MAX_BYTES, ModelChoice, decode_file

# Formats the vision APIs take as they are; anything else is sent as PNG.
_VISION_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp",
                 "GIF": "image/gif"}  # fmt: skip
_EXTENSIONS = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp", "GIF": "gif"}


async def image_input(ctx: ServiceContext, value: str, field: str) -> ImageInput:
    """A caller's base64 image (checked before payment) as a vision engine's input."""
    data = await asyncio.to_thread(decode_file, value, field, IMAGE_MAX_BYTES)
    fmt = image_info(data).format
    if fmt in _VISION_TYPES:
        return ImageInput(data, _VISION_TYPES[fmt])
    return ImageInput(await ctx.run_cpu(to_png, data, quick=True), "image/png")


async def reference_png(ctx: ServiceContext, value: str, field: str) -> bytes:
    """A caller's base64 image as PNG bytes (what the image APIs take for uploads)."""
    data = await asyncio.to_thread(decode_file, value, field, IMAGE_MAX_BYTES)
    if image_info(data).format == "PNG":
        return data
    return await ctx.run_cpu(to_png, data, quick=True)


async def stored_image(
    ctx: ServiceContext, data: bytes, want: str | None = None
) -> tuple[str, str, int, int, bytes]:
    """An engine's image saved behind an expiring signed URL: (url, format, width, height,
    bytes). ``want``: re-encode to that format first when it is another."""
    try:
        info = image_info(data)
    except MediaError:
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            "The AI engine returned no readable image.",
        ) from None
    fmt = _EXTENSIONS.get(info.format)
    if (want is not None and fmt != want) or fmt is None:
        target = want or "png"
        data = await ctx.run_cpu(convert_image, data, target, quick=True)
        fmt = target
    stored = await ctx.files.save(data, fmt)
    return stored.url, fmt, info.width, info.height, data


def with_route(result: ServiceResult, params: ModelChoice) -> ServiceResult:
    """``X-Route-Model`` names the model that ran; an auto-routed JSON body also gets
    ``routed`` (spec: L402_AUTO_ROUTED)."""
    if params.auto_routed:
        return routed_result(result, params.chosen_model)
    return replace(result, headers={**result.headers, ROUTE_HEADER: str(params.chosen_model)})
