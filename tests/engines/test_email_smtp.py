"""send-email through the operator's SMTP server: real SMTP servers (aiosmtpd) on loopback,
the delivered message read back; STARTTLS with login; refusals refunded; a message the
server may have taken is never handed to a second provider."""

from __future__ import annotations

import asyncio
import email
import email.policy
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from satsgate.engines import EngineConfigError, EngineError, ProviderConfig
from satsgate.engines.mail import OutgoingEmail
from satsgate.engines.providers.smtp import SmtpEmail
from satsgate.services.catalog.models import EMAIL_MODEL_ID
from satsgate.services.catalog.pricing import EMAIL_SATS
from tests.certs import common_name, issue
from tests.conftest import (
    ThreadedServer,
    free_port,
    http_client,
    make_settings,
    paid_l402_auth,
)

FROM = "node@example.com"


@dataclass
class Mailbox:
    """An aiosmtpd handler that keeps what it receives; refuses recipients whose local
    part starts with ``nobody`` (550) and data whose subject says ``REJECT`` (554)."""

    received: list[tuple[Envelope, EmailMessage]] = field(default_factory=list)

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.startswith("nobody"):
            return "550 5.1.1 mailbox unknown at mx.internal.example"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        if "REJECT" in str(message["Subject"]):
            return "554 5.7.1 message refused as spam"
        self.received.append((envelope, message))
        return "250 OK queued"


