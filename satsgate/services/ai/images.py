"""Image services: generate, edit, analyze, the image_process family and 3D models.

Each names its engine (``image``, ``image_edit``, ``vision``, ``3d``, and one per
image_process operation: ``detect_nsfw``, ``upscale_image`` ...). The local engines
(satsgate.engines.local.images) serve detect-nsfw, the faces of detect-objects,
upscale-image, deblur-image and remove-object with no keys; the others need a
provider. A node without an engine for a service lists it as unavailable and refuses
it before any invoice.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from satsgate.engines import EngineError
from satsgate.engines.generation import (
    ImageOpEngine,
    ImageOperation,
    ImageOpRequest,
    Model3dEngine,
    Model3dRequest,
)
from satsgate.engines.image_generation import (
    ImageEditEngine,
    ImageEditRequest,
    ImageGenerationEngine,
    ImageGenerationRequest,
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
from satsgate.engines.vision import DEFAULT_PROMPT, VisionEngine, VisionRequest
from satsgate.errors import ErrorCode
from satsgate.services.ai.engine_io import image_input, reference_png, stored_image, with_route
from satsgate.services.ai.generated_media import (
    JobCheckpoint,
    decoded,
    depth_maps,
    image_size,
    to_png,
)
from satsgate.services.base import (
    FlatPrice,
    Handler,
    Params,
    PriceShape,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.pricing import (
    IMAGE_2K_SATS,
    MSAT,
    image_price_sats,
)
from satsgate.services.catalog.routing import auto_image_model
from satsgate.services.inputs.params import (
    IMAGE_MAX_BYTES,
    CallbackFields,
    InvalidField,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_image,
    decode_file,
    image_field,
    no_engine,
)

PROMPT_MAX_CHARS = 4000
MAX_REFERENCES = 10
# Reference images each tier takes: 1 for standard, up to 10 for better. The spec does
# not give the best tier's capacity; it takes one (image-to-image).
REFERENCE_CAPACITY = {16: 1, 8: MAX_REFERENCES, 2: 1}
SIDE_MIN, SIDE_MAX = 256, 2048

# -- generate-image ------------------------------------------------------------------------


class ImageRequest(Params):
    """The HTTP form's ``input`` object."""

    prompt: str = Field(min_length=1, max_length=PROMPT_MAX_CHARS, description="What to draw.")
    width: int = Field(1024, ge=SIDE_MIN, le=SIDE_MAX, description="Pixels, default 1024.")
    height: int = Field(1024, ge=SIDE_MIN, le=SIDE_MAX, description="Pixels, default 1024.")


