"""HEAD /api/l402/<slug>: the price in headers, no invoice, nothing written."""

from __future__ import annotations

from typing import Any

import httpx

from satsgate.services.registry import SERVICES
from tests.conftest import ThreadedServer


def row_counts(server: ThreadedServer) -> dict[str, int]:
    """Every table's row count in satsgate's database, and the dev node's invoices."""

    tables = (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        if server.settings.store_url
        else "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
    )

    def count(conn: Any) -> dict[str, int]:
        names = [r[0] for r in conn.execute(tables)]
        return {n: conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}

    counts = server.call(lambda: server.store.db.run_sync(count))
    counts["node invoices"] = server.call(
        lambda: server.backend._run(
            lambda: server.backend._db().execute("SELECT COUNT(*) FROM invoices").fetchone()[0]
        )
    )
    return dict(counts)


async def test_head_answers_the_price_and_writes_nothing(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    await client.post("/api/l402/render-card", json={"template": "headline", "title": "x"})
    before = row_counts(server)
    assert before["payments"] >= 1 and before["node invoices"] >= 1  # counts that can move

    flat = await client.head("/api/l402/render-card")
    assert flat.status_code == 200 and flat.content == b""
    assert flat.headers["X-L402-Price-Sats"] == "5"
    assert flat.headers["X-L402-Price-Range-Sats"] == "5-5"
    assert flat.headers["X-L402-Price-Model"] == "flat"
    assert "WWW-Authenticate" not in flat.headers

    by_input = [s for s in SERVICES if s.price_shape.model not in ("flat", "dynamic")]
    checked = 0
    for spec in by_input:
        resp = await client.head(f"/api/l402/{spec.slug}")
        description = (await client.get(f"/api/l402/{spec.slug}")).json()
        described = description["pricing"]
        assert resp.headers["X-L402-Price-Sats"] == str(described["minSats"]), spec.slug
        assert resp.headers["X-L402-Price-Range-Sats"] == f"{described['minSats']}-"
        assert resp.headers["X-L402-Price-Model"] == described["model"]
        assert resp.status_code == (200 if description["available"] else 503)
        checked += 1
    assert checked >= 5

    missing = await client.head("/api/l402/no-such-service")
    assert missing.status_code == 404
    assert row_counts(server) == before

    # The POST of the same service does write: the probe's counts were able to move.
    await client.post("/api/l402/render-card", json={"template": "headline", "title": "y"})
    after = row_counts(server)
    # The call's invoice and its row (no session deposit: the request did not ask for one).
    assert after["payments"] == before["payments"] + 1
    assert after["node invoices"] == before["node invoices"] + 1


async def test_head_of_an_unavailable_service_says_so(client: httpx.AsyncClient) -> None:
    resp = await client.head("/api/l402/send-sms")
    assert resp.status_code == 503
    assert resp.headers["X-Error-Code"] == "SERVICE_UNAVAILABLE"
    assert int(resp.headers["X-L402-Price-Sats"]) > 0
