"""Capability: media made by hosted model platforms (video, animation, music, 3D models and
the image operations no local engine does), one small Protocol each, with the request
and result types the services and the adapters share.

An engine returns the output's bytes (``MediaFile``), already copied from the platform:
services store them in satsgate's own file store, so a caller never sees a platform URL.
``progress`` (0..100, message) feeds a job's ``await_result``; ``call_id`` identifies the
paid call the prediction belongs to (the adapter tags the prediction with it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

ProgressFn = Callable[[float, str], None]


def no_progress(_progress: float, _message: str) -> None:
    return None


@dataclass(frozen=True)
class SavedPrediction:
    provider: str  # the operator's [providers.NAME] that made it
    prediction_id: str
    handle: Mapping[str, str]  # platform-specific (fal's status/result/cancel URLs)


class PredictionCheckpoint(Protocol):
    """Where a job keeps the prediction it started, so a restart waits for the same
    prediction instead of making a second one (the service builds it from
    ServiceContext.job_state). An engine that finds a saved prediction of its own
    resumes it; it saves each prediction it makes right after making it."""

    async def load(self) -> SavedPrediction | None: ...

    async def save(self, prediction: SavedPrediction) -> None: ...


@dataclass(frozen=True)
class MediaFile:
    """One output, downloaded: its bytes and the file extension it is stored under."""

    data: bytes
    ext: str  # "mp4", "wav", "mp3", "glb", "png" ...


@dataclass(frozen=True)
class VideoRequest:
    prompt: str
    duration_s: int  # asked for, 3..15
    resolution: Literal["768p", "2K"]
    generate_audio: bool = False
    image: bytes | None = None  # animate-image: the first frame
    reference_image: bytes | None = None  # generate-video: optional style reference
    reference_audio: bytes | None = None
    mode: str = "pro"
    model_name: str | None = None
    call_id: str = ""
    progress: ProgressFn = no_progress
    checkpoint: PredictionCheckpoint | None = None


@dataclass(frozen=True)
class MusicRequest:
    prompt: str
    duration_s: int  # 15..300
    lyrics: str | None = None
    instrumental: bool = False
    audio_format: Literal["mp3", "wav", "pcm"] = "mp3"
    sample_rate: int = 44100
    bitrate: int = 256000
    model_name: str | None = None
    call_id: str = ""
    progress: ProgressFn = no_progress


@dataclass(frozen=True)
class Model3dRequest:
    prompt: str | None = None  # exactly one of prompt and image
    image: bytes | None = None
    model_name: str | None = None
    call_id: str = ""
    progress: ProgressFn = no_progress
    checkpoint: PredictionCheckpoint | None = None


# The image operations a platform model does on one image.
ImageOperation = Literal["remove_background", "restore_face", "colorize_image", "estimate_depth"]


@dataclass(frozen=True)
class ImageOpRequest:
    operation: ImageOperation
    image: bytes
    # Operation options, by the service's names (restore_face: {"fidelity": 0.5}).
    options: Mapping[str, object] = field(default_factory=dict)
    model_name: str | None = None
    call_id: str = ""
    progress: ProgressFn = no_progress


@dataclass(frozen=True)
class ImageOpResult:
    files: tuple[MediaFile, ...]  # the model's image outputs, in its order (at least one)
    method: str  # what ran, in words, naming no platform


class VideoEngine(Protocol):
    async def generate_video(self, request: VideoRequest) -> MediaFile: ...


class MusicEngine(Protocol):
    async def generate_music(self, request: MusicRequest) -> MediaFile: ...


class Model3dEngine(Protocol):
    async def generate_model(self, request: Model3dRequest) -> MediaFile: ...


class ImageOpEngine(Protocol):
    async def process_image(self, request: ImageOpRequest) -> ImageOpResult: ...