class GenerateImageParams(ServiceParams, ModelChoice):
    """HTTP form ``{input: {prompt, width, height}, modelId, file}``; tool form
    ``{prompt, imageBase64, modelId}`` (width and height optional)."""

    MODELS: ClassVar[tuple[int, ...]] = (16, 8, 2)
    DEFAULT: ClassVar[int] = 16

    input: ImageRequest | None = Field(None, description="HTTP form: prompt, width, height.")
    prompt: str | None = Field(
        None, min_length=1, max_length=PROMPT_MAX_CHARS, description="Tool form: the prompt."
    )
    width: int | None = Field(None, ge=SIDE_MIN, le=SIDE_MAX, description="Tool form width.")
    height: int | None = Field(None, ge=SIDE_MIN, le=SIDE_MAX, description="Tool form height.")
    file: str | list[str] | None = Field(
        None,
        validation_alias=alias("file", "imageBase64", "image", "images"),
        description="Reference image(s) as base64 (data URI or raw) for image-to-image or "
        "editing: 1 for the standard and best tiers, up to 10 for better. At most 10 MB each.",
    )
    model: Literal["auto"] | None = Field(
        None, description="'auto': pick the model from the request (see routing)."
    )

    @field_validator("file")
    @classmethod
    def _file_lengths(cls, value: str | list[str] | None) -> str | list[str] | None:
        files = [value] if isinstance(value, str) else (value or [])
        if isinstance(value, list) and not 1 <= len(value) <= MAX_REFERENCES:
            raise ValueError(f"send 1 to {MAX_REFERENCES} reference images")
        if any(len(f) > b64_chars(IMAGE_MAX_BYTES) for f in files):
            raise ValueError("a reference image is larger than 10 MB")
        return value

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        if (self.input is None) == (self.prompt is None):
            raise ValueError("send the prompt either as input.prompt or as prompt, not both")
        if self.input is not None and (self.width is not None or self.height is not None):
            raise ValueError("with input, put width and height inside input")
        if self.model == "auto" and (self.modelId is not None or self.tier is not None):
            raise ValueError("model 'auto' cannot be combined with modelId or tier")
        model = self.chosen_model
        if len(self.references) > REFERENCE_CAPACITY[model]:
            raise ValueError(
                f"model {model} takes at most {REFERENCE_CAPACITY[model]} reference image(s)"
            )
        if model == 2 and self.resolution != "1K":
            raise ValueError("the standard tier renders at 1K only (sides up to 1024)")
        return self

    @property
    def text(self) -> str:
        return self.input.prompt if self.input is not None else (self.prompt or "")

    @property
    def size(self) -> tuple[int, int]:
        if self.input is not None:
            return self.input.width, self.input.height
        return self.width or 1024, self.height or 1024

    @property
    def resolution(self) -> Literal["1K", "2K"]:
        return "1K" if max(self.size) <= 1024 else "2K"

    @property
    def references(self) -> list[str]:
        return [self.file] if isinstance(self.file, str) else list(self.file or [])

    def choose_model(self) -> int:
        if self.model == "auto":
            return auto_image_model(
                self.text, references=len(self.references), max_side=max(self.size)
            )
        return super().choose_model()

    @property
    def auto_routed(self) -> bool:
        return self.model == "auto"

    def accepts_model(self, model_id: int) -> bool:
        if len(self.references) > REFERENCE_CAPACITY[model_id]:
            return False
        return model_id != 2 or self.resolution == "1K"

    def check(self) -> Any:
        for index, ref in enumerate(self.references):
            check_image(ref, f"file[{index}]" if isinstance(self.file, list) else "file")
        return True


async def generate_image(ctx: ServiceContext, p: GenerateImageParams) -> ServiceResult:
    many = isinstance(p.file, list)
    references = tuple(
        [
            await reference_png(ctx, ref, f"file[{i}]" if many else "file")
            for i, ref in enumerate(p.references)
        ]
    )
    width, height = p.size
    request = ImageGenerationRequest(p.text, width, height, references)
    image = await ctx.engines.run(
        "image",
        ImageGenerationEngine,
        lambda engine, name: engine.generate(replace(request, model_name=name)),
        model_id=p.chosen_model,
    )
    url, fmt, out_w, out_h, _ = await stored_image(ctx, image.data)
    body = {
        "image_url": url,
        "format": fmt,
        "width": out_w,
        "height": out_h,
        "modelId": p.chosen_model,
    }
    return with_route(ServiceResult(body), p)


def _tier_rate(model_id: int) -> str:
    """A tier's price in words, from the tier table (pricing.IMAGE_TIER_SATS)."""
    text = f"{image_price_sats(model_id)} sats at 1K"
    if model_id in IMAGE_2K_SATS:
        text += f", {image_price_sats(model_id, '2K')} at 2K"
    return text


GENERATE_IMAGE = ServiceSpec(
    slug="generate-image",
    tool_name="generate_image",
    category="image",
    title="Generate image",
    description="Text (and optional reference images) to image. Fixed price by tier: "
    + ", ".join(f"model {m} {_tier_rate(m)}" for m in GenerateImageParams.MODELS)
    + ". Up to 10 references on the better tier (8); the standard tier (2) renders at 1K "
    "only. model 'auto' routes by the request.",
    params=GenerateImageParams,
    price_msat=lambda p, _book: image_price_sats(p.chosen_model, p.resolution) * MSAT,
    handler=generate_image,
    price_shape=PriceShape(
        "per_tier",
        "per image",
        image_price_sats(2) * MSAT,
        rate_by=("tier", "resolution"),
        tier_min_sats={m: image_price_sats(m) for m in GenerateImageParams.MODELS},
        model_rates={m: _tier_rate(m) for m in GenerateImageParams.MODELS},
        estimate="image",
        note=", ".join(f"model {m} {sats} sats at 2K" for m, sats in IMAGE_2K_SATS.items())
        + " (a side over 1024).",
    ),
    model_ids=(16, 8, 2),
    failure_codes=(ErrorCode.CONTENT_FILTERED, ErrorCode.TIMEOUT),
    max_body_bytes=body_limit(*[IMAGE_MAX_BYTES] * MAX_REFERENCES),
    example={"input": {"prompt": "a lighthouse at dusk", "width": 1024, "height": 1024}},
    engine="image",
)

