"""What the services of generated media share (video, animate-image, music, 3D models,
image operations on hosted models): decoding the caller's files off the event loop,
checking an output's duration against what was asked and billing its seconds, and
measuring images."""

from __future__ import annotations

import asyncio
import io
import math
from typing import Any, NamedTuple

from pydantic import BaseModel

from satsgate.domain.media import MediaError, audio_duration_s
from satsgate.engines import EngineError
from satsgate.engines.generation import SavedPrediction
from satsgate.errors import ErrorCode
from satsgate.files import StoredFile
from satsgate.services.base import JobState, ServiceContext
from satsgate.services.inputs.params import IMAGE_MAX_BYTES, decode_file


class JobCheckpoint:
    """A job's PredictionCheckpoint in its resume state (ServiceContext.job_state): the
    params the handler runs again with after a restart, and the prediction it waits for."""

    def __init__(self, state: JobState, params: BaseModel) -> None:
        self._state = state
        self._params = params

    async def load(self) -> SavedPrediction | None:
        saved: dict[str, Any] | None = await self._state.load()
        if not saved or not saved.get("prediction_id"):
            return None
        return SavedPrediction(
            str(saved["provider"]),
            str(saved["prediction_id"]),
            {str(k): str(v) for k, v in dict(saved.get("handle") or {}).items()},
        )

    async def save(self, prediction: SavedPrediction) -> None:
        await self._state.save(
            {
                "params": self._params.model_dump(mode="json"),
                "provider": prediction.provider,
                "prediction_id": prediction.prediction_id,
                "handle": dict(prediction.handle),
            }
        )


# An output is "far" from the asked duration outside [asked / 2 - 1 s, asked * 2 + 2 s]:
# platforms round to the lengths their model renders (5 or 10 s), never by half.
_SHORT_RATIO, _LONG_RATIO, _SLACK_S = 0.5, 2.0, 1.0


async def decoded(value: str, field: str, max_bytes: int = IMAGE_MAX_BYTES) -> bytes:
    """A caller's file (checked before payment), decoded off the event loop."""
    return await asyncio.to_thread(decode_file, value, field, max_bytes)


async def checked_duration(data: bytes, asked_s: float, what: str) -> float:
    """The output's duration in seconds; OUTPUT_DURATION_INSANE (refunded) when it is far
    from ``asked_s``, SERVICE_ERROR when it cannot be read."""
    try:
        seconds = await asyncio.to_thread(audio_duration_s, data)
    except MediaError as exc:
        raise EngineError(
            ErrorCode.SERVICE_ERROR, f"The generated {what} could not be read.", may_fall_back=False
        ) from exc
    low = asked_s * _SHORT_RATIO - _SLACK_S
    high = asked_s * _LONG_RATIO + 2 * _SLACK_S
    if not low <= seconds <= high:
        raise EngineError(
            ErrorCode.OUTPUT_DURATION_INSANE,
            f"The generated {what} lasts {seconds:.1f} s where {asked_s:g} s were asked; "
            "the payment is refunded.",
            may_fall_back=False,
            extra={"output_duration_seconds": round(seconds, 2)},
        )
    return seconds


def billed_seconds(asked_s: int, measured_s: float) -> int:
    """Seconds a per-second price charges: what was asked, or fewer when less came."""
    return max(1, min(asked_s, math.ceil(measured_s - 0.05)))


class TimedOutput(NamedTuple):
    """A generated track or clip as stored: its measured length, and the seconds billed."""

    stored: StoredFile
    seconds: float
    billed_s: int


async def stored_by_the_second(
    ctx: ServiceContext, data: bytes, ext: str, asked_s: int, what: str
) -> TimedOutput:
    """A per-second output checked against ``asked_s`` (checked_duration) before it is
    stored, and billed for the seconds it has (billed_seconds)."""
    seconds = await checked_duration(data, asked_s, what)
    stored = await ctx.files.save(data, ext)
    return TimedOutput(stored, seconds, billed_seconds(asked_s, seconds))


def image_size(data: bytes) -> tuple[int, int, str]:
    """Width, height and Pillow mode of an encoded image (run it in a thread)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return img.width, img.height, img.mode


def to_png(data: bytes) -> bytes:
    """An encoded image as PNG, alpha kept (run it in a thread)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        out = io.BytesIO()
        img.save(out, "PNG")
        return out.getvalue()


def depth_maps(data: bytes) -> tuple[bytes, bytes, int, int]:
    """From a model's depth output: a greyscale PNG (near is bright, as the models draw
    it) and a colour visualization of it (run it in a thread)."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as img:
        grey = img.convert("L")
        colour = ImageOps.colorize(grey, black="#0d0887", mid="#cc4778", white="#f0f921")
        raw, vis = io.BytesIO(), io.BytesIO()
        grey.save(raw, "PNG")
        colour.save(vis, "PNG")
        return raw.getvalue(), vis.getvalue(), grey.width, grey.height
