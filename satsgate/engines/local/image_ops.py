"""The local image operations themselves: CPU work that runs in the process-pool workers
(never on the event loop). Each public function takes and returns picklable values;
models and cascades are loaded once per worker, on first use.

What each one is, as its results say:

- ``classify_nsfw``: the NudeNet 320n detector (an ONNX model shipped in the ``nudenet``
  wheel) run with onnxruntime; an image is ``nsfw`` when it finds an exposed breast,
  genitalia, buttocks or anus with a score of at least NSFW_THRESHOLD.
- ``detect_haar``: OpenCV's Haar cascades shipped in ``opencv-python-headless``
  (frontal faces, eyes inside them, frontal cat faces): not open-set detection.
- ``upscale``: Lanczos resampling, not AI super-resolution.
- ``deblur``: non-local means denoising and/or Wiener deconvolution with a Gaussian blur
  whose width is estimated from the image's edges.
- ``inpaint``: OpenCV inpainting (Telea's fast marching or Navier-Stokes) of the caller's
  mask.

This module imports numpy, OpenCV and onnxruntime: only the workers import it.
"""

from __future__ import annotations

import functools
import io
import math
import warnings
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
from PIL import Image, ImageOps

from satsgate.engines.image_process import (
    Box,
    DeblurMode,
    Detection,
    DetectionResult,
    ImageFormat,
    ImageOutput,
    InpaintMethod,
    NsfwResult,
)
from satsgate.engines.local.image_support import ImageOpError, package_file

if TYPE_CHECKING:
    from numpy.typing import NDArray

    U8 = NDArray[np.uint8]
    F32 = NDArray[np.float32]

# An encoded output larger than this is stored lossy instead (JPEG, or WebP with alpha),
# so a small upload never becomes a huge stored file.
MAX_OUTPUT_BYTES = 24 * 1024 * 1024
JPEG_QUALITY = 92
FALLBACK_QUALITY = 90


# -- decoding and encoding -----------------------------------------------------------------


