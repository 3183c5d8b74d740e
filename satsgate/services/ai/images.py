"""Image services: generate, edit, analyze, the image_process family and 3D models.

Each names its engine (``image``, ``image_edit``, ``vision``, ``3d``, and one per
image_process operation: ``detect_nsfw``, ``upscale_image`` ...). The local engines
(satsgate.engines.local.images) serve detect-nsfw, the faces of detect-objects,
upscale-image, deblur-image and remove-object with no keys; the others need a
provider. A node without an engine for a service lists it as unavailable and refuses
it before any invoice.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from satsgate.engines import EngineError
from satsgate.engines.generation import (
    Model3dEngine,
    Model3dRequest,
)
from satsgate.engines.image_generation import (
    ImageEditEngine,
    ImageEditRequest,
    ImageGenerationEngine,
    ImageGenerationRequest,
)
from satsgate.engines.vision import DEFAULT_PROMPT, VisionEngine, VisionRequest
from satsgate.errors import ErrorCode
from satsgate.services.ai.engine_io import image_input, reference_png, stored_image, with_route
from satsgate.services.ai.generated_media import (
    JobCheckpoint,
    decoded,
)
from satsgate.services.base import (
    FlatPrice,
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
    AutoModelChoice,
    CallbackFields,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_image,
    image_field,
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


class GenerateImageParams(ServiceParams, AutoModelChoice):
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
    GENERATE_3D,
)
