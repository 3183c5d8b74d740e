"""The image_process family: one service per local or platform image operation
(remove-background, upscale, detect objects, ...), each on its own engine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from satsgate.engines import EngineError
from satsgate.engines.generation import (
    ImageOpEngine,
    ImageOperation,
    ImageOpRequest,
)
from satsgate.engines.image_process import (
    DeblurEngine,
    DeblurMode,
    Detection,
    DetectionQuery,
    ImageFormat,
    ImageOutput,
    InpaintEngine,
    InpaintMethod,
    NsfwEngine,
    ObjectDetectionEngine,
    UpscaleEngine,
    UpscaleOptions,
)
from satsgate.errors import ErrorCode
from satsgate.services.ai.generated_media import (
    decoded,
    depth_maps,
    image_size,
    to_png,
)
from satsgate.services.base import (
    FlatPrice,
    Handler,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.inputs.params import (
    IMAGE_MAX_BYTES,
    InvalidField,
    ModelChoice,
    ServiceParams,
    alias,
    body_limit,
    check_image,
    image_field,
    no_engine,
)

# -- image_process family ------------------------------------------------------------------

# Pixels an operation works on (input for the same-size operations, output for upscaling),
# checked before any invoice: the work and the stored file stay bounded for a flat price.
# Past MAX_OUTPUT_BYTES an encoded output is stored lossy (satsgate.engines.local.image_ops).
PROCESS_MAX_PIXELS = 16_777_216  # 4096 x 4096


def _check_pixels(width: int, height: int, field: str, what: str) -> None:
    if width * height > PROCESS_MAX_PIXELS:
        raise InvalidField(
            field, f"{what} {width}x{height} is more than {PROCESS_MAX_PIXELS:,} pixels (4096x4096)"
        )


class _ProcessParams(ServiceParams, ModelChoice):
    imageBase64: str = image_field("imageBase64", "image", "file")

    def check(self) -> Any:
        return check_image(self.imageBase64, "imageBase64")


class _SameSizeParams(_ProcessParams):
    """An operation whose output is the input's size (background removal, face
    restoration, colorization, depth, deblurring, object removal): the input's pixels are
    bounded, as upscaling bounds its output's."""

    def check(self) -> Any:
        info = check_image(self.imageBase64, "imageBase64")
        _check_pixels(info.width, info.height, "imageBase64", "the image is")
        return info


class RemoveBackgroundParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (35,)
    DEFAULT: ClassVar[int] = 35


class UpscaleImageParams(_ProcessParams):
    MODELS: ClassVar[tuple[int, ...]] = (36,)
    DEFAULT: ClassVar[int] = 36
    MAX_OUTPUT_PIXELS: ClassVar[int] = PROCESS_MAX_PIXELS

    scale: int = Field(2, ge=2, le=4, description="Upscaling factor, 2 to 4.")
    face_enhance: bool = Field(
        False,
        validation_alias=alias("face_enhance", "faceEnhance"),
        description="Also restore faces.",
    )

    def check(self) -> Any:
        info = check_image(self.imageBase64, "imageBase64")
        if info.width * info.height * self.scale**2 > self.MAX_OUTPUT_PIXELS:
            raise InvalidField(
                "scale",
                f"{info.width}x{info.height} at {self.scale}x would be "
                f"{info.width * self.scale}x{info.height * self.scale}: more than "
                f"{self.MAX_OUTPUT_PIXELS:,} pixels (4096x4096); send a smaller image or scale",
            )
        return info


class RestoreFaceParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (37,)
    DEFAULT: ClassVar[int] = 37

    fidelity: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="0 favours quality (stronger restoration), 1 favours fidelity to the input.",
    )


class DetectNsfwParams(_ProcessParams):
    MODELS: ClassVar[tuple[int, ...]] = (38,)
    DEFAULT: ClassVar[int] = 38