def _open(data: bytes, *, upright: bool = True) -> tuple[Image.Image, str]:
    """The first frame as RGB or RGBA (alpha kept), turned upright by its EXIF
    orientation unless ``upright`` is False; and the source format."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opened = Image.open(io.BytesIO(data))
            fmt = str(opened.format)
            opened.load()
            img: Image.Image = ImageOps.exif_transpose(opened) if upright else opened
    except Exception as exc:  # Pillow raises many types on malformed input
        raise ImageOpError("the image cannot be decoded") from exc
    alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        img.mode == "P" and "transparency" in img.info
    )
    return img.convert("RGBA" if alpha else "RGB"), fmt


def _split(img: Image.Image) -> tuple[U8, U8 | None]:
    """RGB pixels (H, W, 3) and the alpha plane, if any."""
    arr = np.asarray(img, dtype=np.uint8)
    if arr.shape[2] == 4:
        return np.ascontiguousarray(arr[:, :, :3]), np.ascontiguousarray(arr[:, :, 3])
    return arr, None


def _join(rgb: U8, alpha: U8 | None) -> Image.Image:
    if alpha is None:
        return Image.fromarray(rgb, "RGB")
    return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")


def encode(
    img: Image.Image, source_format: str, max_bytes: int = MAX_OUTPUT_BYTES
) -> tuple[bytes, ImageFormat]:
    """JPEG for a JPEG source (no alpha), else PNG; past ``max_bytes``, lossy (WebP with
    alpha, else JPEG)."""
    buf = io.BytesIO()
    if source_format == "JPEG" and img.mode == "RGB":
        img.save(buf, "JPEG", quality=JPEG_QUALITY)
        fmt: ImageFormat = "jpeg"
    else:
        img.save(buf, "PNG")
        fmt = "png"
    if buf.tell() <= max_bytes:
        return buf.getvalue(), fmt
    lossy = io.BytesIO()
    if img.mode == "RGBA" and max(img.size) <= 16383:  # WebP's largest side
        img.save(lossy, "WEBP", quality=FALLBACK_QUALITY)
        return lossy.getvalue(), "webp"
    img.convert("RGB").save(lossy, "JPEG", quality=FALLBACK_QUALITY)
    return lossy.getvalue(), "jpeg"


def _output(img: Image.Image, source_format: str, method: str, **details: object) -> ImageOutput:
    data, fmt = encode(img, source_format)
    return ImageOutput(data, fmt, img.width, img.height, method, details)


@functools.cache
def _threads() -> None:
    """One thread per worker: the pool runs one job per core already."""
    cv2.setNumThreads(1)


# -- NSFW: NudeNet ---------------------------------------------------------------------------

# The classes of NudeNet's 320n model, in its output order (nudenet 3.4).
NUDENET_LABELS = (
    "FEMALE_GENITALIA_COVERED", "FACE_FEMALE", "BUTTOCKS_EXPOSED", "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED", "MALE_BREAST_EXPOSED", "ANUS_EXPOSED", "FEET_EXPOSED",
    "BELLY_COVERED", "FEET_COVERED", "ARMPITS_COVERED", "ARMPITS_EXPOSED", "FACE_MALE",
    "BELLY_EXPOSED", "MALE_GENITALIA_EXPOSED", "ANUS_COVERED", "FEMALE_BREAST_COVERED",
    "BUTTOCKS_COVERED",
)  # fmt: skip
NSFW_LABELS = frozenset({
    "BUTTOCKS_EXPOSED", "FEMALE_BREAST_EXPOSED", "FEMALE_GENITALIA_EXPOSED",
    "ANUS_EXPOSED", "MALE_GENITALIA_EXPOSED",
})  # fmt: skip
NSFW_THRESHOLD = 0.5
_NSFW_INDEXES = np.array([i for i, name in enumerate(NUDENET_LABELS) if name in NSFW_LABELS])
_NUDENET_SIZE = 320
_DETECTION_MIN = 0.25
NSFW_METHOD = (
    "NudeNet 320n detector (onnxruntime): nsfw when it finds an exposed breast, genitalia, "
    f"buttocks or anus with a score of at least {NSFW_THRESHOLD}"
)


@functools.cache
def _nudenet() -> Any:
    import onnxruntime  # type: ignore[import-untyped]

    path = package_file("nudenet", "320n.onnx")  # the model the wheel ships
    if path is None:
        raise RuntimeError("the nudenet package and its model are not installed")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def classify_nsfw(data: bytes) -> NsfwResult:
    _threads()
    img, _ = _open(data)
    rgb, _alpha = _split(img)
    height, width = rgb.shape[:2]
    side = max(height, width)
    square = np.zeros((side, side, 3), np.uint8)  # padded right and below, as NudeNet does
    square[:height, :width] = rgb
    resized = cv2.resize(square, (_NUDENET_SIZE, _NUDENET_SIZE), interpolation=cv2.INTER_LINEAR)
    blob = (resized.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
    session = _nudenet()
    output = session.run(None, {session.get_inputs()[0].name: blob})[0]
    rows = np.asarray(output, np.float32)[0].T  # (candidates, 4 box + classes)
    scores = rows[:, 4:]
    if scores.shape[1] != len(NUDENET_LABELS):
        raise RuntimeError(f"unexpected NudeNet output shape {rows.shape}")
    nsfw_score = float(scores[:, _NSFW_INDEXES].max()) if len(scores) else 0.0
    best = scores.max(axis=1)
    keep = np.flatnonzero(best >= _DETECTION_MIN)
    scale = side / _NUDENET_SIZE
    boxes: list[list[int]] = []
    for i in keep:
        cx, cy, w, h = (float(v) * scale for v in rows[i, :4])
        x0, y0 = max(0.0, cx - w / 2), max(0.0, cy - h / 2)
        boxes.append([round(x0), round(y0), round(min(w, width - x0)), round(min(h, height - y0))])
    chosen = cv2.dnn.NMSBoxes(boxes, [float(best[i]) for i in keep], _DETECTION_MIN, 0.45)
    detections = tuple(
        Detection(
            NUDENET_LABELS[int(scores[keep[j]].argmax())].lower(),
            round(float(best[keep[j]]), 4),
            Box(*boxes[j]),
        )
        for j in sorted(
            (int(j) for j in np.asarray(chosen).reshape(-1)), key=lambda j: -float(best[keep[j]])
        )
    )
    nsfw = nsfw_score >= NSFW_THRESHOLD
    return NsfwResult(
        label="nsfw" if nsfw else "normal",
        confidence=round(nsfw_score if nsfw else 1.0 - nsfw_score, 4),
        nsfw_score=round(nsfw_score, 4),
        detections=detections[:50],
        method=NSFW_METHOD,
    )


# -- detection: Haar cascades ------------------------------------------------------------

# What the shipped cascades find, by the label a result carries: the cascade file, its
# scale step and how many overlapping hits a box needs (set on the astronaut and cat
# photos scikit-image ships; fewer hits find more and err more).
CASCADES: dict[str, tuple[str, float, int]] = {
    "face": ("haarcascade_frontalface_default.xml", 1.1, 4),
    # A face counts only where this second cascade agrees: on scikit-image's photos
    # (coins, gravel, a page, the cameraman) it removes nearly every false face.
    "face check": ("haarcascade_frontalface_alt2.xml", 1.1, 3),
    "eye": ("haarcascade_eye.xml", 1.1, 3),
    "cat face": ("haarcascade_frontalcatface.xml", 1.05, 2),
}
DETECT_MAX_SIDE = 1280  # larger images are searched on a copy scaled down to this
CONFIDENCE_NOTE = (
    "n/(n+8), n being how many overlapping cascade hits support the box: a ranking "
    "score, not a calibrated probability"
)


def _confidence(hits: int) -> float:
    return hits / (hits + 8)


@functools.cache
def _cascade(label: str) -> cv2.CascadeClassifier:
    path = package_file("cv2", "data", CASCADES[label][0])
    classifier = cv2.CascadeClassifier(str(path)) if path is not None else None
    if classifier is None or classifier.empty():
        raise RuntimeError(f"the OpenCV cascade for {label} is not installed")
    return classifier


def _find(gray: U8, label: str, min_size: int) -> list[tuple[int, int, int, int, int]]:
    """(x, y, w, h, supporting hits) of ``label`` in ``gray``."""
    _file, step, neighbours = CASCADES[label]
    rects, hits = _cascade(label).detectMultiScale2(
        gray, scaleFactor=step, minNeighbors=neighbours, minSize=(min_size, min_size)
    )
    return [
        (int(x), int(y), int(w), int(h), int(n))
        for (x, y, w, h), n in zip(rects, np.asarray(hits).reshape(-1), strict=True)
    ]


def _overlap(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Intersection over union of two (x, y, w, h) boxes."""
    ax, ay, aw, ah = a[:4]
    bx, by, bw, bh = b[:4]
    wide = max(0, min(ax + aw, bx + bw) - max(ax, bx))
    inter = wide * max(0, min(ay + ah, by + bh) - max(ay, by))
    return inter / float(aw * ah + bw * bh - inter)


