"""Capability: the image-processing operations (detect-nsfw, detect-objects, upscale-image,
deblur-image, remove-object), one small Protocol each, with the request and result types
the services and the adapters share.

Every result says what really ran (``method``): a local engine that resamples says
"Lanczos resampling", not "super-resolution". An engine that serves only part of what
the spec offers (a local detector that knows faces, not the open set) declares
``unsupported(request)`` for the request types below (the seam's pre-invoice check,
satsgate.engines.registry.Binding.unsupported): a request it refuses is never charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

ImageFormat = Literal["png", "jpeg", "webp"]
DeblurMode = Literal["both", "deblur", "denoise"]
InpaintMethod = Literal["telea", "ns"]


@dataclass(frozen=True)
class ImageOutput:
    """An image an operation made, encoded, with what made it."""

    data: bytes
    format: ImageFormat
    width: int
    height: int
    method: str  # what ran, in words: "Lanczos resampling (4x)"
    # Operation-specific figures (the estimated blur, the noise level ...), JSON-able.
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Box:
    """Pixels of the (orientation-corrected) input: left, top, width, height."""

    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class Detection:
    label: str
    confidence: float  # 0..1
    box: Box


@dataclass(frozen=True)
class NsfwResult:
    label: Literal["normal", "nsfw"]
    confidence: float  # of the label, 0..1
    nsfw_score: float  # the strongest explicit-content score found, 0..1
    detections: tuple[Detection, ...]  # what the classifier saw (may be empty)
    method: str


@dataclass(frozen=True)
class DetectionResult:
    objects: tuple[Detection, ...]
    width: int
    height: int
    method: str
    confidence_note: str = ""  # what ``confidence`` means for this engine


# ``model``: the provider's name for the spec model id the request chose (a provider
# binding's model map); None for an engine without a model choice (the local ones).


class NsfwEngine(Protocol):
    async def classify(self, image: bytes, *, model: str | None = None) -> NsfwResult: ...


class ObjectDetectionEngine(Protocol):
    async def detect(
        self, image: bytes, prompt: str, threshold: float, *, model: str | None = None
    ) -> DetectionResult: ...


class UpscaleEngine(Protocol):
    async def upscale(
        self, image: bytes, scale: int, face_enhance: bool, *, model: str | None = None
    ) -> ImageOutput: ...


class DeblurEngine(Protocol):
    async def deblur(
        self, image: bytes, mode: DeblurMode, *, model: str | None = None
    ) -> ImageOutput: ...


class InpaintEngine(Protocol):
    async def erase(
        self, image: bytes, mask: bytes, method: InpaintMethod, *, model: str | None = None
    ) -> ImageOutput: ...


@dataclass(frozen=True)
class DetectionQuery:
    """What a detect-objects request asks for, as an engine's ``unsupported`` sees it."""

    prompt: str


@dataclass(frozen=True)
class UpscaleOptions:
    """An upscale request's options, as an engine's ``unsupported`` sees them."""

    scale: int
    face_enhance: bool
