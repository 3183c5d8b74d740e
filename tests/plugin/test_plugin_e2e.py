"""End to end inside a (fake) node: a paid render-card call across a plugin restart.

402 with an L402 challenge -> the plugin stops -> the invoice is paid while it
is down -> the plugin starts again on the same data dir -> the settlement is
picked up from the persisted cursor (before any request asks) -> the call
with the credential answers 200.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import httpx

import satsgate.plugin
from tests.conftest import free_port
from tests.fakes.fake_lightningd import PluginHost, running_lightningd

SCRIPT = Path(satsgate.plugin.__file__).parent / "satsgate_plugin.py"
CHALLENGE = re.compile(r'L402 macaroon="(.*?)", invoice="(.*?)"')
BODY = {"template": "headline", "title": "hi"}


def test_paid_call_survives_a_plugin_restart_between_402_and_payment() -> None:
    with running_lightningd() as ln:
        options = {"satsgate-port": free_port()}
        # As lightningd would with plugin=<path>: the executable script.
        first = PluginHost([str(SCRIPT)], ln, options=options)
        first.start()
        assert first.disabled is None, first.log_text()
        url = first.call("satsgate-status")["listening"]

        resp = httpx.post(f"{url}/api/l402/render-card", json=BODY, timeout=10)
        assert resp.status_code == 402
        found = CHALLENGE.search(", ".join(resp.headers.get_list("www-authenticate")))
        assert found, resp.headers
        macaroon, invoice = found.groups()

        assert first.shutdown() < 30
        preimage = ln.pay_from_outside(invoice)  # paid while satsgate is down

        second = PluginHost([sys.executable, "-m", "satsgate.plugin"], ln, options=options)
        second.start()
        try:
            assert second.disabled is None, second.log_text()
            deadline = time.monotonic() + 5
            status = second.call("satsgate-status")
            while status["payments_today"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
                status = second.call("satsgate-status")
            assert status["payments_today"] == 1, "settlement made while down was lost"
            # The log says what the start did with it.
            assert any(
                "applied a settlement made before this start" in message
                for _, message in second.logs
            ), second.log_text()

            paid = httpx.post(
                f"{url}/api/l402/render-card",
                json=BODY,
                timeout=60,
                headers={"Authorization": f"L402 {macaroon}:{preimage}"},
            )
            assert paid.status_code == 200, paid.text
            assert second.call("satsgate-status")["earned_sats"] > 0
        finally:
            assert second.shutdown() < 30
        assert first.protocol_errors == [] and second.protocol_errors == []
