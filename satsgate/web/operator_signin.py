"""The operator's access: the token (bearer, for the API and the CLI) and the dashboard's
server-side sessions, revocable.

Signing in with the operator token opens a session: 32 random bytes (hex) in the
``satsgate_operator`` cookie (HttpOnly, SameSite=Strict, Secure when the node is served
over https); the server keeps only the SHA-256 of it, its expiry and a fingerprint of the
token it was opened with. A cookie counts only while all three hold: the session is
known, unexpired, and was opened with the token in ``<data_dir>/operator_token`` now.

- Signing out deletes the session: the old cookie is refused from then on.
- Rotating the token (``satsgate operator-token --rotate``, the CLN
  ``satsgate-operator-token rotate=true``, or replacing the file by hand) ends every
  session and the old bearer token at once, without a restart: the file is read again
  whenever its inode, size or modification time changes (one ``stat`` of a local file
  per operator request; it never blocks on the network).
- Sessions live in this process's memory: a restart ends them all (the operator signs
  in again). One operator, a handful of sessions, nothing a payer owns depends on them,
  and no table keeps a credential after the process that honoured it is gone.
- At most :data:`MAX_SESSIONS` at a time; a new one beyond that ends the oldest.

CSRF: each session's forms carry HMAC(session id, label), which only whoever holds the
cookie can compute and which dies with the session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from satsgate.constant_time import texts_equal
from satsgate.operator import ensure_operator_token, token_matches, token_path

COOKIE = "satsgate_operator"
SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 32
_SESSION_ID_HEX = 64


def _digest(value: str) -> str:
    # A cookie's bytes beyond UTF-8 reach here as surrogates ("surrogatepass" hashes them).
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _Session:
    expires_at: float
    token_fingerprint: str  # sha256 of the operator token the session was opened with


class OperatorAccess:
    """The operator token as it is on disk now, and the dashboard sessions opened with it."""

    def __init__(
        self, data_dir: Path, *, https: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self._data_dir = data_dir
        self._https = https  # the node's public base URL is https: the cookie is Secure
        self._clock = clock
        self._sessions: dict[str, _Session] = {}  # sha256(session id) -> session
        self._file_state: tuple[int, int, int] | None = None
        self._token = ensure_operator_token(data_dir)
        self._file_state = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = token_path(self._data_dir).stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def token(self) -> str:
        """The operator token in the file now (read again when the file changed)."""
        state = self._stat()
        if state is None or state != self._file_state:
            self._token = ensure_operator_token(self._data_dir)
            self._file_state = self._stat()
            fingerprint = _digest(self._token)
            self._sessions = {
                k: s for k, s in self._sessions.items() if s.token_fingerprint == fingerprint
            }
        return self._token

    def token_matches(self, offered: str) -> bool:
        return token_matches(self.token(), offered)

    def bearer(self, request: web.Request) -> bool:
        """``Authorization: Bearer <the operator token>``."""
        auth = request.headers.get("Authorization", "")
        return auth.lower().startswith("bearer ") and self.token_matches(auth[7:])

    def open_session(self) -> str:
        """A new session (the caller has checked the token); its id goes in the cookie."""
        now = self._clock()
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires_at > now}
        while len(self._sessions) >= MAX_SESSIONS:
            oldest = min(self._sessions, key=lambda k: self._sessions[k].expires_at)
            del self._sessions[oldest]
        session_id = secrets.token_hex(_SESSION_ID_HEX // 2)
        self._sessions[_digest(session_id)] = _Session(now + SESSION_TTL_S, _digest(self.token()))
        return session_id

    def session(self, request: web.Request) -> str | None:
        """The request's session id, when its cookie names a live session."""
        session_id = request.cookies.get(COOKIE, "")
        # A header's bytes beyond UTF-8 reach here as surrogates: no session id has them.
        if len(session_id) != _SESSION_ID_HEX or not session_id.isascii():
            return None
        fingerprint = _digest(self.token())
        found = self._sessions.get(_digest(session_id))
        if found is None or found.token_fingerprint != fingerprint:
            return None
        if found.expires_at <= self._clock():
            del self._sessions[_digest(session_id)]
            return None
        return session_id

    def end_session(self, request: web.Request) -> None:
        """Sign-out: the request's session (if any) is gone for good."""
        self._sessions.pop(_digest(request.cookies.get(COOKIE, "")), None)

    def authorized(self, request: web.Request) -> bool:
        """The operator's token as a bearer, or a live dashboard session."""
        return self.bearer(request) or self.session(request) is not None

    @staticmethod
    def csrf_token(session_id: str) -> str:
        """The CSRF token of the session's forms."""
        return hmac.new(
            session_id.encode(), b"satsgate operator csrf v2", hashlib.sha256
        ).hexdigest()

    def form_allowed(self, request: web.Request, offered_csrf: str) -> bool:
        """A posted operator form: a live session and that session's CSRF token."""
        session_id = self.session(request)
        return session_id is not None and texts_equal(offered_csrf, self.csrf_token(session_id))

    def set_cookie(self, request: web.Request, resp: web.StreamResponse, session_id: str) -> None:
        resp.set_cookie(
            COOKIE,
            session_id,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure or self._https,
            max_age=SESSION_TTL_S,
        )


def unauthorized() -> web.Response:
    """The operator API's 401 (the operator's API, not the payers': outside the spec's
    error catalog)."""
    return web.json_response(
        {
            "error_code": "OPERATOR_UNAUTHORIZED",
            "message": "Send the operator token (satsgate operator-token) as"
            " Authorization: Bearer <token>.",
        },
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="satsgate operator"'},
    )


OPERATOR = web.AppKey("operator_access", OperatorAccess)
