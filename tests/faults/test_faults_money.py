"""Money rules under attack: MPP challenges expire; refund fees never dwarf the refund."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from satsgate.payments.mpp import PROBLEM_BASE, parse_rfc3339
from satsgate.server.app import REFUNDS
from tests.conftest import ThreadedServer, dev_pay, http_client, make_settings
from tests.payments.test_gateway import CARD, assert_envelope, mpp_credential


async def test_an_expired_mpp_challenge_is_refused(tmp_path: Path) -> None:
    # Long enough for the control call to be paid and used in time on a loaded machine.
    server = ThreadedServer(make_settings(tmp_path / "data", invoice_expiry_s=4))
    try:
        async for client in http_client(server):
            # Control: paid and used before it expires, the credential serves.
            fresh = await client.post("/api/l402/render-card", json=CARD)
            auth = mpp_credential(fresh, await dev_pay(client, fresh.json()["invoice"]))
            ok = await client.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
            )
            assert ok.status_code == 200, ok.text

            late = await client.post("/api/l402/render-card", json=CARD)
            auth = mpp_credential(late, await dev_pay(client, late.json()["invoice"]))
            expires = (
                next(
                    v for v in late.headers.get_list("WWW-Authenticate") if v.startswith("Payment ")
                )
                .split('expires="', 1)[1]
                .split('"', 1)[0]
            )
            wait_s = max(0.0, parse_rfc3339(expires) + 1 - time.time())
            await asyncio.sleep(wait_s)
            refused = await client.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
            )
            body = assert_envelope(refused, "PAYMENT_EXPIRED", 402)
            assert "expired" in body["error"]
            assert refused.headers["X-Problem-Type"] == PROBLEM_BASE + "payment-expired"
            assert body["invoice"] != late.json()["invoice"]  # a fresh challenge is offered
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("refund_sat", "cap_msat"),
    [
        (1, 500),  # was 10 sat: ten times the refund
        (10, 5_000),  # the 5-sat floor applies from here on
        (500, 5_000),
        (1_000, 5_000),
        (2_000, 10_000),  # 0.5%
        (10_000, 50_000),  # the absolute ceiling (refund_fee_max_msat) from here on
        (100_000, 50_000),  # a full session balance: 50 sat, not 1%
        (2_000_000, 50_000),  # was 20,000 sat: a payer owning the last hop collected it
    ],
)
def test_refund_fee_cap_follows_the_refund(
    server: ThreadedServer, refund_sat: int, cap_msat: int
) -> None:
    refunds = server.app[REFUNDS]
    amount = refund_sat * 1000
    assert refunds.fees.cap_msat(amount) == cap_msat
    assert refunds.fees.cap_msat(amount) <= amount // 2