# -- edit-image ----------------------------------------------------------------------------


class EditImageParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (18,)
    DEFAULT: ClassVar[int] = 18

    prompt: str = Field(min_length=1, max_length=PROMPT_MAX_CHARS, description="The edit.")
    imageBase64: str = image_field("imageBase64", "image", "file")
    aspectRatio: Literal["auto", "1:1", "4:3", "3:4", "3:2", "2:3", "16:9", "9:16", "21:9"] = Field(
        "auto", validation_alias=alias("aspectRatio", "aspect_ratio")
    )
    outputFormat: Literal["png", "jpeg", "webp"] = Field(
        "png", validation_alias=alias("outputFormat", "output_format")
    )
    resolution: Literal["1K", "2K", "4K"] = Field(
        "1K", description="Output size; accepted at every size for the same price."
    )
    returnBase64: bool = Field(
        False,
        validation_alias=alias("returnBase64", "return_base64"),
        description="Also return the image as base64.",
    )

    def check(self) -> Any:
        return check_image(self.imageBase64, "imageBase64")


async def edit_image(ctx: ServiceContext, p: EditImageParams) -> ServiceResult:
    request = ImageEditRequest(
        p.prompt,
        await reference_png(ctx, p.imageBase64, "imageBase64"),
        aspect_ratio=p.aspectRatio,
        resolution=p.resolution,
        output_format=p.outputFormat,
    )
    image = await ctx.engines.run(
        "image_edit",
        ImageEditEngine,
        lambda engine, name: engine.edit(replace(request, model_name=name)),
        model_id=p.chosen_model,
    )
    url, fmt, width, height, data = await stored_image(ctx, image.data, p.outputFormat)
    body: dict[str, Any] = {
        "success": True,
        "imageUrl": url,
        "fallback": False,
        "format": fmt,
        "width": width,
        "height": height,
    }
    if p.returnBase64:
        body["base64Image"] = base64.b64encode(data).decode("ascii")
    return ServiceResult(body)