class Logins:
    def __init__(self) -> None:
        self.seen: list[tuple[bytes, bytes]] = []

    def __call__(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        mechanism: str,
        auth_data: Any,
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        self.seen.append((auth_data.login, auth_data.password))
        ok = (auth_data.login, auth_data.password) == (b"node", b"s3cret")
        return AuthResult(success=ok)


@dataclass
class Smtp:
    mailbox: Mailbox
    port: int
    logins: Logins | None = None


def _serve(controller: Controller) -> Iterator[None]:
    controller.start()
    try:
        yield
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cert = issue(common_name("localhost"), hosts=("localhost", "127.0.0.1"))
    return cert.write(tmp_path_factory.mktemp("smtp-tls"), "server")


@pytest.fixture(scope="module")
def tls_smtp(tls_files: tuple[Path, Path]) -> Iterator[Smtp]:
    """STARTTLS required, login required over TLS."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*tls_files)
    box, logins, port = Mailbox(), Logins(), free_port()
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        tls_context=context,
        require_starttls=True,
        authenticator=logins,
        auth_required=True,
        auth_require_tls=True,
    )
    for _ in _serve(controller):
        yield Smtp(box, port, logins)


@pytest.fixture(scope="module")
def plain_smtps() -> Iterator[tuple[Smtp, Smtp]]:
    """Two plain servers (no TLS, no login) for the fallback chain."""
    first, second = Smtp(Mailbox(), free_port()), Smtp(Mailbox(), free_port())
    a = Controller(first.mailbox, hostname="127.0.0.1", port=first.port)
    b = Controller(second.mailbox, hostname="127.0.0.1", port=second.port)
    for _ in _serve(a):
        for _ in _serve(b):
            yield first, second


@pytest.fixture(scope="module")
def tls_node(
    tmp_path_factory: pytest.TempPathFactory, tls_smtp: Smtp, tls_files: tuple[Path, Path]
) -> Iterator[ThreadedServer]:
    """email = [a server that is down, the STARTTLS one]: the first falls back."""
    import os

    os.environ["SATSGATE_TEST_SMTP_PASSWORD"] = "s3cret"
    providers = {
        "down": {
            "kind": "smtp",
            "host": "127.0.0.1",
            "port": free_port(),
            "from_address": FROM,
            "starttls": False,
            "timeout_s": 5,
        },
        "mail": {
            "kind": "smtp",
            "host": "localhost",
            "port": tls_smtp.port,
            "from_address": FROM,
            "starttls": True,
            "username": "node",
            "password_env": "SATSGATE_TEST_SMTP_PASSWORD",
            "ca_file": str(tls_files[0]),
            "from_name": "Satsgate node",
            "timeout_s": 10,
        },
    }
    settings = make_settings(
        tmp_path_factory.mktemp("email-tls"),
        providers=providers,
        engines={"email": ["down", "mail"]},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()
    del os.environ["SATSGATE_TEST_SMTP_PASSWORD"]


@pytest.fixture(scope="module")
def chain_node(
    tmp_path_factory: pytest.TempPathFactory, plain_smtps: tuple[Smtp, Smtp]
) -> Iterator[ThreadedServer]:
    first, second = plain_smtps
    providers = {
        name: {
            "kind": "smtp",
            "host": "127.0.0.1",
            "port": box.port,
            "from_address": FROM,
            "starttls": False,
        }
        for name, box in (("first", first), ("second", second))
    }
    settings = make_settings(
        tmp_path_factory.mktemp("email-chain"),
        providers=providers,
        engines={"email": ["first", "second"]},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def tls_client(tls_node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(tls_node):
        yield c


@pytest.fixture
async def chain_client(chain_node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(chain_node):
        yield c


async def _paid(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, "send-email", body)
    return await client.post("/api/l402/send-email", json=body, headers={"Authorization": auth})


async def test_delivers_over_starttls_with_login(
    tls_client: httpx.AsyncClient, tls_smtp: Smtp
) -> None:
    before = len(tls_smtp.mailbox.received)
    body = {
        "to": ["alice@example.org", "bob@example.net"],
        "subject": "Invoice paid: Grüße",
        "text": "The Lightning payment arrived.\nThanks!",
        "html": "<p>The <b>Lightning</b> payment arrived.</p>",
        "replyTo": "payer@example.org",
        "fromName": "Shop Bot",
    }
    resp = await _paid(tls_client, body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["success"] is True
    assert doc["accepted"] == ["alice@example.org", "bob@example.net"]
    assert doc["refused"] == []
    assert "refund" not in doc and "partial_refund" not in doc

    assert len(tls_smtp.mailbox.received) == before + 1
    envelope, message = tls_smtp.mailbox.received[-1]
    assert envelope.mail_from == FROM
    assert envelope.rcpt_tos == ["alice@example.org", "bob@example.net"]
    assert message["Subject"] == "Invoice paid: Grüße"
    assert message["From"].addresses[0].addr_spec == FROM
    assert message["From"].addresses[0].display_name == "Shop Bot"
    assert message["Reply-To"] == "payer@example.org"
    assert message["Message-ID"] == doc["messageId"]
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and html is not None
    assert "The Lightning payment arrived.\nThanks!" in text.get_content().replace("\r\n", "\n")
    assert "<b>Lightning</b>" in html.get_content()
    assert tls_smtp.logins is not None and (b"node", b"s3cret") in tls_smtp.logins.seen


async def test_refused_recipient_is_refunded_the_others_are_sent(
    tls_client: httpx.AsyncClient, tls_smtp: Smtp
) -> None:
    body = {"to": ["carol@example.org", "nobody@example.org"], "subject": "Hi", "text": "x"}
    resp = await _paid(tls_client, body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["accepted"] == ["carol@example.org"]
    assert doc["refused"] == [{"to": "nobody@example.org", "code": "550"}]
    assert "internal.example" not in resp.text  # the server's own words stay out
    assert doc["partial_refund"]["amount_sats"] == EMAIL_SATS  # the refused recipient's price
    envelope, _message = tls_smtp.mailbox.received[-1]
    assert envelope.rcpt_tos == ["carol@example.org"]


async def test_every_recipient_refused_refunds_all(
    tls_client: httpx.AsyncClient, tls_smtp: Smtp
) -> None:
    before = len(tls_smtp.mailbox.received)
    resp = await _paid(tls_client, {"to": "nobody@example.org", "subject": "Hi", "text": "x"})
    assert resp.status_code >= 400
    doc = resp.json()
    assert doc["error_code"] == "INVALID_INPUT", doc
    assert doc["refund"]["amount_sats"] == 200
    assert len(tls_smtp.mailbox.received) == before


async def test_a_refusal_at_data_is_refunded_and_never_sent_elsewhere(
    chain_client: httpx.AsyncClient, plain_smtps: tuple[Smtp, Smtp]
) -> None:
    first, second = plain_smtps
    ok = await _paid(chain_client, {"to": "dave@example.org", "subject": "Hello", "text": "y"})
    assert ok.status_code == 200, ok.text
    assert len(first.mailbox.received) == 1 and not second.mailbox.received

    resp = await _paid(
        chain_client,
        {"to": ["e@example.org", "f@example.org"], "subject": "REJECT this", "text": "spam?"},
    )
    assert resp.status_code >= 400
    doc = resp.json()
    assert doc["error_code"] == "INVALID_INPUT", doc
    assert doc["refund"]["amount_sats"] == 400
    assert "spam" not in doc["error"]
    assert len(first.mailbox.received) == 1
    assert not second.mailbox.received  # not retried on the next provider


async def test_catalog_and_quote_agree_on_the_email_price(
    chain_client: httpx.AsyncClient,
) -> None:
    models = (await chain_client.get("/api/l402/models")).json()["models"]
    listed = next(m for m in models if m["id"] == EMAIL_MODEL_ID)
    assert listed["name"] == "E-mail" and listed["priceSats"] == 200
    body = {"to": ["a@example.org", "b@example.org", "c@example.org"], "subject": "s", "text": "t"}
    resp = await chain_client.post("/api/l402/send-email", json=body)
    assert resp.status_code == 402
    assert resp.json()["amountSats"] == 3 * listed["priceSats"]


def test_configuration_errors_are_refused_at_start() -> None:
    def build(**options: Any) -> SmtpEmail:
        base: dict[str, Any] = {"host": "smtp.example.com", "from_address": FROM}
        return SmtpEmail(ProviderConfig("mail", "smtp", options={**base, **options}), {})

    assert build().port == 587 and build().start_tls is None
    assert build(port=465).use_tls is True
    with pytest.raises(EngineConfigError, match="host"):
        SmtpEmail(ProviderConfig("mail", "smtp", options={"from_address": FROM}), {})
    with pytest.raises(EngineConfigError, match="from_address"):
        build(from_address="nobody")
    with pytest.raises(EngineConfigError, match="not set"):
        build(username="u", password_env="NOT_SET_ANYWHERE")
    with pytest.raises(EngineConfigError, match="go together"):
        build(username="u")
    with pytest.raises(EngineConfigError, match="port"):
        build(port="587")
    with pytest.raises(EngineConfigError, match="unknown"):
        build(hots="typo")
    with pytest.raises(EngineConfigError, match="exclude"):
        build(tls=True, starttls=True)


class DropsAtData(Mailbox):
    """Takes the message, then hangs up before answering: it may have been sent."""

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        await super().handle_DATA(server, session, envelope)
        transport = server.transport  # asyncio's or uvloop's, whose classes are its own
        assert transport is not None
        cast(asyncio.WriteTransport, transport).abort()
        return "250 OK"


async def test_implicit_tls_and_a_hang_up_after_the_data(tls_files: tuple[Path, Path]) -> None:
    """The adapter alone against real servers: implicit TLS (port 465 style) delivers; a
    server that hangs up once it has the data gives an error that never falls back."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*tls_files)
    box, port = Mailbox(), free_port()
    dropping, drop_port = DropsAtData(), free_port()
    message = OutgoingEmail(to=("gina@example.org",), subject="TLS", text="over TLS")
    for _ in _serve(Controller(box, hostname="127.0.0.1", port=port, ssl_context=context)):
        engine = SmtpEmail(
            ProviderConfig(
                "mail",
                "smtp",
                timeout_s=10,
                options={
                    "host": "localhost",
                    "port": port,
                    "from_address": FROM,
                    "tls": True,
                    "ca_file": str(tls_files[0]),
                },
            ),
            {},
        )
        sent = await engine.send(message)
        assert sent.accepted == ("gina@example.org",)
        envelope, received = box.received[-1]
        assert envelope.rcpt_tos == ["gina@example.org"] and received["Subject"] == "TLS"
    for _ in _serve(Controller(dropping, hostname="127.0.0.1", port=drop_port)):
        engine = SmtpEmail(
            ProviderConfig(
                "mail",
                "smtp",
                timeout_s=10,
                options={
                    "host": "127.0.0.1",
                    "port": drop_port,
                    "from_address": FROM,
                    "starttls": False,
                },
            ),
            {},
        )
        with pytest.raises(EngineError) as caught:
            await engine.send(message)
        assert caught.value.may_fall_back is False
        assert "may or may not have been sent" in caught.value.message
        assert len(dropping.received) == 1
