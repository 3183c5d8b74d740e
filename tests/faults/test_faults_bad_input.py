"""Hostile input against a real server: every reader answers 400 in its envelope, never 500
(a malformed Payment credential: the core draft's 402 with a fresh challenge)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import time
from typing import Any

import httpx
import pytest

from satsgate.edge.json_input import MAX_DEPTH, JsonInputError, loads
from tests.conftest import ThreadedServer, paid_l402_auth

DEEP = b"[" * 2500 + b"]" * 2500  # RecursionError in json.loads
TOO_DEEP = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)  # parses, but deeper than allowed
HUGE_INT = b'{"title": ' + b"7" * 5000 + b"}"  # ValueError: over 4300 digits
HUGE_DIGITS = b"9" * 5000
NESTED_FIELD = b'{"template": "headline", "title": ' + b"[" * 60 + b"]" * 60 + b"}"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


CASES: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
    # (name, path, body, headers, status, error code or JSON-RPC code)
    ("paid deep", "/api/l402/render-card", DEEP, {}, 400, "L402_INVALID_PARAMS"),
    ("paid too deep", "/api/l402/render-card", TOO_DEEP, {}, 400, "L402_INVALID_PARAMS"),
    ("paid huge int", "/api/l402/render-card", HUGE_INT, {}, 400, "L402_INVALID_PARAMS"),
    ("paid nested field", "/api/l402/render-card", NESTED_FIELD, {}, 400, "L402_INVALID_PARAMS"),
    ("path model deep", "/api/m/render-card/any", DEEP, {}, 400, "L402_INVALID_PARAMS"),
    ("ai-call deep", "/api/l402/ai-call", DEEP, {}, 400, "L402_INVALID_PARAMS"),
    ("refund deep", "/api/l402/refund", DEEP, {}, 400, "L402_INVALID_PARAMS"),
    ("refund huge int", "/api/l402/refund", HUGE_INT, {}, 400, "L402_INVALID_PARAMS"),
    ("mcp deep", "/api/mcp", DEEP, {}, 400, "-32700"),
    ("mcp too deep", "/api/mcp", TOO_DEEP, {}, 400, "-32700"),
    ("mcp huge int", "/api/mcp", b'{"id": ' + HUGE_DIGITS + b"}", {}, 400, "-32700"),
    (
        "mpp deep",
        "/api/l402/render-card",
        b'{"template": "headline", "title": "x"}',
        {"Authorization": "Payment " + b64url(DEEP)},
        402,
        "MALFORMED_CREDENTIAL",
    ),
    (
        "paid lone surrogate",
        "/api/l402/render-card",
        b'{"template": "headline", "title": "\\ud800"}',
        {},
        400,
        "L402_INVALID_PARAMS",
    ),
    (
        "paid blank field",  # the renderer's rule: a field of spaces is empty
        "/api/l402/render-card",
        b'{"template": "headline", "title": "x", "subtitle": "   "}',
        {},
        400,
        "L402_INVALID_PARAMS",
    ),
    (
        "paid NUL",
        "/api/l402/render-card",
        b'{"template": "headline", "title": "x\\u0000"}',
        {},
        400,
        "L402_INVALID_PARAMS",
    ),
    ("mcp NUL", "/api/mcp", b'{"id": 1, "method": "tools/call\\u0000"}', {}, 400, "-32700"),
    ("dev node, not an object", "/api/dev/outgoing-mode", b"[]", {}, 400, "INVALID_INPUT"),
    ("mcp lone surrogate", "/api/mcp", b'{"id": 1, "method": "\\udfff"}', {}, 400, "-32700"),
    (
        "mpp lone surrogate",
        "/api/l402/render-card",
        b'{"template": "headline", "title": "x"}',
        {"Authorization": "Payment " + b64url(b'{"challenge": {"id": "\\ud800"}}')},
        402,
        "MALFORMED_CREDENTIAL",
    ),
    (
        "mpp huge int",
        "/api/l402/render-card",
        b'{"template": "headline", "title": "x"}',
        {"Authorization": "Payment " + b64url(b'{"challenge": ' + b"1" * 5000 + b"}")},
        402,
        "MALFORMED_CREDENTIAL",
    ),
]


@pytest.mark.parametrize(
    ("name", "path", "body", "headers", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
async def test_bad_json_is_a_400_envelope(
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    name: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    with caplog.at_level(logging.ERROR):
        resp = await client.post(
            path, content=body, headers={"Content-Type": "application/json", **headers}
        )
    assert resp.status_code == status, resp.text[:300]
    payload = resp.json()
    if code.startswith("-"):
        assert payload["error"]["code"] == int(code)
    else:
        assert payload["error_code"] == code
        assert resp.headers["X-Error-Code"] == code
        assert payload["error"] and payload["suggestion"]
    if status == 402:  # a refused Payment credential comes with a fresh challenge
        assert resp.headers["Content-Type"].startswith("application/problem+json")
        assert payload["type"].endswith("/malformed-credential")
        assert any(v.startswith("Payment ") for v in resp.headers.get_list("WWW-Authenticate"))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def raw_request(server: ThreadedServer, data: bytes) -> tuple[bytes, Any]:
    head, body = raw_exchange(server, data)
    return head, json.loads(body)


def raw_exchange(server: ThreadedServer, data: bytes) -> tuple[bytes, bytes]:
    """``data`` sent as it is; the answer's head and body (the server closes)."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        sock.settimeout(5)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    head, _, body = received.partition(b"\r\n\r\n")
    return head, body