class DetectObjectsParams(_ProcessParams):
    MODELS: ClassVar[tuple[int, ...]] = (39,)
    DEFAULT: ClassVar[int] = 39

    prompt: str = Field(
        min_length=1,
        max_length=500,
        validation_alias=alias("prompt", "labels", "query"),
        description="What to find (open set), e.g. 'cat, red car, person with umbrella'. "
        "A node on its local engine finds faces, eyes and cat faces only, and refuses "
        "anything else before any invoice.",
    )
    threshold: float = Field(0.3, ge=0.0, le=1.0, description="Minimum confidence.")


class RemoveObjectParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (40,)
    DEFAULT: ClassVar[int] = 40

    maskBase64: str = image_field(
        "maskBase64",
        "mask",
        description="Binary mask as base64, the image's size: white is erased, black is kept.",
    )
    method: Literal["telea", "ns"] = Field(
        "telea",
        description="Inpainting method of the local engine: 'telea' (fast "
        "marching) or 'ns' (Navier-Stokes).",
    )

    def check(self) -> Any:
        info = super().check()
        mask = check_image(self.maskBase64, "maskBase64")
        if (mask.width, mask.height) != (info.width, info.height):
            raise InvalidField(
                "maskBase64",
                f"mask is {mask.width}x{mask.height}, the image {info.width}x{info.height}",
            )
        return info


class ColorizeImageParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (41,)
    DEFAULT: ClassVar[int] = 41


class DeblurImageParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (42,)
    DEFAULT: ClassVar[int] = 42

    mode: Literal["both", "deblur", "denoise"] = Field(
        "both", description="'deblur', 'denoise', or 'both' (denoise, then deblur)."
    )


class EstimateDepthParams(_SameSizeParams):
    MODELS: ClassVar[tuple[int, ...]] = (48,)
    DEFAULT: ClassVar[int] = 48


def _detection(found: Detection) -> dict[str, Any]:
    box = found.box
    return {
        "label": found.label,
        "confidence": found.confidence,
        "box": {"x": box.x, "y": box.y, "width": box.width, "height": box.height},
    }


async def _image_result(ctx: ServiceContext, out: ImageOutput, model: int) -> ServiceResult:
    stored = await ctx.files.save(out.data, out.format)
    return ServiceResult(
        {
            "image_url": stored.url,
            "format": out.format,
            "width": out.width,
            "height": out.height,
            "bytes": stored.size,
            "method": out.method,
            "details": dict(out.details),
            "modelId": model,
        }
    )


async def detect_nsfw(ctx: ServiceContext, params: DetectNsfwParams) -> ServiceResult:
    image = await decoded(params.imageBase64, "imageBase64")
    result = await ctx.engines.run(
        "detect_nsfw",
        NsfwEngine,
        lambda engine, model: engine.classify(image, model=model),
        model_id=params.chosen_model,
    )
    return ServiceResult(
        {
            "label": result.label,
            "confidence": result.confidence,
            "nsfw_score": result.nsfw_score,
            "detections": [_detection(d) for d in result.detections],
            "method": result.method,
            "modelId": params.chosen_model,
        }
    )


async def detect_objects(ctx: ServiceContext, params: DetectObjectsParams) -> ServiceResult:
    image = await decoded(params.imageBase64, "imageBase64")
    result = await ctx.engines.run(
        "detect_objects",
        ObjectDetectionEngine,
        lambda engine, model: engine.detect(image, params.prompt, params.threshold, model=model),
        model_id=params.chosen_model,
    )
    return ServiceResult(
        {
            "objects": [_detection(d) for d in result.objects],
            "count": len(result.objects),
            "width": result.width,
            "height": result.height,
            "method": result.method,
            "confidence_note": result.confidence_note,
            "modelId": params.chosen_model,
        }
    )


async def upscale_image(ctx: ServiceContext, params: UpscaleImageParams) -> ServiceResult:
    image = await decoded(params.imageBase64, "imageBase64")
    out = await ctx.engines.run(
        "upscale_image",
        UpscaleEngine,
        lambda engine, model: engine.upscale(image, params.scale, params.face_enhance, model=model),
        model_id=params.chosen_model,
    )
    return await _image_result(ctx, out, params.chosen_model)


