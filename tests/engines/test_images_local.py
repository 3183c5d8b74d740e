"""The local image engines end to end through the gate (402, dev-node payment, the paid
call), each checked on its output: NudeNet's verdict and what it saw, the faces found
where the photo has one, exact upscaled sizes, a sharper deblurred image, less noise,
an erased object. Refusals before any invoice (a query the cascades cannot serve, an
output past the pixel cap) and a refund when the work fails after payment.

The photos are scikit-image's, from its wheel: astronaut.png (Eileen Collins, NASA,
public domain), chelsea.png (Stefan van der Walt's cat, CC0) and coffee.png (Rachel
Michetti, CC0). No explicit material is made or shipped, so the positive NSFW case is
not tested: only that safe images are called normal, and that the model looked.
"""

from __future__ import annotations

import base64
import importlib.util
import io
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image, ImageDraw

from satsgate.engines.local import images as local_images
from satsgate.engines.local.image_ops import NSFW_THRESHOLD, sharpness
from satsgate.engines.local.image_ops import encode as encode_output
from satsgate.server.app import ENGINES
from tests.conftest import ThreadedServer, paid_l402_auth, skip_unless_ci
from tests.payments.test_gateway import assert_envelope, payment_count

U8 = NDArray[np.uint8]


def sample(name: str) -> bytes:
    """A photo scikit-image's wheel ships (read as a file: no skimage import)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        skip_unless_ci("scikit-image (test extra) is not installed")
        raise AssertionError("unreachable")
    return (Path(next(iter(spec.submodule_search_locations))) / "data" / name).read_bytes()


def encode(pixels: U8 | Image.Image, fmt: str = "PNG") -> str:
    img = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def rgb(data: bytes) -> U8:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.uint8)


def mse(a: U8, b: U8) -> float:
    return float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))


async def paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def paid_ok(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await paid(client, slug, body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def fetch_image(client: httpx.AsyncClient, result: dict[str, Any]) -> bytes:
    resp = await client.get(result["image_url"])
    assert resp.status_code == 200
    assert len(resp.content) == result["bytes"]
    with Image.open(io.BytesIO(resp.content)) as img:
        assert (img.width, img.height) == (result["width"], result["height"])
        assert img.format == result["format"].upper()
    return resp.content


def astronaut_crop() -> U8:
    """The astronaut's head and shoulders, 256x256."""
    return rgb(sample("astronaut.png"))[20:276, 100:356].copy()


# -- engines resolve locally -----------------------------------------------------------------


def test_the_local_image_engines_are_installed_and_labelled(server: ThreadedServer) -> None:
    engines = server.app[ENGINES]
    for name in ("detect_nsfw", "detect_objects", "upscale_image", "deblur_image", "remove_object"):
        status = engines.status(name)
        assert status.available and status.source == "local", (name, status)
    assert "not AI super-resolution" in engines.status("upscale_image").label
    assert "not open-set" in engines.status("detect_objects").label
    # Operations no local engine serves stay unavailable.
    assert not engines.status("remove_background").available


# -- detect-nsfw -----------------------------------------------------------------------------


async def test_detect_nsfw_calls_safe_images_normal(client: httpx.AsyncClient) -> None:
    landscape = Image.new("RGB", (480, 320), "skyblue")
    draw = ImageDraw.Draw(landscape)
    draw.rectangle((0, 220, 480, 320), fill="forestgreen")
    draw.ellipse((360, 30, 440, 110), fill="gold")
    result = await paid_ok(client, "detect-nsfw", {"imageBase64": encode(landscape)})
    assert result["label"] == "normal"
    assert result["nsfw_score"] < NSFW_THRESHOLD
    assert result["confidence"] == pytest.approx(1 - result["nsfw_score"], abs=1e-3)
    assert "NudeNet" in result["method"] and result["modelId"] == 38

    # A clothed person: normal, and the model did look (it finds her face).
    photo = await paid_ok(client, "detect-nsfw", {"imageBase64": encode(astronaut_crop())})
    assert photo["label"] == "normal" and photo["nsfw_score"] < 0.2
    faces = [d for d in photo["detections"] if d["label"] == "face_female"]
    assert faces and faces[0]["confidence"] > 0.5
    box = faces[0]["box"]  # her face is about x 77..172, y 46..141 in the crop
    assert 50 < box["x"] + box["width"] / 2 < 200 and 40 < box["y"] + box["height"] / 2 < 150


