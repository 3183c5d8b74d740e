"""Paid work is bounded by what it stores: an output past its service's cap is not
stored and the call is refunded; an output whose size the input tells (an image
converted to an uncompressed format) is refused before any invoice."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from satsgate.config.settings import load_settings
from satsgate.files import DEFAULT_OUTPUT_CAPS, OutputCaps
from tests.conftest import (
    ThreadedServer,
    dev_pay,
    http_client,
    make_settings,
    serve_with_engines,
)
from tests.mcp_client import tool_result
from tests.payments.test_gateway import CARD, assert_envelope, payment_count


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(make_settings(tmp_path / "data", max_output_image_bytes=2000))
    yield srv
    srv.stop()


def stored_files(server: ThreadedServer) -> list[Path]:
    root = server.settings.files_dir  # less the instances' marks (satsgate.cluster.presence)
    return sorted(p for p in root.iterdir() if p.name != ".instances") if root.is_dir() else []


async def test_an_output_over_its_cap_is_not_stored_and_is_refunded(
    capped: ThreadedServer,
) -> None:
    async for client in http_client(capped):
        first = await client.post("/api/l402/render-card", json=CARD)
        assert first.status_code == 402
        preimage = await dev_pay(client, first.json()["invoice"])
        auth = f"L402 {first.json()['macaroon']}:{preimage}"
        resp = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
        )
        body = assert_envelope(resp, "INVALID_INPUT", 400)
        assert body["max_output_bytes"] == 2000 and body["output_bytes"] > 2000
        assert body["refund"]["amount_sats"] == first.json()["amountSats"]
        assert stored_files(capped) == []  # nothing past the cap reached the disk
        # The payment is answered by its refund, not served: the credential is used up.
        again = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
        )
        assert again.status_code != 200


def _flat_png(width: int, height: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG", optimize=True)
    assert out.tell() < 200_000  # a small upload: what it becomes is the question
    return base64.b64encode(out.getvalue()).decode()


async def test_an_image_to_an_uncompressed_format_is_refused_by_its_size_before_any_invoice(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    big = _flat_png(6000, 6000)  # as a BMP, 108 MB; as a TIFF, 144 MB
    before = payment_count(server)
    for target in ("bmp", "tiff"):
        resp = await client.post(
            "/api/l402/convert-file", json={"file": big, "targetFormat": target}
        )
        body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert f"{DEFAULT_OUTPUT_CAPS['image']:,}" in body["error"]
    assert payment_count(server) == before  # no invoice, no row
    # A compressed target of the same image is quoted; so is a small one as a BMP.
    ok = await client.post("/api/l402/convert-file", json={"file": big, "targetFormat": "png"})
    assert ok.status_code == 402, ok.text
    small = await client.post(
        "/api/l402/convert-file", json={"file": _flat_png(400, 300), "targetFormat": "bmp"}
    )
    assert small.status_code == 402, small.text


async def test_the_refusal_before_the_invoice_uses_the_configured_image_cap(
    capped: ThreadedServer,
) -> None:
    """An operator who lowers ``max_output_image_bytes`` gets the refusal before the
    invoice at that cap, not a refund after payment at the default one."""
    image = _flat_png(400, 300)  # as a BMP 360,000 bytes: under the default, over 2,000
    before = payment_count(capped)
    async for client in http_client(capped):
        for target in ("bmp", "tiff"):
            resp = await client.post(
                "/api/l402/convert-file", json={"file": image, "targetFormat": target}
            )
            body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
            assert "more than the 2,000 bytes" in body["error"]
            assert body["max_output_bytes"] == 2000 and body["output_bytes"] > 2000
            assert body["fields"][0]["field"] == "targetFormat"
        assert payment_count(capped) == before  # no invoice, no row
        arguments = {"toolName": "convert_file", "file": image, "targetFormat": "bmp"}
        refused = await tool_result(client, "create_payment", arguments)
        assert refused["isError"] is True, refused
        assert refused["structuredContent"]["error_code"] == "L402_INVALID_PARAMS", refused
        assert payment_count(capped) == before
        # A compressed target is quoted: its size is known only after the work.
        ok = await client.post(
            "/api/l402/convert-file", json={"file": image, "targetFormat": "png"}
        )
        assert ok.status_code == 402, ok.text


def test_caps_per_kind_and_per_service() -> None:
    caps = OutputCaps({**DEFAULT_OUTPUT_CAPS, "audio": 10}, {"convert-file": 5})
    assert caps.cap_for("render-card", "png") == DEFAULT_OUTPUT_CAPS["image"]
    assert caps.cap_for("speech", "mp3") == 10
    assert caps.cap_for("html-to-pdf", "pdf") == DEFAULT_OUTPUT_CAPS["document"]
    assert caps.cap_for("video", "mp4") == DEFAULT_OUTPUT_CAPS["video"]
    assert caps.cap_for("convert-file", "png") == 5  # the service's cap wins


def test_caps_come_from_the_environment_and_are_checked() -> None:
    env = {"SATSGATE_MAX_OUTPUT_IMAGE_BYTES": "1234", "SATSGATE_MAX_OUTPUT_VIDEO_BYTES": "99"}
    settings = load_settings(environ=env)
    assert settings.max_output_image_bytes == 1234
    assert settings.max_output_video_bytes == 99
    assert load_settings(environ={}).max_output_audio_bytes == DEFAULT_OUTPUT_CAPS["audio"]
    with pytest.raises(ValueError, match="max_output_document_bytes"):
        load_settings(environ={"SATSGATE_MAX_OUTPUT_DOCUMENT_BYTES": "0"})
    with pytest.raises(ValueError, match="output_caps_by_service"):
        load_settings(overrides={"output_caps_by_service": {"convert-file": -1}})


@pytest.fixture(scope="module")
def image_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    """A node whose image engines are configured (each one a provider that is down)."""
    yield from serve_with_engines(
        tmp_path_factory,
        "images",
        ["remove_background", "restore_face", "colorize_image", "estimate_depth"],
    )


@pytest.mark.parametrize(
    "slug",
    [
        "remove-background",
        "restore-face",
        "colorize-image",
        "estimate-depth",
        "deblur-image",
    ],
)
async def test_same_size_image_operations_bound_their_input_before_any_invoice(
    image_server: ThreadedServer, slug: str
) -> None:
    before = payment_count(image_server)
    async for client in http_client(image_server):
        big = {"imageBase64": _flat_png(4100, 4100)}
        resp = await client.post(f"/api/l402/{slug}", json=big)
        body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert "16,777,216 pixels" in body["error"]
        fits = await client.post(f"/api/l402/{slug}", json={"imageBase64": _flat_png(64, 64)})
        assert fits.status_code == 402, fits.text
    assert payment_count(image_server) == before + 1