EDIT_IMAGE = ServiceSpec(
    slug="edit-image",
    tool_name="edit_image",
    category="image_edit",
    title="Edit image",
    description="Edit an image by instruction; one price at any output size.",
    params=EditImageParams,
    price_msat=FlatPrice.of_sats(200, "image-edit"),
    handler=edit_image,
    model_ids=(18,),
    failure_codes=(ErrorCode.CONTENT_FILTERED, ErrorCode.TIMEOUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(IMAGE_MAX_BYTES),
    example={"prompt": "make the sky stormy", "imageBase64": "<base64 PNG>"},
    engine="image_edit",
)

# -- analyze-image -------------------------------------------------------------------------


class AnalyzeImageParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (5,)
    DEFAULT: ClassVar[int] = 5

    imageBase64: str = image_field("imageBase64", "image", "file")
    prompt: str | None = Field(
        None,
        min_length=1,
        max_length=PROMPT_MAX_CHARS,
        description="Question about the image; omit for a description.",
    )

    def check(self) -> Any:
        return check_image(self.imageBase64, "imageBase64")


async def analyze_image(ctx: ServiceContext, p: AnalyzeImageParams) -> ServiceResult:
    request = VisionRequest(
        await image_input(ctx, p.imageBase64, "imageBase64"), p.prompt or DEFAULT_PROMPT
    )
    result = await ctx.engines.run(
        "vision",
        VisionEngine,
        lambda engine, name: engine.analyze(replace(request, model_name=name)),
        model_id=p.chosen_model,
    )
    return ServiceResult({"content": result.content, "modelId": p.chosen_model})


ANALYZE_IMAGE = ServiceSpec(
    slug="analyze-image",
    tool_name="analyze_image",
    category="vision",
    title="Analyze image",
    description="Describe an image or answer a question about it: { content }.",
    params=AnalyzeImageParams,
    price_msat=FlatPrice.of_sats(21, "vision"),
    handler=analyze_image,
    untrusted_output=True,
    model_ids=(5,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(IMAGE_MAX_BYTES),
    example={"imageBase64": "<base64 JPEG>", "prompt": "What is on the table?"},
    engine="vision",
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


# (engine, params) -> why that engine cannot serve this request, or None.
async def _decoded(value: str, field: str) -> bytes:
    """A caller's image (checked before payment), decoded off the event loop."""
    return await asyncio.to_thread(decode_file, value, field, IMAGE_MAX_BYTES)


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
    image = await _decoded(params.imageBase64, "imageBase64")
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
    image = await _decoded(params.imageBase64, "imageBase64")
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
    image = await _decoded(params.imageBase64, "imageBase64")
    out = await ctx.engines.run(
        "upscale_image",
        UpscaleEngine,
        lambda engine, model: engine.upscale(image, params.scale, params.face_enhance, model=model),
        model_id=params.chosen_model,
    )
    return await _image_result(ctx, out, params.chosen_model)


async def deblur_image(ctx: ServiceContext, params: DeblurImageParams) -> ServiceResult:
    image = await _decoded(params.imageBase64, "imageBase64")
    mode: DeblurMode = params.mode
    out = await ctx.engines.run(
        "deblur_image",
        DeblurEngine,
        lambda engine, model: engine.deblur(image, mode, model=model),
        model_id=params.chosen_model,
    )
    return await _image_result(ctx, out, params.chosen_model)


async def remove_object(ctx: ServiceContext, params: RemoveObjectParams) -> ServiceResult:
    image = await _decoded(params.imageBase64, "imageBase64")
    mask = await _decoded(params.maskBase64, "maskBase64")
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

# -- generate-3d-model ---------------------------------------------------------------------


class Generate3dParams(ServiceParams, ModelChoice, CallbackFields):
    MODELS: ClassVar[tuple[int, ...]] = (17,)
    DEFAULT: ClassVar[int] = 17

    imageBase64: str | None = Field(
        None,
        validation_alias=alias("imageBase64", "image", "file"),
        max_length=b64_chars(IMAGE_MAX_BYTES),
        description="A photo of the object (base64); send this or prompt.",
    )
    prompt: str | None = Field(
        None,
        min_length=1,
        max_length=PROMPT_MAX_CHARS,
        description="A description of the object; send this or imageBase64.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.imageBase64 is None) == (self.prompt is None):
            raise ValueError("send exactly one of imageBase64 or prompt")
        return self

    def check(self) -> Any:
        if self.imageBase64 is not None:
            check_image(self.imageBase64, "imageBase64")
        return True


async def generate_3d(ctx: ServiceContext, params: Generate3dParams) -> ServiceResult:
    ctx.progress(1.0, "submitted")
    image = (
        await decoded(params.imageBase64, "imageBase64") if params.imageBase64 is not None else None
    )
    model = await ctx.engines.run(
        "3d",
        Model3dEngine,
        lambda engine, name: engine.generate_model(
            Model3dRequest(
                params.prompt,
                image,
                name,
                ctx.call_id,
                ctx.progress,
                JobCheckpoint(ctx.job_state, params),
            )
        ),
        model_id=params.chosen_model,
    )
    if model.data[:4] != b"glTF":
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The model returned no GLB file.", may_fall_back=False
        )
    stored = await ctx.files.save(model.data, "glb")
    return ServiceResult(
        {
            "modelUrl": stored.url,
            "model_url": stored.url,
            "format": "glb",
            "bytes": stored.size,
            "modelId": params.chosen_model,
        }
    )


GENERATE_3D = ServiceSpec(
    slug="generate-3d-model",
    tool_name="generate_3d_model",
    category="3d",
    title="Generate 3D model",
    description="Photo or prompt to a GLB model (async, up to about 5 minutes): { requestId }, "
    "then { modelUrl }.",
    params=Generate3dParams,
    price_msat=FlatPrice.of_sats(1600, "3d-model"),
    handler=generate_3d,
    mode="job",
    job_type="image-3d",
    model_ids=(17,),
    failure_codes=(ErrorCode.TIMEOUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=body_limit(IMAGE_MAX_BYTES),
    example={"prompt": "a low-poly wooden chair"},
    engine="3d",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (
    GENERATE_IMAGE,
    EDIT_IMAGE,
    ANALYZE_IMAGE,
    *IMAGE_PROCESS,
    GENERATE_3D,
)