# -- detect-objects: faces -------------------------------------------------------------------


def iou(a: dict[str, int], b: tuple[int, int, int, int]) -> float:
    ax1, ay1, ax2, ay2 = a["x"], a["y"], a["x"] + a["width"], a["y"] + a["height"]
    bx1, by1, bx2, by2 = b[0], b[1], b[0] + b[2], b[1] + b[3]
    inter = max(0, min(ax2, bx2) - max(ax1, bx1)) * max(0, min(ay2, by2) - max(ay1, by1))
    return inter / ((ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter)


async def test_detect_objects_finds_the_face_and_eyes(client: httpx.AsyncClient) -> None:
    photo = base64.b64encode(sample("astronaut.png")).decode("ascii")
    result = await paid_ok(
        client, "detect-objects", {"imageBase64": photo, "prompt": "faces, eyes"}
    )
    assert (result["width"], result["height"]) == (512, 512)
    faces = [o for o in result["objects"] if o["label"] == "face"]
    eyes = [o for o in result["objects"] if o["label"] == "eye"]
    assert len(faces) == 1 and iou(faces[0]["box"], (177, 66, 95, 95)) > 0.7
    assert len(eyes) == 2 and result["count"] == 3
    for eye in eyes:  # inside the face, in its upper half
        box, face = eye["box"], faces[0]["box"]
        assert face["x"] <= box["x"] and box["x"] + box["width"] <= face["x"] + face["width"]
        assert face["y"] <= box["y"] < face["y"] + face["height"] / 2
    assert all(0 < o["confidence"] <= 1 for o in result["objects"])
    assert "Haar" in result["method"] and "not open-set" in result["method"]

    # A photo with no face: nothing found; a threshold above every score: nothing kept.
    cup = base64.b64encode(sample("coffee.png")).decode("ascii")
    empty = await paid_ok(client, "detect-objects", {"imageBase64": cup, "prompt": "face"})
    assert empty["objects"] == [] and empty["count"] == 0
    strict = await paid_ok(
        client, "detect-objects", {"imageBase64": photo, "prompt": "face", "threshold": 0.99}
    )
    assert strict["objects"] == []


async def test_detect_objects_finds_a_cat_face(client: httpx.AsyncClient) -> None:
    cat = base64.b64encode(sample("chelsea.png")).decode("ascii")
    result = await paid_ok(client, "detect-objects", {"image": cat, "labels": "a cat face"})
    assert [o["label"] for o in result["objects"]] == ["cat face"]
    assert iou(result["objects"][0]["box"], (270, 208, 64, 64)) > 0.6


async def test_detect_objects_refuses_open_set_queries_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    for prompt in ("cat", "face, red car", "person with umbrella"):
        resp = await client.post(
            "/api/l402/detect-objects",
            json={"imageBase64": encode(astronaut_crop()), "prompt": prompt},
        )
        body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert (
            "faces, eyes and cat faces" in body["error"] and "nothing was charged" in body["error"]
        )
        assert body["fields"][0]["field"] == "prompt"
        assert "WWW-Authenticate" not in resp.headers
    assert payment_count(server) == before


def test_queries_parse_to_cascade_labels() -> None:
    parse = local_images.parse_queries
    assert parse("Faces") == (("face",), [])
    assert parse("the faces and eyes") == (("face", "eye"), [])
    assert parse("face; cat face, face") == (("face", "cat face"), [])
    assert parse("face, red car or dog") == (("face",), ["red car", "dog"])
    assert parse(" , ") == ((), [])


# -- upscale-image ---------------------------------------------------------------------------


async def test_upscale_gives_the_exact_size_and_says_it_resampled(
    client: httpx.AsyncClient,
) -> None:
    rng = np.random.default_rng(7)
    small = rng.integers(0, 256, (23, 37, 3), dtype=np.uint8)
    result = await paid_ok(client, "upscale-image", {"imageBase64": encode(small), "scale": 3})
    assert (result["width"], result["height"], result["format"]) == (111, 69, "png")
    assert "Lanczos" in result["method"] and "not AI super-resolution" in result["method"]
    out = rgb(await fetch_image(client, result))
    # Resampled, not invented: where an output pixel's centre falls on an input pixel's
    # centre (every third, from the second), Lanczos gives that input pixel back.
    assert np.abs(out[1::3, 1::3].astype(int) - small).max() <= 2

    # A JPEG stays a JPEG; transparency survives.
    photo = encode(astronaut_crop(), "JPEG")
    jpeg = await paid_ok(client, "upscale-image", {"image": photo, "scale": 2})
    assert (jpeg["width"], jpeg["height"], jpeg["format"]) == (512, 512, "jpeg")
    await fetch_image(client, jpeg)
    # A photo stored sideways with an EXIF orientation comes out upright.
    stored = Image.new("RGB", (40, 20), "white")
    stored.paste((0, 0, 0), (0, 0, 10, 20))  # black on the stored left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    stored.save(buf, "JPEG", exif=exif.tobytes())
    sideways = base64.b64encode(buf.getvalue()).decode("ascii")
    upright = await paid_ok(client, "upscale-image", {"imageBase64": sideways, "scale": 2})
    assert (upright["width"], upright["height"]) == (40, 80)
    top = rgb(await fetch_image(client, upright))[:10].mean()
    assert top < 60  # the stored left edge is now the top
    clear = Image.new("RGBA", (20, 10), (255, 0, 0, 0))
    clear.paste((0, 0, 255, 255), (0, 0, 10, 10))
    alpha = await paid_ok(client, "upscale-image", {"imageBase64": encode(clear), "scale": 4})
    with Image.open(io.BytesIO(await fetch_image(client, alpha))) as img:
        assert img.mode == "RGBA" and img.getpixel((10, 20))[3] == 255  # type: ignore[index]
        assert img.getpixel((70, 20))[3] == 0  # type: ignore[index]


async def test_upscale_refuses_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    big = encode(Image.new("RGB", (2100, 2000), "white"))  # 4200 x 4000 at 2x: past the cap
    resp = await client.post("/api/l402/upscale-image", json={"imageBase64": big, "scale": 2})
    body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert "4096x4096" in body["error"]
    resp = await client.post(
        "/api/l402/upscale-image",
        json={"imageBase64": encode(astronaut_crop()), "face_enhance": True},
    )
    body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert body["fields"][0]["field"] == "face_enhance" and "Lanczos" in body["error"]
    assert payment_count(server) == before


def test_an_output_past_the_byte_cap_is_stored_lossy() -> None:
    noise = np.random.default_rng(5).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    data, fmt = encode_output(Image.fromarray(noise), "PNG")
    assert fmt == "png" and len(data) > 12_000  # noise hardly compresses
    data, fmt = encode_output(Image.fromarray(noise), "PNG", max_bytes=len(data) - 1)
    assert fmt == "jpeg" and data[:2] == b"\xff\xd8"
    with_alpha = Image.fromarray(np.dstack([noise, noise[:, :, 0]]), "RGBA")
    data, fmt = encode_output(with_alpha, "PNG", max_bytes=1000)
    assert fmt == "webp" and data[8:12] == b"WEBP"
    with Image.open(io.BytesIO(data)) as img:
        assert img.mode == "RGBA"


# -- deblur-image: deblur and denoise --------------------------------------------------------


def gray(pixels: U8) -> U8:
    return np.asarray(cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY), np.uint8)


