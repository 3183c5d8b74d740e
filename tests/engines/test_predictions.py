"""Video, music, 3D models and image operations on prediction platforms (Replicate, fal),
through the gate on a real server, against loopback fakes that speak the platforms' wire
(tests/fakes/fake_platforms.py): jobs ended by polling and by signed webhooks (forged ones
refused), failures, refusals, upstream cancellation, timeouts, 429 and 5xx answers, the
outputs copied into satsgate's own file store, and the refund after every failure."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from satsgate.config.settings import Settings
from satsgate.domain.media import audio_duration_s
from satsgate.engines import CpuRunner, EngineConfigError, EngineDeps, EngineError, ProviderConfig
from satsgate.engines.generation import MusicRequest, SavedPrediction, VideoRequest
from satsgate.engines.image_generation import ImageEditRequest, ImageGenerationRequest
from satsgate.engines.providers import PROVIDER_KINDS, fal, replicate
from satsgate.engines.providers.prediction_parsing import data_uri
from satsgate.engines.providers.replicate import sign, verify_signature
from tests.conftest import (
    ThreadedServer,
    free_port,
    http_client,
    make_settings,
    paid_l402_auth,
    until,
)
from tests.fakes.fake_platforms import (
    API_KEY,
    FAL_KEY,
    FakeFal,
    FakeReplicate,
    Script,
    glb,
    mp4,
    png,
    wav,
)
from tests.payments.test_gateway import assert_envelope
from tests.pg_cluster import PgCluster
from tests.store_access import store_rows, store_value

POLL = 0.05


@pytest.fixture(scope="module")
def platforms() -> Iterator[tuple[FakeReplicate, FakeFal]]:
    rep, falq = FakeReplicate(), FakeFal()
    yield rep, falq
    rep.stop()
    falq.stop()


def platform_settings(
    data_dir: Path,
    platforms: tuple[FakeReplicate, FakeFal],
    webhook_poll_interval_s: float = POLL,
    **overrides: Any,
) -> Settings:
    rep, falq = platforms
    common = {
        "poll_interval_s": POLL,
        "webhook_poll_interval_s": webhook_poll_interval_s,
        "max_wait_s": 20,
    }
    providers = {
        "rep": {"kind": "replicate", "base_url": rep.url, "api_key": API_KEY,
                "models": dict(replicate.DEFAULT_MODELS), **common,
                # the operator's renames and fixed inputs for one model
                "input_names": {"allenhooo/lama": {"mask": "mask_image"}},
                "input_values": {"allenhooo/lama": {"dilate": 4}}},
        "rep_url": {"kind": "replicate", "base_url": rep.url, "api_key": API_KEY,
                    "models": {"37": "sczhou/codeformer"}, **common, "input_files": "url"},
        "rep_short": {"kind": "replicate", "base_url": rep.url, "api_key": API_KEY,
                      "models": {"17": "firtoz/trellis"}, **common, "max_wait_s": 0.6},
        "falq": {"kind": "fal", "base_url": falq.url, "api_key": FAL_KEY,
                 "models": dict(fal.DEFAULT_MODELS), "jwks_url": falq.jwks_url, **common},
    }  # fmt: skip
    engines = {
        "video": "rep", "3d": "rep_short", "remove_background": "rep", "restore_face": "rep_url",
        "colorize_image": "rep", "estimate_depth": "rep", "upscale_image": "rep",
        "music": "falq", "deblur_image": "rep", "remove_object": "rep", "image": "rep",
        "image_edit": "rep", "detect_objects": "rep",
    }  # fmt: skip
    return make_settings(data_dir, providers=providers, engines=engines, **overrides)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, platforms: tuple[FakeReplicate, FakeFal]
) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(platform_settings(tmp_path_factory.mktemp("predictions"), platforms))
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(server):
        yield c


def image_b64(mode: str = "RGB") -> str:
    return base64.b64encode(png(mode)).decode()


async def paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def run_job(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> dict[str, Any]:
    """Pay, get the 202, poll to the end; the final poll body (progress seen on the way
    is under "_progress")."""
    resp = await paid(client, slug, body)
    assert resp.status_code == 202, resp.text
    url = resp.json()["poll_url"]
    seen: list[float] = []
    for _ in range(400):
        state = (await client.get(url)).json()
        if state["status"] != "IN_PROGRESS":
            state["_progress"] = seen
            return dict(state)
        if "progress" in state:
            seen.append(state["progress"]["progress"])
        await asyncio.sleep(0.02)
    raise AssertionError("the job never ended")


async def fetch(client: httpx.AsyncClient, url: str, server: ThreadedServer) -> bytes:
    assert url.startswith(server.url + "/api/files/"), url
    resp = await client.get(url)
    assert resp.status_code == 200
    return resp.content


def no_platform_url(body: dict[str, Any], *platforms: FakeReplicate | FakeFal) -> None:
    text = json.dumps(body)
    for platform in platforms:
        assert platform.url not in text


# -- jobs: generate-video, animate-image, generate-3d-model (Replicate) ----------------------


async def test_video_succeeds_by_polling_and_is_served_from_satsgate(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    # The model renders 6 s where 5 are asked: the clip is sane, charged as asked.
    rep.script = Script(outputs=lambda: [mp4(6.0)], starting_polls=2, processing_polls=3)
    done = await run_job(client, "generate-video", {"prompt": "waves at dusk", "duration": 5})
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    video = await fetch(client, result["videoUrl"], server)
    assert audio_duration_s(video) == pytest.approx(6.0)
    assert result["durationSeconds"] == pytest.approx(6.0) and result["format"] == "mp4"
    assert result["billing"] == {"seconds": 5, "sats": 1250}
    no_platform_url(done, *platforms)
    rec = rep.last()
    assert rec.model == "minimax/hailuo-02" and not rec.ended_by_webhook
    assert rec.input == {"prompt": "waves at dusk", "duration": 6, "resolution": "768p"}
    assert rec.polls >= 6  # starting (2), processing (3), then succeeded
    assert rec.webhook is not None and rec.webhook.endswith("/api/webhooks/replicate/rep")
    assert done["_progress"] and max(done["_progress"]) >= 1


async def test_animation_ends_by_webhook_and_a_forged_webhook_is_refused(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.webhook_answers.clear()
    rep.script = Script(outputs=lambda: [mp4(6.0)], by_webhook=True, forged_webhook=True)
    body = {"prompt": "the cat turns its head", "image": image_b64(), "duration": 6}
    done = await run_job(client, "animate-image", body)
    assert done["status"] == "COMPLETED", done
    rec = rep.last()
    assert rec.ended_by_webhook
    await until(lambda: len(rep.webhook_answers) == 2)
    assert rep.webhook_answers == [401, 200]  # the forgery first, then the real one
    assert rec.input["first_frame_image"].startswith("data:image/png;base64,")
    video = await fetch(client, done["result"]["videoUrl"], server)
    assert audio_duration_s(video) == pytest.approx(6.0)  # the genuine output, not the forged


async def test_a_webhook_that_comes_before_the_create_answer_ends_the_job(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(outputs=lambda: [mp4(6.0)], early_webhook=True)
    done = await run_job(client, "generate-video", {"prompt": "a quick one", "duration": 5})
    assert done["status"] == "COMPLETED", done
    assert rep.last().ended_by_webhook and rep.last().status == "succeeded"


@pytest.mark.parametrize(
    "script",
    [
        Script(outputs=lambda: [mp4(6.0)], by_webhook=True),
        # The end's webhook reaches B, and B's announcement reaches A, before A has the
        # create call's answer: A's run asks as soon as it starts waiting.
        Script(
            outputs=lambda: [mp4(6.0)],
            early_webhook=True,
            polls_lag=False,
            answer_after_webhook_s=0.5,
        ),
    ],
    ids=["while-the-run-waits", "before-the-create-answer"],
)
async def test_a_webhook_heard_by_another_instance_ends_the_run_where_it_waits(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal], pg_cluster: PgCluster, script: Script
) -> None:
    """Two instances on one PostgreSQL store, a run polling a webhook-backed prediction
    once a minute: A runs the job, the platform's webhook reaches B (the load balancer's
    choice). B announces it, and A's run asks the platform at once and ends."""
    rep, _ = platforms
    store_url = pg_cluster.new_database()
    data = tmp_path / "data"  # one data directory (server secret, files) for both
    a = ThreadedServer(platform_settings(data, platforms, 60.0, store_url=store_url))
    b = ThreadedServer(platform_settings(data, platforms, 60.0, store_url=store_url))
    rep.webhook_answers.clear()
    rep.webhook_origin = b.url
    rep.script = script
    try:
        async with httpx.AsyncClient(base_url=a.url, timeout=30) as client:
            started = time.monotonic()
            done = await run_job(client, "generate-video", {"prompt": "fog", "duration": 5})
            took = time.monotonic() - started
        assert done["status"] == "COMPLETED", done
        assert took < 10, took  # not the minute's poll
        assert rep.last().ended_by_webhook
        assert rep.webhook_answers == [200]  # answered by B
    finally:
        rep.webhook_origin = None
        a.stop()
        b.stop()


