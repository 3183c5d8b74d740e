"""Video: generate-video (text to video) and animate-image (image to video), both async and
priced per second by resolution. Engine ``video``: a prediction platform (kind
``replicate`` or ``fal``). The clip is checked against the asked duration
(OUTPUT_DURATION_INSANE, refunded, when far from it) and stored in satsgate's file store;
a shorter clip is charged for the seconds it has (the rest refunded)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from satsgate.domain.media import audio_duration_s
from satsgate.engines.generation import VideoEngine, VideoRequest
from satsgate.errors import ErrorCode
from satsgate.services.ai.generated_media import (
    JobCheckpoint,
    decoded,
    stored_by_the_second,
)
from satsgate.services.base import PriceShape, ServiceContext, ServiceResult, ServiceSpec
from satsgate.services.catalog.pricing import VIDEO_SATS_PER_SECOND, video_msat
from satsgate.services.catalog.rates import RateBook
from satsgate.services.inputs.params import (
    IMAGE_MAX_BYTES,
    CallbackFields,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_image,
    decode_file,
    image_field,
    read_media,
)

# Duration bounds: the request schema says 3 to 15 s, the tool catalog 5 to 15 s. The
# request schema's bound wins (it is the wider one, so every documented call is accepted).
DURATION_MIN_S, DURATION_MAX_S = 3, 15
REFERENCE_AUDIO_MAX_BYTES = 10 * MiB
Resolution = Literal["768p", "2K"]


class _VideoParams(ServiceParams, ModelChoice, CallbackFields):
    """Common to both: prompt, duration (3 to 15 s, request-schema bound), resolution."""

    prompt: str = Field(min_length=1, max_length=4000)
    duration: int = Field(
        5,
        ge=DURATION_MIN_S,
        le=DURATION_MAX_S,
        description="Seconds, 3 to 15 (the request schema's bound; the tool catalog says 5).",
    )
    resolution: Resolution = Field(
        "768p",
        description=f"768p ({VIDEO_SATS_PER_SECOND['768p']} sats/s) or 2K "
        f"({VIDEO_SATS_PER_SECOND['2K']} sats/s; upscaled from 768p).",
    )
    generate_audio: bool = Field(
        False,
        validation_alias=alias("generate_audio", "generateAudio"),
        description="Native audio track.",
    )


class GenerateVideoParams(_VideoParams):
    MODELS: ClassVar[tuple[int, ...]] = (25,)
    DEFAULT: ClassVar[int] = 25

    mode: Literal["standard", "pro"] = Field(
        "pro", description="Render mode (request schema); the price is set by resolution."
    )
    reference_image: str | None = Field(
        None,
        validation_alias=alias("reference_image", "referenceImage"),
        max_length=b64_chars(IMAGE_MAX_BYTES),
        description="Optional style reference (base64).",
    )
    reference_audio: str | None = Field(
        None,
        validation_alias=alias("reference_audio", "referenceAudio"),
        max_length=b64_chars(REFERENCE_AUDIO_MAX_BYTES),
        description="Optional audio to follow (base64 mp3, wav, flac, ogg or m4a; 10 MB).",
    )

    def check(self) -> Any:
        if self.reference_image is not None:
            check_image(self.reference_image, "reference_image")
        if self.reference_audio is not None:
            data = decode_file(self.reference_audio, "reference_audio", REFERENCE_AUDIO_MAX_BYTES)
            read_media(data, "reference_audio", audio_duration_s)
        return True


class AnimateImageParams(_VideoParams):
    MODELS: ClassVar[tuple[int, ...]] = (24,)
    DEFAULT: ClassVar[int] = 24

    image: str = image_field(
        "image", "imageBase64", "file", description="The image to animate, base64 (10 MB)."
    )

    def check(self) -> Any:
        return check_image(self.image, "image")


async def _video(
    ctx: ServiceContext,
    params: _VideoParams,
    image: bytes | None = None,
    reference_image: bytes | None = None,
    reference_audio: bytes | None = None,
) -> ServiceResult:
    """Run the video engine, check the clip's length, store it: { videoUrl, ... }."""
    ctx.progress(1.0, "submitted")
    mode = params.mode if isinstance(params, GenerateVideoParams) else "pro"
    model = params.chosen_model
    clip = await ctx.engines.run(
        "video",
        VideoEngine,
        lambda engine, name: engine.generate_video(
            VideoRequest(
                prompt=params.prompt,
                duration_s=params.duration,
                resolution=params.resolution,
                generate_audio=params.generate_audio,
                image=image,
                reference_image=reference_image,
                reference_audio=reference_audio,
                mode=mode,
                model_name=name,
                call_id=ctx.call_id,
                progress=ctx.progress,
                checkpoint=JobCheckpoint(ctx.job_state, params),
            )
        ),
        model_id=model,
    )
    stored, seconds, billed = await stored_by_the_second(
        ctx, clip.data, clip.ext, params.duration, "video"
    )
    return ServiceResult(
        {
            "videoUrl": stored.url,
            "video_url": stored.url,
            "format": clip.ext,
            "durationSeconds": round(seconds, 2),
            "resolution": params.resolution,
            "bytes": stored.size,
            "modelId": model,
            "billing": {"seconds": billed, "sats": video_msat(billed, params.resolution) // 1000},
        },
        charged_msat=video_msat(billed, params.resolution),
    )


async def generate_video(ctx: ServiceContext, params: GenerateVideoParams) -> ServiceResult:
    reference_image = (
        await decoded(params.reference_image, "reference_image")
        if params.reference_image is not None
        else None
    )
    reference_audio = (
        await decoded(params.reference_audio, "reference_audio", REFERENCE_AUDIO_MAX_BYTES)
        if params.reference_audio is not None
        else None
    )
    return await _video(
        ctx, params, reference_image=reference_image, reference_audio=reference_audio
    )


async def animate_image(ctx: ServiceContext, params: AnimateImageParams) -> ServiceResult:
    return await _video(ctx, params, image=await decoded(params.image, "image"))


def _per_second(p: _VideoParams, _book: RateBook) -> int:
    return video_msat(p.duration, p.resolution)


_PRICE_NOTE = (
    f"{VIDEO_SATS_PER_SECOND['768p']} sats per second at 768p, {VIDEO_SATS_PER_SECOND['2K']} at 2K"
)


def _price_shape(estimate: str) -> PriceShape:
    return PriceShape(
        "per_second",
        "per second",
        video_msat(DURATION_MIN_S, "768p"),
        rate_by=("resolution",),
        estimate=estimate,
        note=f"{_PRICE_NOTE}; {DURATION_MIN_S} to {DURATION_MAX_S} seconds.",
    )


GENERATE_VIDEO = ServiceSpec(
    slug="generate-video",
    tool_name="generate_video",
    category="video",
    title="Generate video",
    description=f"Text to video, 3 to 15 s (async): {{ requestId, status, poll_url }}, then "
    f"{{ videoUrl }}. {_PRICE_NOTE}.",
    params=GenerateVideoParams,
    price_msat=_per_second,
    handler=generate_video,
    price_shape=_price_shape("video"),
    mode="job",
    job_type="video",
    model_ids=(25,),
    failure_codes=(ErrorCode.TIMEOUT, ErrorCode.CONTENT_FILTERED, ErrorCode.OUTPUT_DURATION_INSANE),
    max_body_bytes=body_limit(IMAGE_MAX_BYTES, REFERENCE_AUDIO_MAX_BYTES),
    example={"prompt": "waves at sunset, slow pan", "duration": 5},
    engine="video",
)

ANIMATE_IMAGE = ServiceSpec(
    slug="animate-image",
    tool_name="animate_image",
    category="video_from_image",
    title="Animate image",
    description=f"Image to video, 3 to 15 s (async): {{ requestId }}, then {{ videoUrl }}. "
    f"{_PRICE_NOTE}.",
    params=AnimateImageParams,
    price_msat=_per_second,
    handler=animate_image,
    price_shape=_price_shape("video-from-image"),
    mode="job",
    job_type="video-image",
    model_ids=(24,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.TIMEOUT, ErrorCode.OUTPUT_DURATION_INSANE),
    max_body_bytes=body_limit(IMAGE_MAX_BYTES),
    example={"prompt": "the cat turns its head", "image": "<base64 JPEG>", "duration": 5},
    engine="video",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (GENERATE_VIDEO, ANIMATE_IMAGE)
