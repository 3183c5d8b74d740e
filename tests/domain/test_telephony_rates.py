"""The telephony destination table is the app's: two nodes in one process with different
``[telephony] rates_file`` price and refuse numbers each by its own table, over HTTP, the
estimate, MCP and discovery, and a refusal comes before any invoice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.domain.telephony import BUILTIN, validation_context
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.services.comms.handlers import SendSmsParams
from tests.conftest import ThreadedServer, make_settings
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.mcp_client import call, rpc
from tests.payments.test_gateway import assert_envelope, payment_count
from tests.services.test_services_media import b64, pdf_bytes

US, DE = "+14155550123", "+4915112345678"
HEADER = "prefix,country,name,sms_sats,call_sats_per_minute\n"
# A serves the US and the UK, not Germany; B serves the US (dearer) and Germany.
RATES_A = HEADER + "1,US,United States,21,31\n44,GB,United Kingdom,41,42\n"
RATES_B = HEADER + "1,US,United States,33,45\n49,DE,Germany,50,60\n"
TELEPHONY_ENGINES = ("sms", "voice", "ai_call", "fax", "voice_bridge")


def bodies(number: str) -> dict[str, dict[str, Any]]:
    """One valid body per service that reaches ``number``."""
    return {
        "send-sms": {"phoneNumber": number, "message": "hello"},
        "call": {"phone_number": number, "message": "hi", "duration_minutes": 2},
        "ai-call": {"phoneNumber": number, "task": "Ask for opening hours", "durationMinutes": 2},
        "send-fax": {"faxNumber": number, "documentBase64": b64(pdf_bytes(1))},
        "voice-bridge-open": {"phone_number": number, "durationMinutes": 3},
    }


# The 402 of each body to the US: per message, minutes x rate, minutes x (rate + AI 120),
# the flat fax, minutes x (rate + bridge 20).
US_SATS_A = {"send-sms": 21, "call": 62, "ai-call": 302, "send-fax": 500, "voice-bridge-open": 153}
US_SATS_B = {"send-sms": 33, "call": 90, "ai-call": 330, "send-fax": 500, "voice-bridge-open": 195}
DE_SATS_B = {"send-sms": 50, "call": 120, "ai-call": 360, "send-fax": 500, "voice-bridge-open": 240}


def _node(tmp_path: Path, label: str, rates: str) -> ThreadedServer:
    rates_file = tmp_path / f"{label}.csv"
    rates_file.write_text(rates)
    settings = make_settings(
        tmp_path / label,
        telephony={"rates_file": str(rates_file)},
        **down_engines(TELEPHONY_ENGINES),
    )
    return ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS})


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[ThreadedServer, ThreadedServer]]:
    """Two apps, both running at once in this process, each with its own rates file."""
    a = _node(tmp_path, "a", RATES_A)
    try:
        b = _node(tmp_path, "b", RATES_B)
    except BaseException:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


async def _post(server: ThreadedServer, slug: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        return await client.post(f"/api/l402/{slug}", json=body)


async def test_two_apps_price_and_refuse_by_their_own_rates_files(
    nodes: tuple[ThreadedServer, ThreadedServer],
) -> None:
    a, b = nodes
    for slug, body in bodies(US).items():  # the same number, each node's price
        for server, sats in ((a, US_SATS_A[slug]), (b, US_SATS_B[slug])):
            resp = await _post(server, slug, body)
            assert resp.status_code == 402, (slug, resp.text)
            assert resp.json()["amountSats"] == sats, slug
    before = payment_count(a)
    for slug, body in bodies(DE).items():  # Germany: refused by A, served by B
        refused = assert_envelope(await _post(a, slug, body), "L402_INVALID_PARAMS", 400)
        assert "not served" in refused["error"], refused
        resp = await _post(b, slug, body)
        assert resp.status_code == 402, (slug, resp.text)
        assert resp.json()["amountSats"] == DE_SATS_B[slug], slug
    assert payment_count(a) == before  # nothing invoiced for a refused number
    assert_envelope(await _post(a, "receive-fax", {"country": "DE"}), "L402_INVALID_PARAMS", 400)


async def test_two_apps_estimate_quote_and_describe_by_their_own_tables(
    nodes: tuple[ThreadedServer, ThreadedServer],
) -> None:
    a, b = nodes
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=60) as client_a,
        httpx.AsyncClient(base_url=b.url, timeout=60) as client_b,
    ):
        query = {"service": "sms", "to": DE}
        refused = await client_a.get("/api/estimate-cost", params=query)
        assert_envelope(refused, "L402_INVALID_PARAMS", 400)
        served = await client_b.get("/api/estimate-cost", params=query)
        assert served.status_code == 200, served.text
        assert served.json()["amountSats"] == 50
        # MCP create_payment: the same arguments, refused by A before any invoice.
        arguments = {"toolName": "send_sms", "phoneNumber": DE, "message": "hello"}
        before = payment_count(a)
        mcp_a = await rpc(
            client_a, call("tools/call", {"name": "create_payment", "arguments": arguments})
        )
        error = mcp_a.json()["result"]
        assert error["isError"] is True
        assert error["structuredContent"]["error_code"] == "L402_INVALID_PARAMS"
        assert "not served" in error["structuredContent"]["error"], error
        assert payment_count(a) == before
        mcp_b = await rpc(
            client_b, call("tools/call", {"name": "create_payment", "arguments": arguments})
        )
        assert mcp_b.json()["result"]["structuredContent"]["amountSats"] == 50
        # Discovery: the least an SMS costs is each node's cheapest row.
        for client, least in ((client_a, 21), (client_b, 33)):
            doc = (await client.get("/api/l402/send-sms")).json()
            assert doc["pricing"]["minSats"] == least


def test_a_validator_without_a_table_refuses_the_number() -> None:
    """Params validated with no app's table (no validation context) fail closed."""
    body = {"phoneNumber": US, "message": "hello"}
    with pytest.raises(ValueError, match="no destination table"):
        SendSmsParams.model_validate(body)
    assert (
        SendSmsParams.model_validate(body, context=validation_context(BUILTIN)).phone_number == US
    )
