"""Local image engines: NudeNet for detect-nsfw, OpenCV for faces (the offline subset of
detect-objects), Lanczos upscaling, deblurring and denoising, and inpainting.

Each result says what ran (``method``). The work itself is in ``image_ops`` (numpy,
OpenCV, onnxruntime), which only the process-pool workers import: this module stays light
for the server, and probes by looking for files, never by loading a model.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
from collections.abc import Callable
from typing import Any

from satsgate.engines.errors import EngineError
from satsgate.engines.image_process import (
    DeblurMode,
    DetectionQuery,
    DetectionResult,
    ImageOutput,
    InpaintMethod,
    NsfwResult,
    UpscaleOptions,
)
from satsgate.engines.local.image_support import ImageOpError, package_file
from satsgate.engines.registry import EngineDeps, LocalEngine
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

# Model ids (the spec's, one per operation) each local engine stands in for. The result's
# ``method`` says what really ran in the model's place.
MODEL_UPSCALE, MODEL_NSFW, MODEL_DETECT, MODEL_ERASE, MODEL_DEBLUR = 36, 38, 39, 40, 42


def run_op(name: str, *args: Any) -> Any:
    """In a pool worker: ``image_ops.<name>(*args)`` (importing it there, once)."""
    ops = importlib.import_module("satsgate.engines.local.image_ops")
    return getattr(ops, name)(*args)


async def _run(deps: EngineDeps, name: str, *args: Any) -> Any:
    try:
        return await deps.run_cpu(run_op, name, *args)
    except EngineError:  # TIMEOUT past the CPU time limit
        raise
    except ImageOpError as exc:
        raise EngineError(ErrorCode.INVALID_INPUT, str(exc)) from None
    except Exception as exc:  # OpenCV or onnxruntime failed on this input
        log.exception("local image operation %s failed", name)
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The image operation failed on this input."
        ) from exc


# -- probes ----------------------------------------------------------------------------------


def _needs(*modules: str) -> str:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed (pip)" if missing else ""


def probe_opencv() -> str:
    return _needs("cv2", "numpy")


def probe_cascades() -> str:
    missing = probe_opencv()
    if missing:
        return missing
    if package_file("cv2", "data", "haarcascade_frontalface_default.xml") is None:
        return "OpenCV's Haar cascades are missing (opencv-python-headless 4.x ships them)"
    return ""


def probe_nudenet() -> str:
    missing = _needs("onnxruntime", "cv2", "numpy")
    if missing:
        return missing
    if package_file("nudenet", "320n.onnx") is None:
        return "nudenet (with its 320n.onnx model) not installed (pip)"
    return ""


# -- detect-objects: what the cascades know ------------------------------------------------

# Query words -> the label a cascade finds. Anything else is refused before any invoice.
FACE_QUERIES: dict[str, str] = {
    **dict.fromkeys(
        ("face", "faces", "human face", "human faces", "person's face", "people's faces",
         "frontal face", "frontal faces"), "face"),
    **dict.fromkeys(("eye", "eyes", "human eye", "human eyes"), "eye"),
    **dict.fromkeys(("cat face", "cat faces", "cat's face", "cats' faces", "face of a cat"),
                    "cat face"),
}  # fmt: skip
_SPLIT = re.compile(r"\s*(?:[,;|\n]|\band\b|\bor\b)\s*", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:a|an|the|all|any|every)\s+", re.IGNORECASE)
DETECT_LABEL = "OpenCV Haar cascades: faces, eyes, cat faces (not open-set)"


def parse_queries(prompt: str) -> tuple[tuple[str, ...], list[str]]:
    """The cascade labels the prompt asks for (in order, once each) and the terms no
    cascade serves."""
    labels: list[str] = []
    unknown: list[str] = []
    for raw in _SPLIT.split(prompt):
        term = _ARTICLE.sub("", " ".join(raw.strip(" .!?\"'").lower().split()))
        if not term:
            continue
        label = FACE_QUERIES.get(term)
        if label is None:
            unknown.append(term)
        elif label not in labels:
            labels.append(label)
    return tuple(labels), unknown


# -- engines ---------------------------------------------------------------------------------


class NudeNetNsfw:
    def __init__(self, deps: EngineDeps) -> None:
        self._deps = deps

    async def classify(self, image: bytes, *, model: str | None = None) -> NsfwResult:
        result: NsfwResult = await _run(self._deps, "classify_nsfw", image)
        return result


class HaarDetector:
    """The offline subset of detect-objects: faces, eyes and cat faces."""

    def __init__(self, deps: EngineDeps) -> None:
        self._deps = deps

    def unsupported(self, request: DetectionQuery) -> str | None:
        prompt = request.prompt
        labels, unknown = parse_queries(prompt)
        if unknown or not labels:
            shown = [t if len(t) <= 40 else t[:37] + "..." for t in unknown[:3]]
            asked = ", ".join(repr(t) for t in shown) + (", ..." if len(unknown) > 3 else "")
            asked = asked or repr(prompt.strip()[:40])
            return (
                f"this node detects only faces, eyes and cat faces (OpenCV cascades), not "
                f"{asked}; ask for e.g. prompt 'face'"
            )
        return None

    async def detect(
        self, image: bytes, prompt: str, threshold: float, *, model: str | None = None
    ) -> DetectionResult:
        reason = self.unsupported(DetectionQuery(prompt))
        if reason is not None:  # reached only if the check before payment was skipped
            raise EngineError(ErrorCode.INVALID_INPUT, reason, may_fall_back=True)
        labels, _ = parse_queries(prompt)
        result: DetectionResult = await _run(self._deps, "detect_haar", image, labels, threshold)
        return result


class LanczosUpscaler:
    def __init__(self, deps: EngineDeps) -> None:
        self._deps = deps

    def unsupported(self, request: UpscaleOptions) -> str | None:
        if request.face_enhance:
            return (
                "face_enhance is not offered on this node: its upscaler is Lanczos "
                "resampling, with no face restoration; send face_enhance false"
            )
        return None

    async def upscale(
        self, image: bytes, scale: int, face_enhance: bool, *, model: str | None = None
    ) -> ImageOutput:
        reason = self.unsupported(UpscaleOptions(scale, face_enhance))
        if reason is not None:
            raise EngineError(ErrorCode.INVALID_INPUT, reason, may_fall_back=True)
        result: ImageOutput = await _run(self._deps, "upscale", image, scale)
        return result


class OpenCvDeblur:
    def __init__(self, deps: EngineDeps) -> None:
        self._deps = deps

    async def deblur(
        self, image: bytes, mode: DeblurMode, *, model: str | None = None
    ) -> ImageOutput:
        result: ImageOutput = await _run(self._deps, "deblur", image, mode)
        return result


class OpenCvInpaint:
    def __init__(self, deps: EngineDeps) -> None:
        self._deps = deps

    async def erase(
        self, image: bytes, mask: bytes, method: InpaintMethod, *, model: str | None = None
    ) -> ImageOutput:
        result: ImageOutput = await _run(self._deps, "inpaint", image, mask, method)
        return result


def _local(
    engine: str,
    label: str,
    probe: Callable[[], str],
    cls: Callable[[EngineDeps], object],
    model: int,
) -> LocalEngine:
    return LocalEngine(engine, label, probe, cls, models=frozenset({model}))


LOCAL_IMAGE_ENGINES: tuple[LocalEngine, ...] = (
    _local("detect_nsfw", "NudeNet 320n detector (onnxruntime)", probe_nudenet, NudeNetNsfw,
           MODEL_NSFW),
    _local("detect_objects", DETECT_LABEL, probe_cascades, HaarDetector, MODEL_DETECT),
    _local("upscale_image", "Lanczos resampling (not AI super-resolution)", probe_opencv,
           LanczosUpscaler, MODEL_UPSCALE),
    _local("deblur_image", "OpenCV non-local means denoising and Wiener deconvolution",
           probe_opencv, OpenCvDeblur, MODEL_DEBLUR),
    _local("remove_object", "OpenCV inpainting (Telea or Navier-Stokes)", probe_opencv,
           OpenCvInpaint, MODEL_ERASE),
)  # fmt: skip
