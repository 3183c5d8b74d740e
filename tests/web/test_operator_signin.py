"""The operator's dashboard sessions on their own: expiry, the Secure flag, the bound on
how many live at once, and rotation by replacing the token file."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from satsgate.operator import rotate_operator_token
from satsgate.web.operator_signin import (
    COOKIE,
    MAX_SESSIONS,
    SESSION_TTL_S,
    OperatorAccess,
)


def with_cookie(session_id: str) -> web.Request:
    return make_mocked_request("GET", "/operator", headers={"Cookie": f"{COOKIE}={session_id}"})


def test_a_session_ends_at_its_expiry(tmp_path: Path) -> None:
    now = [1_000_000.0]
    access = OperatorAccess(tmp_path, clock=lambda: now[0])
    session_id = access.open_session()
    now[0] += SESSION_TTL_S - 1
    assert access.session(with_cookie(session_id)) == session_id
    now[0] += 1
    assert access.session(with_cookie(session_id)) is None
    now[0] -= 10  # the clock going back does not revive it: it was deleted
    assert access.session(with_cookie(session_id)) is None


def test_the_cookie_is_secure_when_the_node_is_served_over_https(tmp_path: Path) -> None:
    for https, secure in ((True, True), (False, False)):
        access = OperatorAccess(tmp_path, https=https)
        resp = web.Response()
        access.set_cookie(with_cookie(""), resp, access.open_session())
        morsel = resp.cookies[COOKIE]
        assert morsel["httponly"] is True and morsel["samesite"] == "Strict"
        assert bool(morsel["secure"]) is secure
        assert int(morsel["max-age"]) == SESSION_TTL_S


def test_the_oldest_session_makes_room(tmp_path: Path) -> None:
    now = [0.0]
    access = OperatorAccess(tmp_path, clock=lambda: now[0])
    opened = []
    for _ in range(MAX_SESSIONS + 1):
        now[0] += 1
        opened.append(access.open_session())
    assert access.session(with_cookie(opened[0])) is None
    assert all(access.session(with_cookie(s)) == s for s in opened[1:])


def test_a_token_file_replaced_under_a_running_server_ends_its_sessions(tmp_path: Path) -> None:
    access = OperatorAccess(tmp_path)
    old = access.token()
    session_id = access.open_session()
    assert access.session(with_cookie(session_id)) == session_id
    new = rotate_operator_token(tmp_path)
    assert new != old and access.token() == new
    assert access.session(with_cookie(session_id)) is None
    assert not access.token_matches(old) and access.token_matches(new)
    (tmp_path / "operator_token").unlink()  # deleted by hand: a new token, no session
    fresh = access.open_session()
    assert access.token() not in (old, new)
    assert access.session(with_cookie(fresh)) == fresh
