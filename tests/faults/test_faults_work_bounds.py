"""Work is bounded: before payment (a merge of PDFs with a huge page count is refused by
the count the files declare, before their pages are walked; the whole merge is capped
in bytes) and after it (long CPU work holds at most all workers but one, so a short job
paid by someone else still runs at once)."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor

import httpx
import pytest
from pypdf import PdfWriter
from pypdf.generic import DictionaryObject, NameObject, NumberObject

from satsgate.domain import pdf_pages
from satsgate.engines import CpuRunner
from satsgate.errors import ApiError
from satsgate.services.documents.rendering import MAX_MERGE_PAGES, MergePdfParams
from tests.conftest import ThreadedServer, http_client
from tests.store_access import store_value


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(72, 72)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(server):
        yield c


def invoices(server: ThreadedServer) -> int:
    """Payments (each with its node invoice) the server has created."""
    return int(store_value(server.settings, "SELECT COUNT(*) FROM payments"))


async def test_a_merge_over_the_page_cap_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = invoices(server)
    big = base64.b64encode(blank_pdf(MAX_MERGE_PAGES + 1)).decode()
    small = base64.b64encode(blank_pdf(1)).decode()
    resp = await client.post("/api/l402/merge-pdf", json={"documents": [small, big]})
    assert resp.status_code == 400, resp.text
    assert f"more than {MAX_MERGE_PAGES} pages in all" in resp.json()["error"]
    # Two halves that fit alone, not together.
    half = base64.b64encode(blank_pdf(MAX_MERGE_PAGES // 2 + 1)).decode()
    resp = await client.post("/api/l402/merge-pdf", json={"documents": [half, half]})
    assert resp.status_code == 400 and "pages in all" in resp.text, resp.text
    assert invoices(server) == before
    # Within the caps: a 402.
    resp = await client.post("/api/l402/merge-pdf", json={"documents": [small, small]})
    assert resp.status_code == 402, resp.text


def pdf_declaring(pages: int, holding: int) -> bytes:
    """A PDF whose page tree's root says ``pages`` pages while the tree holds ``holding``."""
    writer = PdfWriter()
    for _ in range(holding):
        writer.add_blank_page(72, 72)
    root = writer._root_object["/Pages"].get_object()  # pypdf has no public setter for it
    assert isinstance(root, DictionaryObject)
    root[NameObject("/Count")] = NumberObject(pages)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_the_declared_page_count_refuses_before_the_walk() -> None:
    # The root says 20,000 and the tree holds 2: a refusal that names 20,000 was decided
    # by the declared count, before any walk (a walk would have counted 2).
    overstated = pdf_declaring(20_000, holding=2)
    with pytest.raises(pdf_pages.TooManyPages, match="20000 pages; at most 500"):
        pdf_pages.validate_pdf(overstated, 500)
    # A root that understates its tree is caught by the walk.
    understated = pdf_declaring(2, holding=600)
    with pytest.raises(pdf_pages.TooManyPages, match="600 pages; at most 500"):
        pdf_pages.validate_pdf(understated, 500)
    # A true 20,000-page file: refused by its count, accepted uncapped.
    data = blank_pdf(20_000)
    with pytest.raises(pdf_pages.TooManyPages, match="20000 pages; at most 500"):
        pdf_pages.validate_pdf(data, 500)
    assert pdf_pages.validate_pdf(data) == 20_000  # no cap: the whole tree is walked


def test_a_merge_is_capped_in_bytes_in_all() -> None:
    eleven_mb = base64.b64encode(b"%PDF-1.4\n" + bytes(11 * 1024 * 1024)).decode()
    params = MergePdfParams(documents=[eleven_mb] * 5)
    with pytest.raises(ApiError, match="more than 50 MB of PDFs in all"):
        params.decoded()


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


async def test_long_work_leaves_a_worker_for_short_work() -> None:
    with ProcessPoolExecutor(max_workers=2) as pool:
        runner = CpuRunner(pool, 30.0, workers=2)
        await asyncio.gather(*(runner(_sleep, 0.0, quick=True) for _ in range(2)))  # warm up
        started = time.perf_counter()
        long_jobs = [asyncio.create_task(runner(_sleep, 2.0)) for _ in range(2)]
        await asyncio.sleep(0.2)
        assert await runner(_sleep, 0.01, quick=True) == 0.01
        quick_done = time.perf_counter() - started
        await asyncio.gather(*long_jobs)
        all_done = time.perf_counter() - started
    assert quick_done < 1.5, quick_done  # it did not wait for a long job (2 s) to end
    assert all_done > 3.9, all_done  # the two long jobs ran one after the other
