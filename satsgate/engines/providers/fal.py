"""Provider kind ``fal``: hosted models on fal's queue API.

- submit ``POST <base>/<model>`` (``owner/app[/subpath]``) with the model's input as JSON
  and ``Authorization: Key <key>``; with webhooks (the default) ``?fal_webhook=`` names
  ``<public base URL>/api/webhooks/fal/<NAME>``;
- status ``GET .../requests/{id}/status``, result ``GET .../requests/{id}``, cancel
  ``PUT .../requests/{id}/cancel``: the URLs the submit answered when they are on the
  queue's host, else built from ``owner/app`` (the subpath is for submits only);
- webhooks verified by fal's Ed25519 scheme: ``X-Fal-Webhook-Signature`` (hex) over
  ``request id \\n user id \\n timestamp \\n sha256(body) hex`` with one of the keys of
  fal's JWKS (``jwks_url``, fetched and cached for a day), within 5 minutes of its
  ``X-Fal-Webhook-Timestamp``.

The shared run (webhook or polling, timeouts, refusals, downloads) is
satsgate.engines.providers.prediction_runs; the engines on it,
satsgate.engines.providers.predictions.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from satsgate.engines.config import ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.providers.prediction_parsing import is_refusal, refusal_error
from satsgate.engines.providers.prediction_runs import Prediction, Status
from satsgate.engines.providers.predictions import PredictionProvider
from satsgate.engines.providers.upstream import cause_of, fresh_unix_stamp
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "fal"
DEFAULT_BASE_URL = "https://queue.fal.run"
DEFAULT_JWKS_URL = "https://rest.alpha.fal.ai/.well-known/jwks.json"
JWKS_TTL_S = 86400

# Documented defaults (copy into [providers.NAME.models]); the spec's model id -> model.
DEFAULT_MODELS: Mapping[str, str] = {
    "25": "fal-ai/kling-video/v2.1/master/text-to-video",
    "24": "fal-ai/kling-video/v2.1/master/image-to-video",
    "23": "fal-ai/stable-audio",
    "17": "fal-ai/trellis",
    "35": "fal-ai/birefnet",
    "36": "fal-ai/esrgan",
    "37": "fal-ai/codeformer",
    "41": "fal-ai/ddcolor",
    "48": "fal-ai/imageutils/depth",
    "16": "fal-ai/flux-pro/v1.1-ultra",  # generate-image, best
    "8": "fal-ai/flux-pro/v1.1",  # better
    "2": "fal-ai/flux/schnell",  # standard
    "18": "fal-ai/flux-pro/kontext",  # edit-image
}

_STATUS: Mapping[str, Status] = {"IN_QUEUE": "queued", "IN_PROGRESS": "running"}


class FalProvider(PredictionProvider):
    KIND = KIND
    LABEL = "hosted model"
    webhook_kind = KIND
    GENERIC_INPUT_NAMES: Mapping[str, str] = {
        "image": "image_url", "reference_image": "", "reference_audio": "", "mode": "",
        "resolution": "", "sample_rate": "", "bitrate": "", "instrumental": "", "images": "",
        "width": "", "height": "",
    }  # fmt: skip
    DEFAULT_INPUT_NAMES: Mapping[str, Mapping[str, str]] = {
        "fal-ai/kling-video/v2.1/master/text-to-video": {"generate_audio": ""},
        "fal-ai/kling-video/v2.1/master/image-to-video": {"generate_audio": ""},
        "fal-ai/stable-audio": {"duration": "seconds_total", "lyrics": "",
                                "output_format": ""},
        "fal-ai/esrgan": {"face_enhance": "face"},
        "fal-ai/flux-pro/v1.1": {"aspect_ratio": ""},  # image_size from width and height
        "fal-ai/flux/schnell": {"aspect_ratio": "", "image": ""},
        "fal-ai/flux-pro/kontext": {"aspect_ratio": ""},
    }  # fmt: skip

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self.base_url = config.base_url or DEFAULT_BASE_URL
        self.jwks_url = str(config.options.get("jwks_url", DEFAULT_JWKS_URL))
        self._keys: list[Ed25519PublicKey] = []
        self._keys_at = 0.0

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Key {self.config.api_key}"}

    def shape_input(self, model: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        shaped = super().shape_input(model, fields)
        if model.startswith("fal-ai/kling-video") and "duration" in shaped:
            shaped["duration"] = "10" if int(shaped["duration"]) > 7 else "5"
        if model in ("fal-ai/flux-pro/v1.1", "fal-ai/flux/schnell") and "prompt" in fields:
            shaped["image_size"] = {"width": fields.get("width"), "height": fields.get("height")}
        return shaped

    # -- predictions --------------------------------------------------------------------

    async def create(self, model: str, inputs: dict[str, Any], call_id: str) -> Prediction:
        url = f"{self.base_url}/{model.strip('/')}"
        hook = await self._webhook_target()
        if hook:
            url += f"?fal_webhook={quote(hook, safe='')}"
        try:
            resp = await self.http.post(url, json=inputs, headers=self.auth_headers())
        except Exception as exc:
            log.warning("fal %s: submit failed (%s)", self.config.name, cause_of(exc))
            raise EngineError(ErrorCode.SERVICE_ERROR, "The model could not be reached.") from exc
        self.raise_for_create(resp)
        doc = resp.json()
        request_id = str(doc["request_id"])
        app = "/".join(model.strip("/").split("/")[:2])
        own = f"{self.base_url}/{app}/requests/{request_id}"
        handle = {
            "status_url": self._own(doc.get("status_url"), f"{own}/status"),
            "response_url": self._own(doc.get("response_url"), own),
            "cancel_url": self._own(doc.get("cancel_url"), f"{own}/cancel"),
        }
        if hook:
            handle["webhook"] = "1"
        return Prediction(request_id, "queued", handle=handle)

    def _own(self, given: object, fallback: str) -> str:
        """A URL the queue answered, when it is on the queue's host (the key goes nowhere
        else), else the one built from the model's owner/app."""
        if isinstance(given, str) and urlsplit(given).netloc == urlsplit(self.base_url).netloc:
            return given
        return fallback

    async def fetch(self, prediction: Prediction) -> Prediction:
        resp = await self.get(prediction.handle["status_url"], headers=self.auth_headers())
        self.check_poll(resp)
        doc = resp.json()
        status = str(doc.get("status"))
        if status == "COMPLETED":
            error = doc.get("error")
            if error:
                return Prediction(prediction.id, "failed", error=_text(error, doc), said=str(error))
            return Prediction(prediction.id, "succeeded")
        return Prediction(prediction.id, _STATUS.get(status, "running"))

    async def result(self, prediction: Prediction) -> Any:
        resp = await self.get(prediction.handle["response_url"], headers=self.auth_headers())
        if 400 <= resp.status_code < 500 and resp.status_code != 429:
            detail = _text(resp.text, None)
            said: object = resp.text
            with contextlib.suppress(ValueError):
                said = resp.json().get("detail")
                detail = _text(said, resp.json())
            if is_refusal(detail):
                raise refusal_error(said)
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The model failed to produce an output.",
                may_fall_back=False,
            )
        self.check_poll(resp)
        return resp.json()

    async def cancel(self, prediction: Prediction) -> None:
        url = prediction.handle.get("cancel_url")
        if url:
            await self.http.put(url, headers=self.auth_headers())

    # -- webhooks -------------------------------------------------------------------------

    async def _webhook_target(self) -> str | None:
        url = self.webhook_url()
        if url is None:
            return None
        if not self._keys or time.time() - self._keys_at > JWKS_TTL_S:
            try:
                resp = await self.http.get(self.jwks_url)
                resp.raise_for_status()
                self._keys = _jwks_keys(resp.json())
                self._keys_at = time.time()
            except Exception as exc:  # polling still ends the run
                log.warning(
                    "fal %s: webhook keys unavailable (%s): polling only",
                    self.config.name,
                    cause_of(exc),
                )
        return url if self._keys else None

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> Prediction | None:
        request_id = headers.get("x-fal-webhook-request-id", "")
        user_id = headers.get("x-fal-webhook-user-id", "")
        stamp = headers.get("x-fal-webhook-timestamp", "")
        signature = headers.get("x-fal-webhook-signature", "")
        if not (request_id and user_id and signature and self._keys):
            return None
        if not fresh_unix_stamp(stamp):
            return None
        try:
            sig = bytes.fromhex(signature)
        except ValueError:
            return None
        message = f"{request_id}\n{user_id}\n{stamp}\n{hashlib.sha256(body).hexdigest()}"
        if not any(_verifies(key, sig, message.encode()) for key in self._keys):
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if not isinstance(doc, dict) or str(doc.get("request_id")) != request_id:
            return None
        if doc.get("status") == "OK" and doc.get("payload") is not None:
            return Prediction(request_id, "succeeded", doc["payload"])
        if doc.get("status") == "OK":  # payload too large to send: fetch the result
            return Prediction(request_id, "succeeded")
        payload = doc.get("payload")
        detail = payload.get("detail") if isinstance(payload, dict) else None
        return Prediction(
            request_id,
            "failed",
            error=_text(doc.get("error"), payload),
            # The model's words are the payload's detail; the webhook's error is fal's
            # own line ("Invalid status code: 422").
            said=detail if isinstance(detail, str) else str(doc.get("error") or ""),
        )


def _verifies(key: Ed25519PublicKey, sig: bytes, message: bytes) -> bool:
    try:
        key.verify(sig, message)
    except InvalidSignature:
        return False
    return True


def _jwks_keys(doc: Mapping[str, Any]) -> list[Ed25519PublicKey]:
    keys = []
    for jwk in doc.get("keys", []):
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519" and jwk.get("x"):
            raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
            keys.append(Ed25519PublicKey.from_public_bytes(raw))
    return keys


def _text(error: object, payload: object) -> str:
    parts = [str(error or "")]
    if payload:
        parts.append(json.dumps(payload)[:1000] if not isinstance(payload, str) else payload)
    return " ".join(p for p in parts if p)
