"""The voice bridge's provider-facing routes (services/comms/bridge_calls.py):

- ``GET /api/voice-bridge/media/{token}``: the call's media WebSocket, which the
  telephony provider opens once the call is answered. The token is the session's own
  (32 random bytes, in the URL given to the provider when dialing); an unknown token, an
  ended session or a second connection is refused with 403 before the upgrade.
- ``POST /api/voice-bridge/status/{token}``: the provider's call-status callbacks,
  verified by the engine (Twilio: ``X-Twilio-Signature`` over the URL and the form);
  a forged one is refused with 403 and changes nothing.

Neither is for callers: they are free, never priced, and answer no envelope.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from aiohttp import web

from satsgate.services.comms.bridge_calls import MEDIA_PATH, STATUS_PATH, BridgeCalls

MAX_STATUS_BODY = 16 * 1024
# A media frame is 20 ms of audio (about 300 bytes of JSON); one of our own says is
# bounded too. Anything bigger is not the provider's protocol.
MAX_FRAME_BYTES = 64 * 1024
TOKEN_MAX_CHARS = 128


def install(app: web.Application, key: web.AppKey[BridgeCalls]) -> None:
    async def media(request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        sessions = request.app[key]
        live = await sessions.media_target(token) if len(token) <= TOKEN_MAX_CHARS else None
        if live is None:
            return web.Response(status=403, text="forbidden")
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=None)
        if not ws.can_prepare(request).ok:
            live.claimed = False
            return web.Response(status=400, text="a WebSocket upgrade is expected")
        try:
            await ws.prepare(request)
        except BaseException:
            live.claimed = False
            raise
        await sessions.serve_media(live, ws)
        return ws

    async def status(request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if len(token) > TOKEN_MAX_CHARS:
            return web.Response(status=404)
        if (request.content_length or 0) > MAX_STATUS_BODY:
            return web.Response(status=413)
        body = await request.content.read(MAX_STATUS_BODY + 1)
        if len(body) > MAX_STATUS_BODY:
            return web.Response(status=413)
        form = _form(body)
        headers = {k.lower(): v for k, v in request.headers.items()}
        code = await request.app[key].status_callback(token, form, headers)
        return web.Response(status=code)

    app.router.add_get(MEDIA_PATH, media)
    app.router.add_post(STATUS_PATH, status)


def _form(body: bytes) -> dict[str, list[str]]:
    return parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
