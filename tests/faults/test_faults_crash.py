"""kill -9 in the middle of a burst of paid calls: after a restart on the same data dir,
every payment was served, is usable again, or was refunded; none is spent without an
answer or a refund, every spent job payment has its job, and the ledger balances."""

from __future__ import annotations

import asyncio
import base64
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.store import Store
from tests.conftest import skip_unless_ci
from tests.killable_server import KillableServer
from tests.payments.test_gateway import CARD
from tests.store_access import store_rows

SYNC_CALLS = 40
JOB_CALLS = 4


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[KillableServer]:
    server = KillableServer(tmp_path / "data")
    try:
        yield server
    finally:
        server.reap()


def _epub() -> bytes:
    if shutil.which("apertium") is None:
        skip_unless_ci("apertium is not installed")
    from tests.engines.test_translation import _epub as make_epub

    return make_epub(40)


def _challenge(client: httpx.Client, slug: str, body: dict[str, Any]) -> dict[str, Any]:
    """402 -> the dev node pays -> the credential; the paymentId for the checks."""
    challenge = client.post(f"/api/l402/{slug}", json=body)
    assert challenge.status_code == 402, challenge.text
    fields = challenge.json()
    preimage = client.post("/api/dev/pay", json={"invoice": fields["invoice"]}).json()["preimage"]
    return {
        "slug": slug,
        "body": body,
        "payment_id": fields["paymentId"],
        "auth": f"L402 {fields['macaroon']}:{preimage}",
        "outcome": None,  # the HTTP status the client saw, or "lost" (connection died)
    }


def _ledger(server: KillableServer) -> dict[str, int]:
    async def read() -> dict[str, int]:
        store = Store(server.db_path, server.store_url)
        await store.open()
        try:
            return await store.ledger.totals()
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.mark.slow
def test_a_kill_mid_burst_loses_no_paid_call(serve: KillableServer) -> None:
    epub = base64.b64encode(_epub()).decode()
    serve.start()
    with httpx.Client(base_url=serve.url, timeout=30) as client:
        calls = [
            _challenge(
                client,
                "translate-epub",
                {"epubBase64": epub, "targetLanguage": "en", "fileName": f"b{n}.epub"},
            )
            for n in range(JOB_CALLS)
        ] + [
            _challenge(client, "render-card", {**CARD, "title": f"Crash {n}"})
            for n in range(SYNC_CALLS)
        ]

    answered = threading.Semaphore(0)

    def fire(call: dict[str, Any]) -> None:
        try:
            with httpx.Client(base_url=serve.url, timeout=30) as c:
                resp = c.post(
                    f"/api/l402/{call['slug']}",
                    json=call["body"],
                    headers={"Authorization": call["auth"]},
                )
            call["outcome"] = resp.status_code
            call["response"] = resp.json()
        except httpx.TransportError:
            call["outcome"] = "lost"
        answered.release()

    with ThreadPoolExecutor(max_workers=len(calls)) as burst:
        for call in calls:
            burst.submit(fire, call)
        for _ in range(JOB_CALLS + 4):  # the jobs accepted and a few cards rendered, then die
            assert answered.acquire(timeout=30)
        serve.kill()

    # The precondition of the test: the kill caught paid calls spent and not answered.
    spent = {
        pid
        for (pid,) in store_rows(
            serve, "SELECT payment_id FROM payments WHERE status IN ('serving', 'spent')"
        )
    }
    served_before = [c for c in calls if c["outcome"] in (200, 202)]
    assert any(c["outcome"] == "lost" and c["payment_id"] in spent for c in calls)

    serve.start()  # the same data dir: the start-up sweep runs before it answers
    # Every call's payment (the session deposits each 402 also offered were never paid).
    rows = {
        pid: (status, amount)
        for pid, status, amount in store_rows(
            serve, "SELECT payment_id, status, amount_msat FROM payments WHERE mode != 'deposit'"
        )
    }
    refunded = dict(
        store_rows(
            serve,
            "SELECT payment_id, SUM(amount_msat) FROM refunds WHERE status != 'expired'"
            " GROUP BY payment_id",
        )
    )
    jobs = {pid: status for pid, status in store_rows(serve, "SELECT payment_id, status FROM jobs")}
    usable = []
    for call in calls:
        status, amount = rows[call["payment_id"]]
        assert status != "serving", call
        if status == "paid":  # never reached its spend: still usable
            usable.append(call)
        elif status == "refunded":
            assert refunded.get(call["payment_id"]) == amount
        else:
            assert status == "spent", call
            if call["slug"] == "translate-epub":
                # its job exists: completed (the result kept for the payer) or refunded
                assert call["payment_id"] in jobs, "a spent job payment without its job"
                if jobs[call["payment_id"]] != "COMPLETED":
                    assert jobs[call["payment_id"]] == "FAILED"
                    assert refunded.get(call["payment_id"]) == amount, call
            elif call["outcome"] != 200:
                # not answered: refunded in full by the restart
                assert refunded.get(call["payment_id"]) == amount, call
    lost_and_refunded = [
        c
        for c in calls
        if c["outcome"] == "lost"
        and rows[c["payment_id"]][0] == "spent"
        and c["slug"] == "render-card"
    ]
    assert lost_and_refunded, "some unanswered calls should have been refunded"

    with httpx.Client(base_url=serve.url, timeout=60) as client:
        # A refunded call's payer retries with its credential and is shown the refund.
        retry = lost_and_refunded[0]
        again = client.post(
            "/api/l402/render-card", json=retry["body"], headers={"Authorization": retry["auth"]}
        )
        assert again.status_code == 402, again.text  # used: its refund, and a fresh challenge
        refund = again.json()["refund"]
        k1 = store_rows(serve, "SELECT k1 FROM refunds WHERE payment_id = ?", retry["payment_id"])
        assert refund["refund_secret"] == k1[0][0]
        assert refund["amount_sats"] * 1000 == rows[retry["payment_id"]][1]
        # Usable again means it: each one that never reached its spend serves now.
        for call in usable:
            resp = client.post(
                f"/api/l402/{call['slug']}",
                json=call["body"],
                headers={"Authorization": call["auth"]},
            )
            assert resp.status_code in (200, 202), resp.text
        # Jobs the restart failed carry their refund; completed ones their result.
        for call in calls[:JOB_CALLS]:
            if call["outcome"] != 202:
                continue
            poll = client.get(call["response"]["poll_url"]).json()
            assert poll["status"] in ("COMPLETED", "FAILED", "IN_PROGRESS"), poll
    assert served_before  # the burst did serve some before the kill
    serve.kill()
    ledger = _ledger(serve)
    assert ledger["received_msat"] == (
        ledger["earned_msat"] + ledger["refunded_msat"] + ledger["held_msat"] + ledger["open_msat"]
    ), ledger
    assert ledger["received_msat"] == sum(amount for _, amount in rows.values())
