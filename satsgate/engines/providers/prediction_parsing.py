"""What the prediction platforms' inputs and outputs are read as: a file's type by its
bytes, a data URI, the file URLs of an output, the boxes of a detection model's output,
the nearest common aspect ratio, and whether an upstream error is a content refusal."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from satsgate.engines.errors import EngineError
from satsgate.engines.image_process import Box, Detection
from satsgate.engines.refusals import said_by_model
from satsgate.errors import ErrorCode

# Words of an upstream error that mean the model or its safety filter refused the content.
_REFUSAL = re.compile(
    r"nsfw|safety|content[ _-]?polic|moderat|flagged|inappropriate|sensitive content"
    r"|violat|prohibited|not allowed content",
    re.IGNORECASE,
)

_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG", 0, "png"),
    (b"\xff\xd8\xff", 0, "jpeg"),
    (b"WEBP", 8, "webp"),
    (b"glTF", 0, "glb"),
    (b"WAVE", 8, "wav"),
    (b"OggS", 0, "ogg"),
    (b"ID3", 0, "mp3"),
    (b"fLaC", 0, "flac"),
    (b"GIF8", 0, "gif"),
)
_CONTENT_TYPE_EXT = {
    "image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp", "video/mp4": "mp4",
    "audio/mpeg": "mp3", "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
    "model/gltf-binary": "glb", "audio/ogg": "ogg", "audio/flac": "flac",
}  # fmt: skip


def sniff_ext(data: bytes, content_type: str = "", url: str = "") -> str:
    """The file extension of an output, by its bytes first, then its type or URL."""
    for magic, offset, ext in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return ext
    if data[4:8] == b"ftyp":
        return "m4a" if data[8:11] == b"M4A" else "mp4"
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        return "mp3"
    ext = _CONTENT_TYPE_EXT.get(content_type.split(";")[0].strip().lower(), "")
    if ext:
        return ext
    suffix = urlsplit(url).path.rsplit(".", 1)[-1].lower() if "." in url else ""
    return suffix if suffix.isalnum() and len(suffix) <= 5 else "bin"


def data_uri(data: bytes) -> str:
    ext = sniff_ext(data)
    kind = {
        "png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
        "wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "flac": "audio/flac",
        "m4a": "audio/mp4", "mp4": "video/mp4",
    }.get(ext, "application/octet-stream")  # fmt: skip
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def output_urls(output: Any) -> list[str]:
    """Every file URL in a model's output, in order (a string, a list, or nested objects
    whose values are URLs: {"video": {"url": ...}}, {"model_file": ...})."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if value.startswith(("https://", "http://", "data:")):
                found.append(value)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)

    walk(output)
    return found


def is_refusal(text: str) -> bool:
    return bool(_REFUSAL.search(text))


def refusal_error(said: object) -> EngineError:
    """A content refusal of the model; ``said``, the upstream's refusal text, is shown
    by the free-retry answer as model_said when it reads as words (trimmed, unnamed)."""
    shown = said_by_model(said)
    return EngineError(
        ErrorCode.CONTENT_FILTERED,
        "The model refused this request (content policy); rephrase it.",
        may_fall_back=False,
        extra=None if shown is None else {"model_said": shown},
    )


_RATIOS = ("1:1", "16:9", "9:16", "4:3", "3:4", "3:2", "2:3", "21:9", "9:21", "5:4", "4:5")


def nearest_ratio(width: int, height: int) -> str:
    """The common aspect ratio nearest to width:height (models that take a ratio)."""

    def value(ratio: str) -> float:
        w, h = ratio.split(":")
        return int(w) / int(h)

    return min(_RATIOS, key=lambda r: abs(value(r) - width / height))


_DETECTION_LISTS = ("detections", "objects", "predictions", "boxes", "results")
_LABEL_KEYS = ("label", "class", "class_name", "name", "phrase")
_SCORE_KEYS = ("confidence", "score", "prob", "probability")


def parse_detections(
    output: Any, width: int, height: int, threshold: float
) -> tuple[Detection, ...]:
    """The boxes of a detection model's output, in pixels of the input image, at least
    ``threshold`` confident, most confident first.

    The output is a list of detections or an object holding one (under ``detections``,
    ``objects``, ``predictions``, ``boxes`` or ``results``). A detection names its label
    (``label``, ``class``, ``name``, ``phrase``), its score (``confidence``, ``score``,
    ``prob``) and its box: ``bbox``/``box`` as ``[x1, y1, x2, y2]``, or an object with
    ``x1 y1 x2 y2``, ``xmin ymin xmax ymax`` or ``x y width height``. Coordinates all
    within 0..1 are taken as fractions of the image. Anything else is SERVICE_ERROR.
    """
    items: Any = output
    if isinstance(output, Mapping):
        items = next((output[k] for k in _DETECTION_LISTS if k in output), None)
    if not isinstance(items, list):
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            "The model answered no list of detections.",
            may_fall_back=False,
        )
    found: list[Detection] = []
    for item in items:
        try:
            detection = _detection(item, width, height)
        except (KeyError, TypeError, ValueError, StopIteration):
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The model answered a detection without a box.",
                may_fall_back=False,
            ) from None  # fmt: skip
        if detection is not None and detection.confidence >= threshold:
            found.append(detection)
    return tuple(sorted(found, key=lambda d: -d.confidence))


def _detection(item: Mapping[str, Any], width: int, height: int) -> Detection | None:
    label = str(next(item[k] for k in _LABEL_KEYS if k in item)).strip()
    score = float(next(item[k] for k in _SCORE_KEYS if k in item))
    raw = item.get("bbox", item.get("box", item))
    if isinstance(raw, list | tuple):
        x1, y1, x2, y2 = (float(v) for v in raw[:4])
    elif "x1" in raw:
        x1, y1, x2, y2 = (float(raw[k]) for k in ("x1", "y1", "x2", "y2"))
    elif "xmin" in raw:
        x1, y1, x2, y2 = (float(raw[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
    else:
        x1, y1 = float(raw["x"]), float(raw["y"])
        x2, y2 = x1 + float(raw["width"]), y1 + float(raw["height"])
    if max(abs(x1), abs(y1), abs(x2), abs(y2)) <= 1.0:  # fractions of the image
        x1, x2, y1, y2 = x1 * width, x2 * width, y1 * height, y2 * height
    left, right = sorted((max(0.0, min(x1, width)), max(0.0, min(x2, width))))
    top, bottom = sorted((max(0.0, min(y1, height)), max(0.0, min(y2, height))))
    if right - left < 1 or bottom - top < 1 or not label:
        return None  # nothing left inside the image
    box = Box(round(left), round(top), round(right - left), round(bottom - top))
    return Detection(label, max(0.0, min(1.0, score)), box)
