"""e-signature with the communication holds (issue 19): a note the screen flags is held
before anything reaches Documenso and, once the operator releases it, sent and followed
to its signed copy like any other; a signer on the do-not-contact list is refused before
any invoice."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from satsgate.operator import ensure_operator_token
from tests.conftest import ThreadedServer, dev_pay, http_client
from tests.engines.test_email_smtp import Mailbox
from tests.fakes.fake_documenso import FakeDocumenso
from tests.services.test_esign import (
    CUSTOMER,
    PDF2,
    SIGNERS,
    _attachment,
    _mail_to,
    _node,
    documenso,
    smtp,
)

__all__ = ["documenso", "smtp"]  # the fixtures, shared with tests/services/test_esign.py

HOSTILE = "This is your bank. Please reply with your PIN and the verification code we sent."


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
    documenso: FakeDocumenso,
    smtp: tuple[Mailbox, int],
) -> Iterator[ThreadedServer]:
    srv = _node(tmp_path_factory.mktemp("esign-holds"), documenso, smtp[1], 3600)
    yield srv
    srv.stop()


@pytest.fixture
async def client(node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(node):
        yield c


def _operator(node: ThreadedServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {ensure_operator_token(node.settings.data_dir)}"}


def _body(note: str, signers: list[dict[str, str]] = SIGNERS) -> dict[str, Any]:
    return {
        "documentBase64": base64.b64encode(PDF2).decode(),
        "signers": signers,
        "customerEmail": CUSTOMER,
        "note": note,
    }


async def test_a_flagged_note_is_held_then_released_and_signed(
    node: ThreadedServer,
    client: httpx.AsyncClient,
    documenso: FakeDocumenso,
    smtp: tuple[Mailbox, int],
) -> None:
    documenso.envelopes.clear()
    smtp[0].received.clear()
    body = _body(HOSTILE)
    challenge = (await client.post("/api/l402/e-signature", json=body)).json()
    preimage = await dev_pay(client, challenge["invoice"])
    auth = f"L402 {challenge['macaroon']}:{preimage}"
    resp = await client.post("/api/l402/e-signature", json=body, headers={"Authorization": auth})
    assert resp.status_code == 451, resp.text
    held = resp.json()
    assert held["error_code"] == "CONTENT_POLICY_HELD" and "refund" not in held
    assert documenso.envelopes == {}  # nothing reached the signers

    released = await client.post(
        f"/api/operator/holds/{held['hold_id']}/release", headers=_operator(node)
    )
    assert released.status_code == 200, released.text
    envelope = documenso.only()  # the handler ran again from the stored request
    assert envelope.payload["meta"]["message"] == HOSTILE
    job = (
        await client.get(
            "/api/l402/job-status", params={"requestId": held["requestId"], "jobType": "held"}
        )
    ).json()
    assert job["status"] == "COMPLETED"
    request_id = job["result"]["requestId"]
    assert envelope.payload["externalId"] == request_id

    assert documenso.complete(envelope.id, f"{node.url}/api/webhooks/documenso/sign") == 200
    message = await _mail_to(smtp[0], CUSTOMER)
    assert _attachment(message)[2] == envelope.signed_pdf


async def test_a_signer_on_the_do_not_contact_list_is_refused_before_any_invoice(
    node: ThreadedServer, client: httpx.AsyncClient, documenso: FakeDocumenso
) -> None:
    documenso.envelopes.clear()
    added = await client.post(
        "/api/operator/do-not-contact",
        json={"address": "Carol@Example.org"},
        headers=_operator(node),
    )
    assert added.status_code == 200, added.text
    signers = [SIGNERS[0], {"name": "Carol", "email": "carol@example.org"}]
    resp = await client.post("/api/l402/e-signature", json=_body("Please sign.", signers))
    assert resp.status_code == 403, resp.text
    assert resp.json()["error_code"] == "RECIPIENT_OPTED_OUT"
    assert "invoice" not in resp.json()
    assert documenso.envelopes == {}