RAW_CASES = [
    ("oversized header", b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"),
    ("bad content-length", b"POST /api/l402/refund HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
    ("bad request line", b"GET /api/health\x00 HTTP/1.1\r\nHost: x\r\n\r\n"),
    (
        "bad chunked body",
        b"POST /api/l402/refund HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ),
]


@pytest.mark.parametrize(("name", "data"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_aiohttp_parser_errors_answer_the_envelope(
    server: ThreadedServer, caplog: pytest.LogCaptureFixture, name: str, data: bytes
) -> None:
    with caplog.at_level(logging.DEBUG):
        head, body = raw_request(server, data)
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"400", head
    assert b"application/json" in head
    assert b"X-Error-Code: INVALID_INPUT" in head
    assert body["error_code"] == "INVALID_INPUT"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_client_cut_off_mid_upload_is_one_debug_line(
    server: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    with caplog.at_level(logging.DEBUG, logger="satsgate"):
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /api/l402/render-card HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 50000\r\n\r\n{"
                    + b" "
                    * 1000
                )
                time.sleep(0.1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            lines = [r for r in caplog.records if "ended early" in r.getMessage()]
            if len(lines) >= 3:
                break
            time.sleep(0.05)
    assert len(lines) == 3
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in lines)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_json_reader_alone() -> None:
    assert loads(b'{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    assert loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    # A surrogate pair is one character; a lone surrogate, escaped or as raw bytes, is
    # no text at all.
    assert loads(b'["\\ud83d\\ude00", "\xed\x95\x9c"]') == ["\U0001f600", "\ud55c"]
    lone = (b'"\\ud800"', b'{"\\udfff": 1}', b'["\xed\xa0\x80"]', '"\ud800"')
    for bad in (DEEP, TOO_DEEP, HUGE_INT, b"\xff\xfe", b"{", *lone):
        with pytest.raises(JsonInputError):
            loads(bad)


CARD = {"template": "headline", "title": "x"}


def _echoing(challenge_id: str, intent: str) -> str:
    """A Payment credential whose echoed challenge has ``challenge_id`` (never issued)."""
    challenge = {"id": challenge_id, "realm": "x", "method": "lightning", "intent": intent,
                 "request": b64url(b"{}"), "expires": "2099-01-01T00:00:00Z"}  # fmt: skip
    doc = {"challenge": challenge, "payload": {"preimage": "0" * 64, "action": "bearer"}}
    return "Payment " + b64url(json.dumps(doc).encode())


async def test_secrets_beyond_ascii_are_refused_not_500(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A secret a client sends is compared with the expected one as bytes: text beyond
    ASCII (which hmac.compare_digest refuses as str) is a wrong secret, not a crash."""
    with caplog.at_level(logging.ERROR):
        for intent in ("charge", "session"):
            auth = {"Authorization": _echoing("\u00e9" * 10, intent)}
            resp = await client.post("/api/l402/render-card", json=CARD, headers=auth)
            assert resp.status_code == 402, resp.text[:300]
            assert resp.json()["error_code"] == "PAYMENT_INVALID"
        unpaid = (await client.post("/api/l402/render-card", json=CARD)).json()
        auth = {"Authorization": _echoing("\u00e9" * 10, "charge")}
        refund = await client.post(
            "/api/l402/refund",
            json={"paymentId": unpaid["paymentId"], "invoice": unpaid["invoice"]},
            headers=auth,
        )
        assert refund.status_code in (401, 402, 403), refund.text[:300]
        paid = await paid_l402_auth(client, "render-card", CARD)
        served = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": paid}
        )
        url = served.json()["image_url"]
        forged = url[: url.index("sig=") + 4] + "%C3%A9" * 8
        assert (await client.get(forged)).status_code == 404
        appeal = await client.post("/appeal", data={"t": "hold_abc.\u00e9\u00e9", "action": "view"})
        assert appeal.status_code == 404
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("accept", "problem"),
    [
        ("application/problem+json; charset=utf-8", True),
        ("application/json, application/problem+json;q=0.5;charset=utf-8", True),
        ("application/problem+json;q=2", False),  # not a qvalue: the item does not count
        ("application/problem+json;q=0", False),
    ],
)
async def test_an_accept_header_with_media_parameters_gets_its_402(
    client: httpx.AsyncClient, accept: str, problem: bool
) -> None:
    """RFC 9110 allows parameters beside q in Accept; they used to make every 402 a 500,
    and a refunded payment's answer (its refund link) was lost with it."""
    resp = await client.post("/api/l402/render-card", json=CARD, headers={"Accept": accept})
    assert resp.status_code == 402, resp.text[:300]
    kind = resp.headers["Content-Type"].split(";")[0]
    assert kind == ("application/problem+json" if problem else "application/json")
    assert resp.json()["invoice"]


@pytest.mark.parametrize(
    ("method", "path", "form"),
    [
        ("GET", "/api/l402/job-status?requestId=%00", None),
        ("GET", "/api/lnurlw/%00", None),
        ("GET", "/api/payments/pay_%00", None),
        ("POST", "/recover", {"refund_secret": "ab\x00"}),
        ("POST", "/appeal", {"t": "hold_x.\x00", "action": "view"}),
    ],
)
async def test_a_nul_character_anywhere_is_a_400(
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    form: dict[str, str] | None,
) -> None:
    """No path segment, query parameter or form field takes a NUL; PostgreSQL's text
    cannot hold one, and a lookup by such an id answered 500 there."""
    with caplog.at_level(logging.ERROR):
        resp = await client.request(method, path, data=form)
    assert resp.status_code == 400, resp.text[:300]
    assert resp.json()["error_code"] == "INVALID_INPUT"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "header",
    [b"Authorization: Bearer \xff\xfe", b"Cookie: satsgate_operator=" + b"\xff" * 64],
    ids=["bearer", "cookie"],
)
def test_operator_credentials_beyond_utf8_are_refused_not_500(
    server: ThreadedServer, caplog: pytest.LogCaptureFixture, header: bytes
) -> None:
    """A header's bytes that are not UTF-8 reach the app as surrogates; comparing them
    with the operator's token or a session id raised instead of refusing."""
    with caplog.at_level(logging.ERROR):
        head, body = raw_request(
            server,
            b"GET /api/operator/ledger HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + header
            + b"\r\n\r\n",
        )
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"401", head
    assert body["error_code"] == "OPERATOR_UNAUTHORIZED"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", b"refund_secret=\xff\xfe"),
        ("application/x-www-form-urlencoded; charset=foo", b"refund_secret=a"),
        ("multipart/form-data", b"no boundary named"),
        ("multipart/form-data; boundary=x", b"garbage"),
    ],
    ids=["not-utf8", "unknown-charset", "no-boundary", "no-parts"],
)
async def test_a_form_that_cannot_be_read_is_a_400(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture, content_type: str, body: bytes
) -> None:
    with caplog.at_level(logging.ERROR):
        resp = await client.post("/recover", content=body, headers={"Content-Type": content_type})
    assert resp.status_code == 400, resp.text[:300]
    assert resp.json()["error_code"] == "INVALID_INPUT"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_sign_out_with_a_cookie_beyond_utf8_is_no_500(
    server: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        head, _ = raw_exchange(
            server,
            b"POST /operator/logout HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Cookie: satsgate_operator=\xff\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 3\r\n\r\na=b",
        )
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"303", head
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_body_whose_encoding_does_not_decode_logs_no_error(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp drains what a handler left unread after the answer; a Content-Encoding the
    body does not decode to fails there, the client's error, not logged as ours."""
    with caplog.at_level(logging.ERROR):
        resp = await client.post(
            "/operator/login",
            content=b'{"token": "x"}',
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        await asyncio.sleep(0.2)  # the drain runs after the answer
    assert resp.status_code < 500
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