def _faces(gray: U8) -> list[tuple[int, int, int, int, int]]:
    """Frontal faces two cascades agree on (boxes and hits of the first)."""
    checks = _find(gray, "face check", 24)
    return [f for f in _find(gray, "face", 24) if any(_overlap(f, c) > 0.4 for c in checks)]


def detect_haar(data: bytes, labels: tuple[str, ...], threshold: float) -> DetectionResult:
    _threads()
    img, _ = _open(data)
    width, height = img.size
    factor = min(1.0, DETECT_MAX_SIDE / max(width, height))
    small = (
        img
        if factor == 1.0
        else img.resize(
            (max(1, round(width * factor)), max(1, round(height * factor))), Image.Resampling.BOX
        )
    )
    gray = np.asarray(small.convert("L"), dtype=np.uint8)

    def scaled(x: float, y: float, w: float, h: float) -> Box:
        x0, y0 = round(x / factor), round(y / factor)
        return Box(x0, y0, min(round(w / factor), width - x0), min(round(h / factor), height - y0))

    found: list[Detection] = []
    faces = _faces(gray) if {"face", "eye"} & set(labels) else []
    if "face" in labels:
        found += [Detection("face", _confidence(n), scaled(x, y, w, h)) for x, y, w, h, n in faces]
    if "eye" in labels:  # eyes are looked for inside faces, where the cascade is reliable
        for fx, fy, fw, fh, _n in faces:
            roi = gray[fy : fy + fh * 2 // 3, fx : fx + fw]
            for x, y, w, h, n in _find(roi, "eye", max(8, fw // 10)):
                found.append(Detection("eye", _confidence(n), scaled(fx + x, fy + y, w, h)))
    if "cat face" in labels:
        found += [
            Detection("cat face", _confidence(n), scaled(x, y, w, h))
            for x, y, w, h, n in _find(gray, "cat face", 24)
        ]
    objects = tuple(
        Detection(d.label, round(d.confidence, 4), d.box)
        for d in sorted(found, key=lambda d: -d.confidence)
        if d.confidence >= threshold
    )
    return DetectionResult(
        objects,
        width,
        height,
        "OpenCV Haar cascades (" + ", ".join(labels) + "; a face where two frontal-face "
        "cascades agree, eyes inside faces); not open-set detection",
        CONFIDENCE_NOTE,
    )


# -- upscale: Lanczos ----------------------------------------------------------------------


def upscale(data: bytes, scale: int) -> ImageOutput:
    img, fmt = _open(data)
    out = img.resize((img.width * scale, img.height * scale), Image.Resampling.LANCZOS)
    return _output(out, fmt, f"Lanczos resampling ({scale}x); not AI super-resolution", scale=scale)


# -- deblur and denoise ------------------------------------------------------------------


def noise_sigma(gray: F32) -> float:
    """Standard deviation of white noise in a greyscale image (0..255), by Immerkær's
    fast estimate (a Laplacian-difference mask that cancels smooth structure)."""
    kernel = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], np.float32)
    response = cv2.filter2D(gray, cv2.CV_32F, kernel, borderType=cv2.BORDER_REFLECT)[1:-1, 1:-1]
    if response.size == 0:
        return 0.0
    return float(math.sqrt(math.pi / 2) * np.abs(response).mean() / 6.0)


def blur_sigma(gray: F32) -> float:
    """Width (Gaussian sigma, pixels) of the blur on the image's strongest edges, by
    re-blurring: an edge blurred by s, blurred again by r, loses gradient in the ratio
    sqrt(s^2 + r^2) / s (Zhuo and Sim's defocus estimate)."""
    reblur = 1.0
    gx, gy = cv2.Sobel(gray, cv2.CV_32F, 1, 0), cv2.Sobel(gray, cv2.CV_32F, 0, 1)
    again = cv2.GaussianBlur(gray, (0, 0), reblur)
    ax, ay = cv2.Sobel(again, cv2.CV_32F, 1, 0), cv2.Sobel(again, cv2.CV_32F, 0, 1)
    grad, grad_again = np.hypot(gx, gy), np.hypot(ax, ay)
    strong = grad >= max(float(np.percentile(grad, 99)), 8.0)
    if int(strong.sum()) < 16:
        return 0.0
    ratio = float(np.median(grad[strong] / np.maximum(grad_again[strong], 1e-3)))
    if ratio <= 1.02:
        return 6.0
    return float(reblur / math.sqrt(ratio * ratio - 1.0))


def _gaussian_otf(shape: tuple[int, int], sigma: float) -> F32:
    """The transfer function of a Gaussian blur on an rfft2 grid."""
    fy = np.fft.fftfreq(shape[0]).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(shape[1]).astype(np.float32)[None, :]
    return np.exp(-2.0 * (math.pi**2) * sigma * sigma * (fx * fx + fy * fy)).astype(np.float32)


def wiener_deconvolve(rgb: U8, sigma: float, nsr: float) -> U8:
    """Wiener deconvolution of a Gaussian blur of ``sigma`` pixels, channel by channel,
    on a mirror-padded copy (so the borders do not ring)."""
    pad = math.ceil(4 * sigma) + 16
    padded = cv2.copyMakeBorder(rgb, pad, pad, pad, pad, cv2.BORDER_REFLECT_101)
    otf = _gaussian_otf(padded.shape[:2], sigma)
    gain = (otf / (otf * otf + nsr)).astype(np.float32)
    out = np.empty_like(rgb)
    for c in range(rgb.shape[2]):
        spectrum = np.fft.rfft2(padded[:, :, c].astype(np.float32))
        restored = np.fft.irfft2(spectrum * gain, s=padded.shape[:2])
        out[:, :, c] = np.clip(restored[pad:-pad, pad:-pad] + 0.5, 0, 255).astype(np.uint8)
    return out


def sharpness(gray: U8 | F32) -> float:
    """Variance of the Laplacian: higher is sharper."""
    return float(cv2.Laplacian(np.asarray(gray, np.float32), cv2.CV_32F).var())


SHARP_SIGMA = 0.8
MIN_BLUR_SIGMA = 0.5
MAX_BLUR_SIGMA = 5.0


def deblur(data: bytes, mode: DeblurMode) -> ImageOutput:
    _threads()
    img, fmt = _open(data)
    rgb, alpha = _split(img)
    steps: list[str] = []
    details: dict[str, object] = {}
    sigma_noise = noise_sigma(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.float32))
    details["noise_sigma"] = round(sigma_noise, 2)
    if mode in ("both", "denoise") and sigma_noise >= 1.0:
        strength = float(np.clip(0.9 * sigma_noise, 3.0, 30.0))
        # 7x7 patches compared within 11x11: as good as OpenCV's 21x21 default on the
        # test photos (PSNR within 0.2 dB) at half the time.
        rgb = np.asarray(
            cv2.fastNlMeansDenoisingColored(rgb, None, strength, strength, 7, 11), np.uint8
        )
        steps.append(f"non-local means denoising (h {strength:.1f})")
        details["denoise_strength"] = round(strength, 2)
    if mode in ("both", "deblur"):
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.float32)
        measured = blur_sigma(gray)
        # A sharp photo measures about SHARP_SIGMA (its optics and sampling): only the
        # blur beyond that is undone.
        sigma = min(math.sqrt(max(measured**2 - SHARP_SIGMA**2, 0.0)), MAX_BLUR_SIGMA)
        details["blur_sigma"] = round(sigma, 2)
        residual = noise_sigma(gray) if steps else sigma_noise
        nsr = float(np.clip((residual / 255.0) ** 2 * 40.0, 0.002, 0.05))
        if sigma >= MIN_BLUR_SIGMA:
            rgb = wiener_deconvolve(rgb, sigma, nsr)
            steps.append(
                f"Wiener deconvolution of an estimated Gaussian blur (sigma {sigma:.2f} px)"
            )
        else:
            steps.append("no deconvolution: the image showed no blur to undo")
    if mode == "denoise" and len(steps) == 0:
        steps.append("nothing: the image showed no noise to remove")
    return _output(_join(rgb, alpha), fmt, "; ".join(steps), **details)


# -- inpainting ----------------------------------------------------------------------------

INPAINT_RADIUS = 5


def inpaint(data: bytes, mask_data: bytes, method: InpaintMethod) -> ImageOutput:
    _threads()
    img, fmt = _open(data, upright=False)  # the mask is drawn on the stored pixels
    mask_img, _ = _open(mask_data, upright=False)
    if mask_img.size != img.size:
        raise ImageOpError(f"the mask is {mask_img.size}, the image {img.size}")
    rgb, alpha = _split(img)
    mask = (np.asarray(mask_img.convert("L"), np.uint8) > 127).astype(np.uint8) * 255
    erased = int(np.count_nonzero(mask))
    flag = cv2.INPAINT_TELEA if method == "telea" else cv2.INPAINT_NS
    if erased:
        rgb = np.asarray(cv2.inpaint(rgb, mask, INPAINT_RADIUS, flag), np.uint8)
    name = "Telea's fast marching" if method == "telea" else "Navier-Stokes"
    return _output(
        _join(rgb, alpha),
        fmt,
        f"OpenCV inpainting ({name}, radius {INPAINT_RADIUS} px)",
        erased_pixels=erased,
    )
