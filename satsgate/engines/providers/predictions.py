"""What the asynchronous prediction platforms (Replicate, fal) share: one prediction run
from creation to a downloaded output, by webhook or polling (whichever comes first), and
the engines (video, music, 3D, image operations, upscaling) built on it.

A platform adapter (``PredictionPlatform``) says how to create, fetch and cancel a
prediction and how to read a webhook; ``PredictionProvider`` does the rest:

- the run waits on the prediction's webhook event or the next poll, whichever comes
  first; a terminal state is handled once, whichever brought it;
- transient answers while polling (429, 5xx, a dropped connection) are retried until the
  run's deadline; past it the prediction is cancelled upstream and the call fails with
  TIMEOUT (the gate refunds it); a call cancelled here cancels the prediction upstream;
- a failed prediction whose error reads as a content refusal is CONTENT_FILTERED, any
  other failure or an upstream cancellation SERVICE_ERROR; none falls back to another
  provider once a prediction exists (it may have run);
- outputs are downloaded here (size-capped) and returned as bytes: services store them
  in satsgate's own file store, a platform URL never reaches a caller.

Options of the ``[providers.NAME]`` table (besides base_url, api_key, models):
``poll_interval_s`` (default 2; ``webhook_poll_interval_s``, default 15, while a
webhook is expected), ``max_wait_s`` (default 900), ``max_output_bytes``
(default 200 MiB), ``webhooks`` (default true: ask for webhooks at
``<base_url>/api/webhooks/<kind>/<NAME>``), ``input_files`` (see ``file_input``), and per
model ``input_names`` /
``input_values`` tables (see ``shape_input``).

The run itself is ``PredictionRunner`` (prediction_runs.py); what inputs and outputs are
read as (file types, data URIs, output URLs, detections, refusals) is in
prediction_parsing.py. This module holds the engines.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any, Literal

from satsgate.engines.errors import EngineError
from satsgate.engines.generation import (
    ImageOpRequest,
    ImageOpResult,
    MediaFile,
    Model3dRequest,
    MusicRequest,
    PredictionCheckpoint,
    ProgressFn,
    VideoRequest,
    no_progress,
)
from satsgate.engines.image_generation import (
    GeneratedImage,
    ImageEditRequest,
    ImageGenerationRequest,
)
from satsgate.engines.image_process import DetectionResult, ImageOutput
from satsgate.engines.providers.prediction_parsing import nearest_ratio, parse_detections
from satsgate.engines.providers.prediction_runs import PredictionRunner
from satsgate.errors import ErrorCode

# The engine names a prediction platform serves (the services' engine names).
ENGINE_NAMES = frozenset(
    {
        "video",
        "music",
        "3d",
        "remove_background",
        "restore_face",
        "colorize_image",
        "estimate_depth",
        "upscale_image",
        "deblur_image",
        "remove_object",
        "image",  # generate-image, a second source beside the chat providers' image models
        "image_edit",
        "detect_objects",  # open set: what the prompt names, not only the local faces
    }
)
_IMAGE_EXTS = ("png", "jpeg", "webp")


class PredictionProvider(PredictionRunner):
    """Base of the prediction platform adapters (``replicate``, ``fal``)."""

    LABEL = ""  # what a result's ``method`` says ran: "hosted model"

    # -- the Provider protocol ----------------------------------------------------------

    def engine(self, name: str) -> object | None:
        return self if name in ENGINE_NAMES else None

    # -- the engines --------------------------------------------------------------------

    def _model(self, model_name: str | None) -> str:
        if not model_name:  # the registry sends only mapped model ids; be safe anyway
            raise EngineError(ErrorCode.SERVICE_ERROR, "No model is configured for this request.")
        return model_name

    async def _run_fields(
        self,
        model: str,
        fields: dict[str, Any],
        call_id: str = "",
        progress: ProgressFn = no_progress,
        checkpoint: PredictionCheckpoint | None = None,
    ) -> list[MediaFile]:
        """:meth:`run` of ``model`` on the canonical ``fields``, shaped for it."""
        return await self.run(model, self.shape_input(model, fields), call_id, progress, checkpoint)

    async def _image_file(self, model: str, fields: dict[str, Any]) -> MediaFile:
        """The first image output of a run that feeds no job (no call id, no progress)."""
        return _first(await self._run_fields(model, fields), _IMAGE_EXTS, "an image")

    async def generate_video(self, request: VideoRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "duration": request.duration_s,
            "resolution": request.resolution,
            "generate_audio": request.generate_audio,
            "mode": request.mode,
            "image": await self.file_input(request.image),
            "reference_image": await self.file_input(request.reference_image),
            "reference_audio": await self.file_input(request.reference_audio),
        }
        files = await self._run_fields(
            model, fields, request.call_id, request.progress, request.checkpoint
        )
        return _first(files, ("mp4", "webm", "mov"), "a video")

    async def generate_music(self, request: MusicRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "lyrics": request.lyrics,
            "duration": request.duration_s,
            "instrumental": request.instrumental,
            "output_format": "wav" if request.audio_format == "pcm" else request.audio_format,
            "sample_rate": request.sample_rate,
            "bitrate": request.bitrate,
        }
        files = await self._run_fields(model, fields, request.call_id, request.progress)
        return _first(files, ("wav", "mp3", "flac", "ogg", "m4a"), "audio")

    async def generate_model(self, request: Model3dRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "image": await self.file_input(request.image),
        }
        files = await self._run_fields(
            model, fields, request.call_id, request.progress, request.checkpoint
        )
        return _first(files, ("glb",), "a GLB model")

    async def process_image(self, request: ImageOpRequest) -> ImageOpResult:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {"image": await self.file_input(request.image), **request.options}
        files = await self._run_fields(model, fields, request.call_id, request.progress)
        images = tuple(f for f in files if f.ext in _IMAGE_EXTS)
        if not images:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The model returned no image.", may_fall_back=False
            )
        return ImageOpResult(images, self.LABEL)

    async def generate(self, request: ImageGenerationRequest) -> GeneratedImage:
        """generate-image: canonical fields prompt, width, height, aspect_ratio (the
        nearest of the common ratios), image (the first reference), images (all)."""
        model = self._model(request.model_name)
        refs = [await self.file_input(r) for r in request.references]
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "width": request.width,
            "height": request.height,
            "aspect_ratio": nearest_ratio(request.width, request.height),
            "image": refs[0] if refs else None,
            "images": refs if len(refs) > 1 else None,
        }
        return GeneratedImage((await self._image_file(model, fields)).data)

    async def edit(self, request: ImageEditRequest) -> GeneratedImage:
        """edit-image: canonical fields prompt, image, aspect_ratio ("match_input_image" for
        "auto"), output_format, resolution."""
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "image": await self.file_input(request.image),
            "aspect_ratio": (
                "match_input_image" if request.aspect_ratio == "auto" else request.aspect_ratio
            ),
            "output_format": request.output_format,
            "resolution": request.resolution,
        }
        return GeneratedImage((await self._image_file(model, fields)).data)

    async def _image_output(
        self, model: str | None, fields: dict[str, Any], method: str
    ) -> ImageOutput:
        out = await self._image_file(self._model(model), fields)
        width, height = await asyncio.to_thread(_image_size, out.data)
        fmt: Literal["png", "jpeg", "webp"] = (
            "jpeg" if out.ext == "jpeg" else "webp" if out.ext == "webp" else "png"
        )
        return ImageOutput(out.data, fmt, width, height, method)

    async def upscale(
        self, image: bytes, scale: int, face_enhance: bool, *, model: str | None = None
    ) -> ImageOutput:
        """upscale-image: canonical fields image, scale, face_enhance."""
        fields = {
            "image": await self.file_input(image),
            "scale": scale,
            "face_enhance": face_enhance,
        }
        return await self._image_output(
            model, fields, f"AI super-resolution ({scale}x, {self.LABEL})"
        )

    async def deblur(self, image: bytes, mode: str, *, model: str | None = None) -> ImageOutput:
        """deblur-image: canonical fields image, mode (both, deblur, denoise)."""
        fields = {"image": await self.file_input(image), "mode": mode}
        return await self._image_output(model, fields, f"AI restoration ({self.LABEL})")

    async def detect(
        self, image: bytes, prompt: str, threshold: float, *, model: str | None = None
    ) -> DetectionResult:
        """detect-objects, open set: canonical fields image, query (the prompt),
        box_threshold; the output's boxes (see :func:`parse_detections`)."""
        name = self._model(model)
        fields = {
            "image": await self.file_input(image),
            "query": prompt,
            "box_threshold": threshold,
        }
        output = await self.run_output(
            name, self.shape_input(name, fields), "", lambda _p, _m: None
        )
        width, height = await asyncio.to_thread(_image_size, image)
        objects = parse_detections(output, width, height, threshold)
        return DetectionResult(
            objects,
            width,
            height,
            f"open-set detection ({self.LABEL})",
            "the model's own score for each box, 0 to 1",
        )

    async def erase(
        self, image: bytes, mask: bytes, method: str, *, model: str | None = None
    ) -> ImageOutput:
        """remove-object: canonical fields image, mask (white erased); the local engine's
        inpainting ``method`` does not apply."""
        fields = {"image": await self.file_input(image), "mask": await self.file_input(mask)}
        return await self._image_output(model, fields, f"AI inpainting ({self.LABEL})")


def _first(files: list[MediaFile], exts: tuple[str, ...], what: str) -> MediaFile:
    for f in files:
        if f.ext in exts:
            return f
    raise EngineError(
        ErrorCode.SERVICE_ERROR, f"The model returned no {what}.", may_fall_back=False
    )


def _image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.width, img.height
    except Exception as exc:
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The model returned an unreadable image.", may_fall_back=False
        ) from exc
