"""Image generation and instruction edits: the capabilities the ``image`` (generate-image)
and ``image_edit`` (edit-image) engine names serve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

ImageFormat = Literal["png", "jpeg", "webp"]


@dataclass(frozen=True)
class ImageGenerationRequest:
    prompt: str
    width: int  # pixels the caller asked for; an engine may round to sizes it supports
    height: int
    # Reference images (image-to-image), raw bytes; empty for text-to-image.
    references: tuple[bytes, ...] = ()
    model_name: str | None = None  # the provider's model name for the spec model


@dataclass(frozen=True)
class ImageEditRequest:
    prompt: str  # the edit instruction
    image: bytes
    # "auto" or "W:H" (the caller's aspect ratio); resolution "1K", "2K" or "4K".
    aspect_ratio: str = "auto"
    resolution: str = "1K"
    output_format: ImageFormat = "png"
    model_name: str | None = None


@dataclass(frozen=True)
class GeneratedImage:
    data: bytes  # the image file (any common format; the service reads and converts it)
    # The model's rewrite of the prompt, when it made one (not shown to callers as is).
    revised_prompt: str | None = None


class ImageGenerationEngine(Protocol):
    async def generate(self, request: ImageGenerationRequest) -> GeneratedImage:
        """One image for the prompt; EngineError on failure (CONTENT_FILTERED when the
        upstream's safety system refused)."""
        ...


class ImageEditEngine(Protocol):
    async def edit(self, request: ImageEditRequest) -> GeneratedImage:
        """The edited image; EngineError on failure."""
        ...