async def test_deblur_sharpens_a_blurred_photo(client: httpx.AsyncClient) -> None:
    clean = astronaut_crop()
    blurred = np.asarray(cv2.GaussianBlur(clean, (0, 0), 2.0), np.uint8)
    result = await paid_ok(
        client, "deblur-image", {"imageBase64": encode(blurred), "mode": "deblur"}
    )
    assert "Wiener deconvolution" in result["method"]
    assert 1.5 < result["details"]["blur_sigma"] < 2.6  # the blur it measured
    out = rgb(await fetch_image(client, result))
    assert out.shape == clean.shape
    assert sharpness(gray(out)) > 4 * sharpness(gray(blurred))
    assert mse(out, clean) < 0.7 * mse(blurred, clean)  # closer to the original, too


async def test_denoise_lowers_the_noise(client: httpx.AsyncClient) -> None:
    clean = astronaut_crop()
    rng = np.random.default_rng(3)
    noisy = np.clip(clean + rng.normal(0, 20, clean.shape), 0, 255).astype(np.uint8)
    result = await paid_ok(
        client, "deblur-image", {"imageBase64": encode(noisy), "mode": "denoise"}
    )
    assert "non-local means" in result["method"] and "Wiener" not in result["method"]
    out = rgb(await fetch_image(client, result))
    assert mse(out, clean) < 0.5 * mse(noisy, clean)