async def test_an_instance_that_made_no_prediction_reads_the_key_to_verify_a_webhook(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    """The signing secret is read when a process first asks for a webhook; a webhook about
    another instance's prediction can come before that. Forgeries make one read, not one
    a try; the genuine webhook after them verifies."""
    rep, _ = platforms
    srv = ThreadedServer(platform_settings(tmp_path / "fresh", platforms))
    doc = {"id": "p-elsewhere", "status": "succeeded", "output": f"{rep.url}/files/x"}
    reads = rep.secret_reads
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            for _ in range(3):
                body, headers = rep.signed(doc, key=b"not the account's secret key!!")
                resp = await client.post(
                    "/api/webhooks/replicate/rep", content=body, headers=headers
                )
                assert resp.status_code == 401
            assert rep.secret_reads == reads + 1
            body, headers = rep.signed(doc)
            resp = await client.post("/api/webhooks/replicate/rep", content=body, headers=headers)
            assert resp.status_code == 200
            assert rep.secret_reads == reads + 1
    finally:
        srv.stop()


async def test_a_shorter_clip_is_charged_for_its_seconds(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(outputs=lambda: [mp4(6.0)], starting_polls=0, processing_polls=0)
    done = await run_job(client, "generate-video", {"prompt": "a slow pan", "duration": 10})
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    assert result["billing"] == {"seconds": 6, "sats": 1500}
    assert result["partial_refund"]["amount_sats"] == 1000  # 4 of the 10 paid seconds


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (Script(outcome="failed", error="CUDA out of memory"), "SERVICE_ERROR"),
        (Script(outcome="canceled"), "SERVICE_ERROR"),
        (Script(outputs=lambda: [mp4(1.0)]), "OUTPUT_DURATION_INSANE"),
        (Script(outputs=lambda: [png()]), "SERVICE_ERROR"),  # no video at all
    ],
    ids=["failed", "canceled-upstream", "duration-insane", "not-a-video"],
)
async def test_a_failed_video_job_is_refunded(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal], script: Script, code: str
) -> None:
    # (A content refusal keeps the payment for a free retry: tests/jobs/test_job_rework.py.)
    rep, _ = platforms
    rep.script = script
    done = await run_job(client, "generate-video", {"prompt": "a storm", "duration": 8})
    assert done["status"] == "FAILED", done
    assert done["error_code"] == code
    assert done["refund"]["amount_sats"] == 2000
    if code == "OUTPUT_DURATION_INSANE":
        assert done["output_duration_seconds"] == 1.0
    assert "replicate" not in done["error"].lower()
    no_platform_url(done, *platforms)