async def deblur_image(ctx: ServiceContext, params: DeblurImageParams) -> ServiceResult:
    image = await decoded(params.imageBase64, "imageBase64")
    mode: DeblurMode = params.mode
    out = await ctx.engines.run(
        "deblur_image",
        DeblurEngine,
        lambda engine, model: engine.deblur(image, mode, model=model),
        model_id=params.chosen_model,
    )
    return await _image_result(ctx, out, params.chosen_model)


async def remove_object(ctx: ServiceContext, params: RemoveObjectParams) -> ServiceResult:
    image = await decoded(params.imageBase64, "imageBase64")
    mask = await decoded(params.maskBase64, "maskBase64")
    method: InpaintMethod = params.method
    out = await ctx.engines.run(
        "remove_object",
        InpaintEngine,
        lambda engine, model: engine.erase(image, mask, method, model=model),
        model_id=params.chosen_model,
    )
    return await _image_result(ctx, out, params.chosen_model)


async def _image_op(
    ctx: ServiceContext,
    operation: ImageOperation,
    params: _ProcessParams,
    options: Mapping[str, object] | None = None,
) -> tuple[bytes, str]:
    """One image operation on the engine named after it: its first output, and what ran."""
    image = await decoded(params.imageBase64, "imageBase64")
    result = await ctx.engines.run(
        operation,
        ImageOpEngine,
        lambda engine, name: engine.process_image(
            ImageOpRequest(operation, image, dict(options or {}), name, ctx.call_id, ctx.progress)
        ),
        model_id=params.chosen_model,
    )
    return result.files[0].data, result.method


async def _stored_image(
    ctx: ServiceContext, data: bytes, method: str, model: int, *, png: bool = False
) -> ServiceResult:
    try:
        if png:
            data = await asyncio.to_thread(to_png, data)
        width, height, _mode = await asyncio.to_thread(image_size, data)
    except Exception as exc:  # Pillow raises many kinds on a broken file
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The model returned an unreadable image.", may_fall_back=False
        ) from exc
    fmt: ImageFormat = (
        "png" if png or data[:4] == b"\x89PNG" else "jpeg" if data[:2] == b"\xff\xd8" else "webp"
    )
    return await _image_result(ctx, ImageOutput(data, fmt, width, height, method), model)


async def remove_background(ctx: ServiceContext, params: RemoveBackgroundParams) -> ServiceResult:
    data, method = await _image_op(ctx, "remove_background", params)
    return await _stored_image(ctx, data, method, params.chosen_model, png=True)


async def restore_face(ctx: ServiceContext, params: RestoreFaceParams) -> ServiceResult:
    data, method = await _image_op(ctx, "restore_face", params, {"fidelity": params.fidelity})
    return await _stored_image(ctx, data, method, params.chosen_model)


async def colorize_image(ctx: ServiceContext, params: ColorizeImageParams) -> ServiceResult:
    data, method = await _image_op(ctx, "colorize_image", params)
    return await _stored_image(ctx, data, method, params.chosen_model)


async def estimate_depth(ctx: ServiceContext, params: EstimateDepthParams) -> ServiceResult:
    data, method = await _image_op(ctx, "estimate_depth", params)
    try:
        raw, vis, width, height = await asyncio.to_thread(depth_maps, data)
    except Exception as exc:
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            "The model returned an unreadable depth map.",
            may_fall_back=False,
        ) from exc
    depth = await ctx.files.save(raw, "png")
    visual = await ctx.files.save(vis, "png")
    return ServiceResult(
        {
            "depth_url": depth.url,
            "visualization_url": visual.url,
            "format": "png",
            "width": width,
            "height": height,
            "method": method,
            "modelId": params.chosen_model,
        }
    )