async def test_deblur_refuses_a_bad_mode_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    resp = await client.post(
        "/api/l402/deblur-image", json={"imageBase64": encode(astronaut_crop()), "mode": "sharpen"}
    )
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    huge = encode(Image.new("RGB", (4097, 4096), "white"))  # one column past the cap
    resp = await client.post("/api/l402/deblur-image", json={"imageBase64": huge})
    body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert "4096x4096" in body["error"]
    assert payment_count(server) == before


# -- remove-object ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["telea", "ns"])
async def test_remove_object_erases_what_the_mask_marks(
    client: httpx.AsyncClient, method: str
) -> None:
    yy, xx = np.mgrid[0:160, 0:240]
    background = np.dstack([xx, yy, (xx + yy) // 2]).astype(np.uint8)  # smooth gradients
    scene = background.copy()
    scene[60:100, 90:140] = (255, 0, 0)  # the object: a red block
    mask = np.zeros((160, 240), np.uint8)
    mask[56:104, 86:144] = 255  # marks it, with a margin
    body = {"imageBase64": encode(scene), "maskBase64": encode(mask), "method": method}
    result = await paid_ok(client, "remove-object", body)
    assert result["details"]["erased_pixels"] == 48 * 58
    assert ("Telea" if method == "telea" else "Navier-Stokes") in result["method"]
    out = rgb(await fetch_image(client, result))
    region = (slice(56, 104), slice(86, 144))
    assert mse(out[region], background[region]) < 0.05 * mse(scene[region], background[region])
    outside = mask == 0
    assert np.array_equal(out[outside], scene[outside])  # the rest is untouched


# -- failure after payment -------------------------------------------------------------------


async def test_an_image_that_fails_after_payment_is_refunded(client: httpx.AsyncClient) -> None:
    whole = base64.b64decode(encode(astronaut_crop()))
    truncated = base64.b64encode(whole[: len(whole) // 2]).decode("ascii")  # header intact
    resp = await paid(client, "upscale-image", {"imageBase64": truncated})
    body = assert_envelope(resp, "INVALID_INPUT", resp.status_code)
    assert 400 <= resp.status_code < 500
    assert body["refund"]["amount_sats"] == 5
    assert body["refund"]["lnurl_withdraw"].lower().startswith("lnurl")