async def test_polling_rides_out_429_and_5xx(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(outputs=lambda: [mp4(5.0)], poll_errors=[429, 503, 500, 429])
    done = await run_job(client, "generate-video", {"prompt": "rain", "duration": 5})
    assert done["status"] == "COMPLETED", done
    assert rep.last().script.poll_errors == []  # all four were answered and survived


async def test_3d_model_from_a_photo_and_the_timeout_cancels_upstream(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(outputs=lambda: [png(), glb()])  # a preview, then the model
    done = await run_job(client, "generate-3d-model", {"imageBase64": image_b64()})
    assert done["status"] == "COMPLETED", done
    model = await fetch(client, done["result"]["modelUrl"], server)
    assert model[:4] == b"glTF" and json.loads(model[20:].decode().strip())["asset"]
    assert isinstance(rep.last().input["images"], list)  # trellis takes a list of views

    rep.script = Script(outcome="never")
    done = await run_job(client, "generate-3d-model", {"prompt": "a wooden chair"})
    assert done["status"] == "FAILED", done
    assert done["error_code"] == "TIMEOUT"
    assert done["refund"]["amount_sats"] == 1600
    assert rep.last().canceled_by_client  # not paid for upstream any longer


async def test_a_restart_takes_up_the_running_prediction_instead_of_running_it_twice(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    settings = platform_settings(tmp_path / "data", platforms)
    rep.script = Script(outcome="never")
    before = set(rep.records)
    first = ThreadedServer(settings)
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as client:
            resp = await paid(client, "generate-video", {"prompt": "a long take", "duration": 5})
            assert resp.status_code == 202, resp.text
            job_id = resp.json()["job_id"]
            await until(lambda: set(rep.records) - before and rep.last().polls >= 2)
        rec = rep.last()
        made = len(rep.records)
    finally:
        first.stop()
    # Shutdown left the job running, unrefunded, with what resumes it.
    ((status, state),) = store_rows(
        settings, "SELECT status, resume_json FROM jobs WHERE job_id = ?", job_id
    )
    assert status == "IN_PROGRESS" and store_value(settings, "SELECT COUNT(*) FROM refunds") == 0
    assert json.loads(state)["prediction_id"] == rec.id
    assert not rec.canceled_by_client  # the prediction went on upstream
    rec.script = Script(outputs=lambda: [mp4(5.0)], starting_polls=0, processing_polls=0)

    second = ThreadedServer(settings)
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=30) as client:
            url = f"/api/l402/job-status?requestId={job_id}"
            for _ in range(300):
                done = (await client.get(url)).json()
                if done["status"] != "IN_PROGRESS":
                    break
                await asyncio.sleep(0.02)
            assert done["status"] == "COMPLETED", done
            video = await fetch(client, done["result"]["videoUrl"], second)
            assert audio_duration_s(video) == pytest.approx(5.0)
    finally:
        second.stop()
    assert len(rep.records) == made  # waited for, never made a second time
    assert store_value(settings, "SELECT COUNT(*) FROM refunds") == 0


# -- sync image operations (Replicate, Prefer: wait) --------------------------------------


async def test_remove_background_gives_a_transparent_png(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(sync=True, outputs=lambda: [png("RGBA")])
    resp = await paid(client, "remove-background", {"imageBase64": image_b64()})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    with Image.open(io.BytesIO(await fetch(client, body["image_url"], server))) as img:
        assert img.format == "PNG" and img.mode == "RGBA"
        alpha = img.getchannel("A")
        assert alpha.getpixel((0, 0)) == 255 and alpha.getpixel((47, 0)) == 0
    assert rep.prefer[-1] == "wait=10" and rep.last().polls == 0  # done within the create
    no_platform_url(body, *platforms)


async def test_open_set_detection_finds_what_the_prompt_names(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    boxes = [
        {"bbox": [4, 2, 20, 30], "label": "cat", "confidence": 0.91},
        {"bbox": [0.5, 0.25, 1.0, 0.75], "label": "red car", "confidence": 0.55},  # fractions
        {"box": {"x": 1, "y": 1, "width": 3, "height": 3}, "label": "cat", "confidence": 0.1},
        {"box": {"xmin": 40, "ymin": 20, "xmax": 60, "ymax": 40}, "score": 0.4, "class": "cat"},
    ]
    rep.script = Script(sync=True, json_output={"detections": boxes, "result_image": None})
    body = {"imageBase64": image_b64(), "prompt": "cat, red car", "threshold": 0.3}
    resp = await paid(client, "detect-objects", body)  # the local engine finds faces only
    assert resp.status_code == 200, resp.text
    found = resp.json()
    labels = [o["label"] for o in found["objects"]]
    assert found["count"] == 3 and labels == ["cat", "red car", "cat"]  # most confident first
    assert found["untrusted_output"] is True  # the labels are the model's words
    assert found["objects"][0]["box"] == {"x": 4, "y": 2, "width": 16, "height": 28}
    # 0.5..1.0 of a 48 px wide image, 0.25..0.75 of 32 px.
    assert found["objects"][1]["box"] == {"x": 24, "y": 8, "width": 24, "height": 16}
    # Past the image's edge: clipped to it.
    assert found["objects"][2]["box"] == {"x": 40, "y": 20, "width": 8, "height": 12}
    assert (found["width"], found["height"]) == (48, 32)
    sent = rep.last().input
    assert sent["query"] == "cat, red car" and sent["box_threshold"] == 0.3
    assert rep.last().model == "adirik/grounding-dino"
    # An output with no detections list: refunded.
    rep.script = Script(sync=True, json_output={"image": "https://x.example/a.png"})
    resp = await paid(client, "detect-objects", body)
    assert assert_envelope(resp, "SERVICE_ERROR", 502)["refund"]["amount_sats"] == 5


async def test_restore_face_colorize_and_depth(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(processing_polls=1)
    resp = await paid(client, "restore-face", {"imageBase64": image_b64(), "fidelity": 0.7})
    assert resp.status_code == 200, resp.text
    assert rep.last().input["codeformer_fidelity"] == 0.7
    # This provider hands the photo over as a signed URL of satsgate's file store.
    assert rep.last().input["image"].startswith(server.url + "/api/files/")
    assert rep.last().fetched["image"] == png()
    assert rep.last().model == "sczhou/codeformer"

    resp = await paid(client, "colorize-image", {"imageBase64": image_b64("L")})
    assert resp.status_code == 200, resp.text
    assert "input_image" in rep.last().input
    with Image.open(io.BytesIO(await fetch(client, resp.json()["image_url"], server))) as img:
        assert img.mode == "RGB" and img.size == (48, 32)

    rep.script = Script(sync=True, outputs=lambda: [png("L")])
    resp = await paid(client, "estimate-depth", {"imageBase64": image_b64()})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    with Image.open(io.BytesIO(await fetch(client, body["depth_url"], server))) as depth:
        assert depth.mode == "L"
        near, far = depth.getpixel((0, 5)), depth.getpixel((47, 5))
        assert isinstance(near, int) and isinstance(far, int) and near < far  # the ramp
    with Image.open(io.BytesIO(await fetch(client, body["visualization_url"], server))) as vis:
        pixel = vis.getpixel((40, 5))
        assert vis.mode == "RGB" and isinstance(pixel, tuple) and len(set(pixel)) > 1


async def test_a_configured_upscaler_wins_over_the_local_one(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(sync=True, outputs=lambda: [png(size=(96, 64))])
    resp = await paid(client, "upscale-image", {"imageBase64": image_b64(), "scale": 2})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["width"], body["height"]) == (96, 64)
    assert "super-resolution" in body["method"]
    assert rep.last().model == "nightmareai/real-esrgan" and rep.last().input["scale"] == 2


async def test_deblur_and_object_eraser_on_a_hosted_model(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(sync=True, outputs=lambda: [png(size=(48, 32))])
    resp = await paid(client, "deblur-image", {"imageBase64": image_b64()})
    assert resp.status_code == 200, resp.text
    assert resp.json()["method"].startswith("AI restoration")
    assert rep.last().input == {"image": data_uri(png()), "task_type": "Image Debluring (REDS)"}
    mask = Image.new("L", (48, 32))
    mask.paste(255, (10, 10, 20, 20))
    buf = io.BytesIO()
    mask.save(buf, "PNG")
    body = {"imageBase64": image_b64(), "maskBase64": base64.b64encode(buf.getvalue()).decode()}
    resp = await paid(client, "remove-object", body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["method"].startswith("AI inpainting")
    sent = rep.last().input
    assert sent["mask_image"] == data_uri(buf.getvalue()) and sent["dilate"] == 4
    with Image.open(io.BytesIO(await fetch(client, resp.json()["image_url"], server))) as img:
        assert img.size == (48, 32)


async def test_generate_and_edit_image_through_the_gate(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(processing_polls=1, outputs=lambda: [png(size=(64, 48))])
    body = {"input": {"prompt": "a red kite", "width": 1024, "height": 768}, "modelId": 2}
    resp = await paid(client, "generate-image", body)
    assert resp.status_code == 200, resp.text
    with Image.open(io.BytesIO(await fetch(client, resp.json()["image_url"], server))) as img:
        assert img.size == (64, 48)
    assert rep.last().model == "black-forest-labs/flux-schnell"
    assert rep.last().input == {"prompt": "a red kite", "aspect_ratio": "4:3"}
    resp = await paid(client, "edit-image", {"prompt": "add snow", "imageBase64": image_b64()})
    assert resp.status_code == 200, resp.text
    assert resp.json()["imageUrl"].startswith(server.url + "/api/files/")
    assert rep.last().model == "black-forest-labs/flux-kontext-pro"
    assert rep.last().input["prompt"] == "add snow"
    no_platform_url(resp.json(), *platforms)


async def test_a_rate_limited_create_is_refunded(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    rep.script = Script(create_error=429)
    resp = await paid(client, "colorize-image", {"imageBase64": image_b64()})
    body = assert_envelope(resp, "RATE_LIMITED", resp.status_code)
    assert body["refund"]["amount_sats"] == 5
    rep.script = Script(create_error=503)
    resp = await paid(client, "colorize-image", {"imageBase64": image_b64()})
    body = assert_envelope(resp, "SERVICE_ERROR", resp.status_code)
    assert body["refund"]["amount_sats"] == 5


# -- generate-music (fal queue) -----------------------------------------------------------


async def test_music_on_fal_by_polling(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    _, falq = platforms
    falq.script = Script(outputs=lambda: [wav(30.0)], starting_polls=2, processing_polls=2)
    resp = await paid(client, "generate-music", {"prompt": "lo-fi piano", "duration": 30})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    audio = await fetch(client, body["audioUrl"], server)
    assert audio_duration_s(audio) == pytest.approx(30.0)
    assert body["billing"] == {"seconds": 30, "sats": 150} and body["format"] == "wav"
    rec = falq.last()
    assert rec.model == "fal-ai/stable-audio" and rec.polls >= 5
    assert rec.input == {"prompt": "lo-fi piano", "seconds_total": 30}
    no_platform_url(body, *platforms)


async def test_music_on_fal_by_webhook_with_a_forgery_refused(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    _, falq = platforms
    falq.webhook_answers.clear()
    falq.script = Script(outputs=lambda: [wav(20.0)], by_webhook=True, forged_webhook=True)
    resp = await paid(client, "generate-music", {"prompt": "ambient pads", "duration": 20})
    assert resp.status_code == 200, resp.text
    await until(lambda: len(falq.webhook_answers) == 2)
    assert falq.last().ended_by_webhook and falq.webhook_answers == [401, 200]
    audio = await fetch(client, resp.json()["audioUrl"], server)
    assert audio_duration_s(audio) == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (Script(outcome="failed", error="Internal error"), "SERVICE_ERROR"),
        (
            Script(
                outcome="failed",
                error="NSFW content detected: content_policy_violation",
                by_webhook=True,
            ),
            "CONTENT_FILTERED",
        ),
        (
            Script(outcome="failed", error="NSFW content detected: content_policy_violation"),
            "CONTENT_FILTERED",
        ),
        (Script(outputs=lambda: [wav(200.0)]), "OUTPUT_DURATION_INSANE"),
        (Script(poll_errors=[429, 502], outputs=lambda: [wav(15.0)]), None),
    ],
    ids=[
        "failed",
        "refused-by-webhook",
        "refused-by-poll",
        "duration-insane",
        "429-5xx-ridden-out",
    ],
)
async def test_music_failures_on_fal_are_refunded(
    client: httpx.AsyncClient,
    platforms: tuple[FakeReplicate, FakeFal],
    script: Script,
    code: str | None,
) -> None:
    _, falq = platforms
    falq.script = script
    resp = await paid(client, "generate-music", {"prompt": "a march", "duration": 15})
    if code is None:
        assert resp.status_code == 200, resp.text
        return
    if code == "CONTENT_FILTERED":  # a refusal keeps the payment for a free retry
        body = assert_envelope(resp, "CONTENT_FILTERED_RETRY", 422)
        assert "fal" not in str(body).lower() and "refund" not in body
        assert body["model_said"] == script.error  # the model's words, not fal's document
        resp = await client.post(
            "/api/decline-retry",
            json={"paymentId": body["paymentId"], "rework_token": body["rework_token"]},
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["refund"]["amount_sats"] == 75
        return
    body = assert_envelope(resp, code, resp.status_code)
    assert body["refund"]["amount_sats"] == 75
    assert "fal" not in body["error"].lower()


# -- webhook routes ------------------------------------------------------------------------


async def test_webhook_routes_refuse_what_is_not_signed_by_the_platform(
    client: httpx.AsyncClient, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep, _ = platforms
    # The route verifies with the signing secret the provider reads when it first asks for
    # a webhook: one job on it first, so that this test stands alone.
    rep.script = Script(sync=True, outputs=lambda: [png("RGBA")])
    first = await paid(client, "remove-background", {"imageBase64": image_b64()})
    assert first.status_code == 200, first.text
    body = json.dumps({"id": "p1", "status": "succeeded", "output": "https://x/y"}).encode()
    stamp = str(int(time.time()))
    good = sign(rep.key, "msg_1", stamp, body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": stamp, "webhook-signature": good}
    url = "/api/webhooks/replicate/rep"
    assert (await client.post(url, content=body, headers=headers)).status_code == 200
    tampered = body.replace(b"p1", b"p2")
    assert (await client.post(url, content=tampered, headers=headers)).status_code == 401
    old = str(int(time.time()) - 3600)
    stale = {**headers, "webhook-timestamp": old,
             "webhook-signature": sign(rep.key, "msg_1", old, body)}  # fmt: skip
    assert (await client.post(url, content=body, headers=stale)).status_code == 401
    assert (await client.post(url, content=body)).status_code == 401
    # Headers a client wrote wrong are refused, never a 500: a timestamp of digits that
    # are not ASCII ("²"), or too many of them; an id of bytes beyond UTF-8.
    as_sent = {k.encode(): v.encode() for k, v in headers.items()}
    for forged in (
        {**as_sent, b"webhook-timestamp": "\u00b2".encode()},
        {**as_sent, b"webhook-timestamp": b"9" * 5000},
        {**as_sent, b"webhook-id": b"\xff"},
    ):
        assert (await client.post(url, content=body, headers=forged)).status_code == 401
    # Signed, but no prediction: nothing to do, and no 500.
    listed = sign(rep.key, "msg_2", stamp, b"[]")
    not_a_prediction = {**headers, "webhook-id": "msg_2", "webhook-signature": listed}
    assert (await client.post(url, content=b"[]", headers=not_a_prediction)).status_code == 401
    fal_headers = {
        "x-fal-webhook-request-id": "r1",
        "x-fal-webhook-user-id": "u",
        "x-fal-webhook-timestamp": stamp,
        "x-fal-webhook-signature": "00" * 64,
    }
    resp = await client.post("/api/webhooks/fal/falq", content=b"{}", headers=fal_headers)
    assert resp.status_code == 401
    assert (await client.post("/api/webhooks/fal/rep", content=body)).status_code == 404
    assert (await client.post("/api/webhooks/replicate/nope", content=body)).status_code == 404


def test_replicate_signature_matches_the_documented_vector() -> None:
    key = base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body = b'{"test": 2432232314}'
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body) == expected
    assert verify_signature(
        key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, f"v1,bm90IGl0 {expected}"
    )
    assert not verify_signature(key, "msg_other", "1614265330", body, expected)


# -- the adapters on their own: second-source image generation, fal's timeout ---------------


def _provider(kind: str, url: str, key: str, **options: Any) -> Any:
    config = ProviderConfig(
        name="direct", kind=kind, base_url=url, api_key=key,
        models=dict(replicate.DEFAULT_MODELS if kind == "replicate" else fal.DEFAULT_MODELS),
        options={"poll_interval_s": POLL, "webhooks": False, **options},
    )  # fmt: skip
    deps = EngineDeps(Settings(), CpuRunner(ThreadPoolExecutor(max_workers=1), 1.0))
    return PROVIDER_KINDS[kind](config, deps)


async def test_generate_and_edit_image_as_a_second_source(
    platforms: tuple[FakeReplicate, FakeFal],
) -> None:
    rep, falq = platforms
    rep.script = Script(outputs=lambda: [png(size=(64, 36))])
    provider = _provider("replicate", rep.url, API_KEY)
    try:
        assert provider.engine("image") is provider and provider.engine("image_edit")
        made = await provider.generate(
            ImageGenerationRequest(
                "a lighthouse",
                1344,
                768,
                (png(),),
                model_name="black-forest-labs/flux-1.1-pro-ultra",
            )
        )
        assert Image.open(io.BytesIO(made.data)).size == (64, 36)
        assert rep.last().input == {
            "prompt": "a lighthouse",
            "aspect_ratio": "16:9",
            "image_prompt": data_uri(png()),
        }
        await provider.edit(
            ImageEditRequest("stormy sky", png(), model_name="black-forest-labs/flux-kontext-pro")
        )
        assert rep.last().input["aspect_ratio"] == "match_input_image"
        assert rep.last().input["input_image"].startswith("data:image/png;base64,")
    finally:
        await provider.aclose()

    falq.script = Script(outputs=lambda: [png(), png("L")])
    provider = _provider("fal", falq.url, FAL_KEY)
    try:
        await provider.generate(
            ImageGenerationRequest("a fox", 1024, 768, model_name="fal-ai/flux-pro/v1.1")
        )
        assert falq.last().input == {
            "prompt": "a fox",
            "image_size": {"width": 1024, "height": 768},
        }
    finally:
        await provider.aclose()


async def test_fal_timeout_cancels_the_request_upstream(
    platforms: tuple[FakeReplicate, FakeFal],
) -> None:
    _, falq = platforms
    falq.script = Script(outcome="never")
    provider = _provider("fal", falq.url, FAL_KEY, max_wait_s=0.3)
    try:
        with pytest.raises(EngineError) as failed:
            await provider.generate_music(
                MusicRequest("drums", 15, model_name="fal-ai/stable-audio")
            )
        assert failed.value.code == "TIMEOUT" and not failed.value.may_fall_back
        assert falq.last().canceled_by_client and falq.last().status == "canceled"
    finally:
        await provider.aclose()


async def test_a_bad_key_is_a_service_error_that_may_fall_back(
    platforms: tuple[FakeReplicate, FakeFal],
) -> None:
    rep, _ = platforms
    provider = _provider("replicate", rep.url, "wrong")
    try:
        with pytest.raises(EngineError) as failed:
            await provider.generate_music(MusicRequest("x", 15, model_name="minimax/music-1.5"))
        assert failed.value.code == "SERVICE_ERROR" and failed.value.may_fall_back
    finally:
        await provider.aclose()


async def test_platform_failures_are_logged_without_the_platforms_address(
    platforms: tuple[FakeReplicate, FakeFal], caplog: pytest.LogCaptureFixture
) -> None:
    rep, falq = platforms
    caplog.set_level(logging.DEBUG)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    # Replicate's webhook secret answered 404 (this address is fal's), then its create too;
    # fal's webhook keys answered 404, then its create could not connect.
    attempts = [
        (_provider("replicate", falq.url, API_KEY, webhooks=True), "minimax/music-1.5"),
        (
            _provider("fal", dead, FAL_KEY, webhooks=True, jwks_url=f"{rep.url}/no-keys"),
            "fal-ai/stable-audio",
        ),
    ]
    for provider, model in attempts:
        try:
            with pytest.raises(EngineError):
                await provider.generate_music(MusicRequest("x", 15, model_name=model))
        finally:
            await provider.aclose()
    text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("satsgate"))
    assert "no webhook signing secret (HTTP 405)" in text  # fal has that path for POST
    assert "webhook keys unavailable (HTTP 404)" in text
    assert "submit failed (ConnectError)" in text
    for address in (rep.url, falq.url, dead, "127.0.0.1"):
        assert address not in text, address


class MemoryCheckpoint:
    def __init__(self, saved: SavedPrediction | None = None) -> None:
        self.saved = saved

    async def load(self) -> SavedPrediction | None:
        return self.saved

    async def save(self, prediction: SavedPrediction) -> None:
        self.saved = prediction


async def test_a_checkpoint_resumes_only_its_own_providers_prediction(
    platforms: tuple[FakeReplicate, FakeFal],
) -> None:
    rep, _ = platforms
    rep.script = Script(outputs=lambda: [mp4(5.0)])
    provider = _provider("replicate", rep.url, API_KEY)
    try:
        checkpoint = MemoryCheckpoint()
        request = VideoRequest(
            "a pan", 5, "768p", model_name="minimax/hailuo-02", checkpoint=checkpoint
        )
        await provider.generate_video(request)
        assert checkpoint.saved is not None and checkpoint.saved.prediction_id == rep.last().id
        made = len(rep.records)
        again = await provider.generate_video(request)  # resumes the finished prediction
        assert len(rep.records) == made and audio_duration_s(again.data) == pytest.approx(5.0)
        elsewhere = MemoryCheckpoint(SavedPrediction("another", "p_x", {}))
        with pytest.raises(EngineError) as lost:
            await provider.generate_video(
                VideoRequest("a pan", 5, "768p", model_name="m", checkpoint=elsewhere)
            )
        assert lost.value.may_fall_back and len(rep.records) == made
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "options",
    [
        {"poll_interval_s": 0},
        {"max_wait_s": "soon"},
        {"webhooks": "yes"},
        {"input_names": {"m": "x"}},
        {"input_names": {"m": {"image": 3}}},
        {"input_files": "ftp"},
    ],
)
def test_a_provider_table_that_cannot_work_refuses_to_start(options: dict[str, Any]) -> None:
    config = ProviderConfig(name="bad", kind="replicate", options=options)
    deps = EngineDeps(Settings(), CpuRunner(ThreadPoolExecutor(max_workers=1), 1.0))
    with pytest.raises(EngineConfigError, match=r"\[providers.bad\]"):
        replicate.ReplicateProvider(config, deps)
