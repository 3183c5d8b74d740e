"""`satsgate worker` (issue 30): a gateway with ``[workers] mode = "queue"`` on a throwaway
PostgreSQL and two real worker processes. Paid OCR, speech and a PDF tool come out as
they do from the in-process pool; the claim order is fair between payers; a worker
killed mid-job loses nothing; a job whose time ran out is refunded once, and the worker's
late result changes nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from satsgate.appkeys import CPU
from satsgate.engines.cpu_jobs import PAYER
from satsgate.engines.image_codec import to_png
from satsgate.operator import ensure_operator_token
from satsgate.store.cpu_queue import QueueState
from satsgate.workers.gateway import QueueCpuRunner
from tests.conftest import ThreadedServer, http_client, make_settings, paid_l402_auth
from tests.documents_inputs import png, text_image
from tests.ledger_check import assert_ledger_balances
from tests.pg_cluster import PgCluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 10.0
QUEUE_WAIT_S = 8.0
# An image of forty lines: about three seconds of OCR here, long enough to be caught
# running.
LONG_OCR = png(
    text_image([f"Lightning invoices settle within seconds, line {i}." for i in range(40)],
               width=2400, size=40)
)  # fmt: skip
SHORT_OCR = png(text_image(["Lightning invoices settle within seconds."]))


@dataclass
class Fleet:
    """The gateway in this process, and the worker processes with their logs."""

    server: ThreadedServer
    url: str
    tmp: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)

    def start_worker(self) -> subprocess.Popen[bytes]:
        log = self.tmp / f"worker{len(self.workers)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "satsgate.cli", "worker", "--store-url", self.url,
                 "--concurrency", "1"],
                stderr=out,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
        self.workers.append(proc)
        self.logs[proc.pid] = log
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p.poll() is None]

    def state(self) -> QueueState:
        runner = self.server.app[CPU]
        assert isinstance(runner, QueueCpuRunner)
        return self.server.call(runner.queue.state)

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return self.server.call(
            lambda: self.server.store.db.run_sync(lambda c: c.execute(sql, args).fetchall())
        )

    def wait_workers(self, count: int, timeout_s: float = 60) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            fresh = [w for w in self.state().workers if w.heartbeat_age_s < 3]
            if len(fresh) >= count:
                return
            time.sleep(0.2)
        logs = "\n".join(p.read_text() for p in self.logs.values())
        raise AssertionError(f"{count} workers did not come up:\n{logs}")

    def stop(self) -> None:
        for proc in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.server.stop()


@pytest.fixture(scope="module")
def fleet(pg_cluster: PgCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if shutil.which("tesseract") is None or shutil.which("espeak-ng") is None:
        pytest.skip("tesseract and espeak-ng are needed")
    url = pg_cluster.new_database()
    tmp = tmp_path_factory.mktemp("workers")
    settings = make_settings(
        tmp / "data",
        store_url=url,
        workers_mode="queue",
        cpu_job_time_limit_s=LIMIT_S,
        workers_queue_wait_s=QUEUE_WAIT_S,
    )
    fleet = Fleet(ThreadedServer(settings), url, tmp)
    try:
        fleet.start_worker()
        fleet.start_worker()
        fleet.wait_workers(2)
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture
async def queue_client(fleet: Fleet) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(fleet.server):
        yield c


async def paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def outputs(client: httpx.AsyncClient) -> dict[str, Any]:
    """A paid OCR, text-to-speech and html-to-pdf call, and what each gave."""
    ocr = await paid(client, "extract-document", {"imageBase64": b64(SHORT_OCR)})
    assert ocr.status_code == 200, ocr.text
    tts = await paid(
        client, "text-to-speech", {"text": "Paid by the second.", "modelId": 43, "format": "wav"}
    )
    assert tts.status_code == 200, tts.text
    audio = await client.get(tts.json()["audioUrl"])
    assert audio.status_code == 200
    html = "<h1>Invoice</h1>" + "<p>Settled within seconds.</p>" * 40
    pdf = await paid(client, "html-to-pdf", {"html": html})
    assert pdf.status_code == 200, pdf.text
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(base64.b64decode(pdf.json()["pdf_base64"])))
    return {
        "ocr": (ocr.json()["content"], ocr.json()["pageMethods"]),
        "tts": audio.content,
        "pdf": (len(reader.pages), [page.extract_text() for page in reader.pages]),
    }


async def test_paid_ocr_speech_and_pdf_through_workers_are_what_the_pool_gives(
    fleet: Fleet, queue_client: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    before = {w.name: w.done for w in fleet.state().workers}
    through_workers = await outputs(queue_client)
    through_pool = await outputs(client)  # the suite's shared server: the pool
    assert through_workers == through_pool
    assert "Lightning" in through_workers["ocr"][0]
    assert through_workers["tts"][:4] == b"RIFF"
    # They ran on the workers: one job each for OCR, speech and the PDF, all done.
    ran = fleet.rows("SELECT engine, status, worker FROM cpu_jobs ORDER BY id")
    assert {(engine, status) for engine, status, _ in ran} == {
        ("ocr", "done"),
        ("tts", "done"),
        ("pdf", "done"),
    }
    assert {worker for *_, worker in ran} <= set(before)
    assert_ledger_balances(fleet.server)


def _noise_bmp() -> bytes:
    image = Image.frombytes("RGB", (600, 600), os.urandom(600 * 600 * 3))
    out = io.BytesIO()
    image.save(out, "BMP")
    return out.getvalue()


async def test_one_payers_twenty_jobs_hold_up_anothers_by_at_most_one_per_worker(
    fleet: Fleet,
) -> None:
    runner = fleet.server.app[CPU]
    image = _noise_bmp()

    async def b_visible_us() -> int:
        """When payer b's job became visible to another connection, as the workers see
        it (its created_us is taken by its INSERT, before a commit that a loaded machine
        can delay by a few hundred milliseconds)."""
        seen = (
            "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
            " FROM cpu_jobs WHERE payer = 'payer-b'"
        )
        while True:
            found = await fleet.server.store.db.run_sync(lambda c: c.execute(seen).fetchall())
            if found:
                return int(found[0][0])
            await asyncio.sleep(0.002)

    async def jobs() -> tuple[int, list[bytes]]:
        PAYER.set("payer-a")
        many = [asyncio.ensure_future(runner(to_png, image)) for _ in range(20)]
        await asyncio.sleep(0.3)  # the first of them are running
        PAYER.set("payer-b")
        one = asyncio.ensure_future(runner(to_png, image))
        visible_us = await b_visible_us()
        return visible_us, [await one, *await asyncio.gather(*many)]

    b_visible, results = fleet.server.call(jobs)
    assert len(results) == 21 and all(r.startswith(b"\x89PNG") for r in results)
    rows = fleet.rows(
        "SELECT payer, created_us, claimed_us FROM cpu_jobs WHERE payer IN"
        " ('payer-a', 'payer-b') AND status = 'done'"
    )
    (b_created, b_claimed) = next((c, d) for p, c, d in rows if p == "payer-b")
    assert b_created <= b_visible
    a_claims = sorted(d for p, _, d in rows if p == "payer-a")
    assert len(a_claims) == 20
    # Once payer b's job could be seen, it waited for no more of a's jobs than the two
    # workers were already claiming (one each), and a's were not all done first.
    started_meanwhile = [d for d in a_claims if b_visible < d < b_claimed]
    assert len(started_meanwhile) <= 2, (started_meanwhile, b_created, b_visible, b_claimed)
    assert sum(d > b_claimed for d in a_claims) >= 10


def _running_job(fleet: Fleet, engine: str, timeout_s: float = 20) -> tuple[int, str]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        rows = fleet.rows(
            "SELECT id, worker FROM cpu_jobs WHERE status = 'running' AND engine = ?", (engine,)
        )
        if rows:
            return int(rows[0][0]), str(rows[0][1])
        time.sleep(0.05)
    raise AssertionError("the job never ran")


async def test_a_worker_killed_mid_job_loses_nothing(
    fleet: Fleet, queue_client: httpx.AsyncClient
) -> None:
    call = asyncio.ensure_future(
        paid(queue_client, "extract-document", {"imageBase64": b64(LONG_OCR)})
    )
    job_id, worker = await asyncio.to_thread(_running_job, fleet, "ocr")
    victim = int(worker.split(":")[1])
    os.kill(victim, signal.SIGKILL)
    resp = await call
    assert resp.status_code == 200, resp.text  # run again by the other worker
    assert "line 39" in resp.json()["content"]
    ((status, attempts, finisher),) = fleet.rows(
        "SELECT status, attempts, worker FROM cpu_jobs WHERE id = ?", (job_id,)
    )
    assert (status, attempts) == ("done", 2) and finisher != worker
    assert_ledger_balances(fleet.server)


async def test_a_job_past_its_time_is_refunded_once_and_a_late_result_changes_nothing(
    fleet: Fleet, queue_client: httpx.AsyncClient
) -> None:
    refunds_before = fleet.rows("SELECT COUNT(*) FROM refunds")[0][0]
    running = asyncio.ensure_future(
        paid(queue_client, "extract-document", {"imageBase64": b64(LONG_OCR)})
    )
    job_id, worker = await asyncio.to_thread(_running_job, fleet, "ocr")
    stopped = fleet.alive()
    for proc in stopped:  # the workers freeze: no heartbeat, no claim, no result
        os.kill(proc.pid, signal.SIGSTOP)
    try:
        waiting = asyncio.ensure_future(
            paid(queue_client, "extract-document", {"imageBase64": b64(SHORT_OCR)})
        )
        for resp in (await running, await waiting):
            assert resp.status_code == 504, resp.text
            assert resp.headers["X-Error-Code"] == "TIMEOUT"
            assert resp.json()["refund"]["amount_sats"] == 10  # the whole price
        ends = dict(fleet.rows("SELECT id, error FROM cpu_jobs WHERE status = 'failed'"))
        assert ends[job_id] == "lost"
        assert "unclaimed" in ends.values()
    finally:
        for proc in stopped:
            os.kill(proc.pid, signal.SIGCONT)
    # The worker comes back with the result of the refunded job: it is not kept.
    log = fleet.logs[int(worker.split(":")[1])]
    end = time.monotonic() + 20
    while f"CPU job {job_id}: outcome not kept" not in log.read_text():
        assert time.monotonic() < end, log.read_text()
        await asyncio.sleep(0.1)
    ((status, outcome),) = fleet.rows(
        "SELECT status, outcome FROM cpu_jobs WHERE id = ?", (job_id,)
    )
    assert (status, outcome) == ("failed", None)
    refunds = fleet.rows(
        "SELECT payment_id, amount_msat FROM refunds ORDER BY created_at, refund_id"
    )
    assert len(refunds) == refunds_before + 2  # one per call, each once
    assert len({p for p, _ in refunds}) == len(refunds)
    assert all(amount == 10_000 for _, amount in refunds[refunds_before:])
    assert_ledger_balances(fleet.server)
    # And the queue is healthy again: the workers take the next job.
    resp = await paid(queue_client, "extract-document", {"imageBase64": b64(SHORT_OCR)})
    assert resp.status_code == 200, resp.text


async def test_status_shows_the_workers_the_depth_and_the_oldest_job(
    fleet: Fleet, queue_client: httpx.AsyncClient
) -> None:
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "satsgate.cli", "status", "--store-url", fleet.url],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    live = [w for w in fleet.state().workers if w.heartbeat_age_s < 3]
    assert live and all(w.name in out.stdout for w in live)
    assert "0 waiting" in out.stdout and "last heartbeat" in out.stdout
    # /operator: the same, with the operator's token.
    token = ensure_operator_token(fleet.server.settings.data_dir)
    auth = {"Authorization": f"Bearer {token}"}
    report = (await queue_client.get("/api/operator/ledger", headers=auth)).json()
    assert {w.name for w in live} <= {w["name"] for w in report["workers"]["workers"]}
    assert report["workers"]["queued"] == 0
    page = await queue_client.get("/operator", headers=auth)
    assert page.status_code == 200 and 'id="workers-table"' in page.text
    assert all(w.name in page.text for w in live)