def _process_spec(
    slug: str,
    tool: str,
    title: str,
    description: str,
    params: type[_ProcessParams],
    price: FlatPrice,
    extra_files: int = 0,
    untrusted: bool = False,
    example: Mapping[str, Any] | None = None,
    handler: Handler[Any] = no_engine,
    engine_request: Callable[[Any], object] | None = None,
    engine_request_field: str | None = None,
) -> ServiceSpec[Any]:
    return ServiceSpec(
        slug=slug,
        tool_name=tool,
        category="image_process",
        title=title,
        description=description,
        params=params,
        price_msat=price,
        handler=handler,
        untrusted_output=untrusted,
        model_ids=params.MODELS,
        failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
        max_body_bytes=body_limit(*[IMAGE_MAX_BYTES] * (1 + extra_files)),
        example={"imageBase64": "<base64 PNG>", **(example or {})},
        engine=slug.replace("-", "_"),  # each one its own: engines differ per operation
        engine_request=engine_request,
        engine_request_field=engine_request_field,
    )


IMAGE_PROCESS: tuple[ServiceSpec[Any], ...] = (
    _process_spec("remove-background", "remove_background", "Remove background",
                  "Cut out the subject: { image_url } of a transparent PNG.",
                  RemoveBackgroundParams,
                  FlatPrice.of_sats(44, "remove-background"),
                  handler=remove_background),
    _process_spec("upscale-image", "upscale_image", "Upscale image",
                  "Upscale 2x to 4x (scale), optionally restoring faces, to at most 4096x4096 "
                  "pixels: { image_url, width, height, method }; method says what ran "
                  "(e.g. Lanczos resampling on a node without an AI upscaler).",
                  UpscaleImageParams, FlatPrice.of_sats(5, "upscale-image"), handler=upscale_image,
                  engine_request=lambda p: UpscaleOptions(p.scale, p.face_enhance),
                  engine_request_field="face_enhance"),
    _process_spec("restore-face", "restore_face", "Restore faces",
                  "Restore faces in a photo (fidelity 0 to 1): { image_url }.",
                  RestoreFaceParams,
                  FlatPrice.of_sats(25, "restore-face"),
                  handler=restore_face),
    _process_spec("detect-nsfw", "detect_nsfw", "Detect NSFW",
                  "Classify an image: { label: normal | nsfw, confidence, nsfw_score, "
                  "detections, method }.",
                  DetectNsfwParams,
                  FlatPrice.of_sats(2, "detect-nsfw"),
                  handler=detect_nsfw),
    _process_spec("detect-objects", "detect_objects", "Detect objects",
                  "Open-set detection of what the prompt names: { objects: [{ label, "
                  "confidence, box: { x, y, width, height } }], count, width, height, method }. "
                  "A node on its local engine finds faces, eyes and cat faces only.",
                  DetectObjectsParams, FlatPrice.of_sats(5, "detect-objects"),
                  handler=detect_objects,
                  untrusted=True,  # labels: the model's words for what the prompt named
                  example={"prompt": "face"},
                  engine_request=lambda p: DetectionQuery(p.prompt),
                  engine_request_field="prompt"),
    _process_spec("remove-object", "remove_object", "Remove object",
                  "Erase what a binary mask marks (white erased, black kept) by inpainting: "
                  "{ image_url, method }.",
                  RemoveObjectParams, FlatPrice.of_sats(130, "remove-object"), extra_files=1,
                  example={"maskBase64": "<base64 PNG mask>"}, handler=remove_object),
    _process_spec("colorize-image", "colorize_image", "Colorize image",
                  "Colorize a greyscale photo: { image_url }.",
                  ColorizeImageParams,
                  FlatPrice.of_sats(5, "colorize-image"),
                  handler=colorize_image),
    _process_spec("deblur-image", "deblur_image", "Deblur image",
                  "Deblur and denoise a photo (mode both, deblur or denoise) up to 4096x4096: "
                  "{ image_url, method }.",
                  DeblurImageParams,
                  FlatPrice.of_sats(110, "deblur-image"),
                  handler=deblur_image),
    _process_spec("estimate-depth", "estimate_depth", "Estimate depth",
                  "Depth map: { depth_url (raw greyscale), visualization_url (colour) }.",
                  EstimateDepthParams,
                  FlatPrice.of_sats(5, "depth-estimation"),
                  handler=estimate_depth),
)  # fmt: skip
