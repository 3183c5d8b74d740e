"""Provider kind ``replicate``: hosted models on Replicate's predictions API.

- model names: ``owner/name`` (the model's latest version: ``POST
  /v1/models/{owner}/{name}/predictions``), ``owner/name:<version>`` or a bare 64-hex
  version id (``POST /v1/predictions`` with ``version``);
- ``Prefer: wait=N`` (``prefer_wait_s``, default 10, 0 to turn off) so short operations
  finish within the create call; longer ones are polled at ``GET /v1/predictions/{id}``
  and, unless ``webhooks = false``, reported by webhooks (``webhook_events_filter``
  start and completed) to ``<public base URL>/api/webhooks/replicate/<NAME>``, verified
  with the account's signing secret (``webhook_secret = "whsec_..."``, else read once from
  ``GET /v1/webhooks/default/secret``) by the ``webhook-id`` / ``webhook-timestamp`` /
  ``webhook-signature`` scheme, within 5 minutes of its timestamp;
- cancellation: ``POST /v1/predictions/{id}/cancel``.

The shared run (webhook or polling, timeouts, refusals, downloads) is
satsgate.engines.providers.prediction_runs; the engines on it,
satsgate.engines.providers.predictions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from satsgate.engines.config import ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.providers.prediction_runs import Prediction, Status
from satsgate.engines.providers.predictions import PredictionProvider
from satsgate.engines.providers.upstream import cause_of, fresh_unix_stamp
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "replicate"
DEFAULT_BASE_URL = "https://api.replicate.com"

# Documented defaults (copy into [providers.NAME.models]); the spec's model id -> model.
DEFAULT_MODELS: Mapping[str, str] = {
    "25": "minimax/hailuo-02",  # generate-video
    "24": "minimax/hailuo-02",  # animate-image (first frame)
    "23": "minimax/music-1.5",  # generate-music
    "17": "firtoz/trellis",  # generate-3d-model (from a photo)
    "35": "851-labs/background-remover",
    "36": "nightmareai/real-esrgan",
    "37": "sczhou/codeformer",
    "41": "arielreplicate/deoldify_image",
    "48": "chenxwh/depth-anything-v2",
    "42": "megvii-research/nafnet",  # deblur-image
    "40": "allenhooo/lama",  # remove-object
    "16": "black-forest-labs/flux-1.1-pro-ultra",  # generate-image, best
    "8": "black-forest-labs/flux-1.1-pro",  # better
    "2": "black-forest-labs/flux-schnell",  # standard
    "18": "black-forest-labs/flux-kontext-pro",  # edit-image
    "39": "adirik/grounding-dino",  # detect-objects, open set
}

_STATUS: Mapping[str, Status] = {
    "starting": "queued",
    "processing": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "canceled",
    "aborted": "canceled",
}
_VERSION = re.compile(r"^[0-9a-f]{64}$")
_PERCENT = re.compile(r"(\d{1,3})%\|")


class ReplicateProvider(PredictionProvider):
    KIND = KIND
    LABEL = "hosted model"
    webhook_kind = KIND
    GENERIC_INPUT_NAMES: Mapping[str, str] = {
        "reference_image": "", "reference_audio": "", "mode": "", "sample_rate": "",
        "bitrate": "", "images": "",
    }  # fmt: skip
    DEFAULT_INPUT_NAMES: Mapping[str, Mapping[str, str]] = {
        "minimax/hailuo-02": {"image": "first_frame_image", "generate_audio": ""},
        "minimax/music-1.5": {"duration": "", "instrumental": "", "output_format": "",
                              "sample_rate": "sample_rate", "bitrate": "bitrate",
                              "audio_format": "audio_format"},
        "firtoz/trellis": {"image": "images", "prompt": ""},
        "sczhou/codeformer": {"fidelity": "codeformer_fidelity"},
        "megvii-research/nafnet": {"mode": ""},
        "arielreplicate/deoldify_image": {"image": "input_image"},
        "black-forest-labs/flux-1.1-pro-ultra": {"width": "", "height": "",
                                                 "image": "image_prompt"},
        "black-forest-labs/flux-1.1-pro": {"aspect_ratio": "", "image": "image_prompt"},
        "black-forest-labs/flux-schnell": {"width": "", "height": "", "image": ""},
        "black-forest-labs/flux-kontext-pro": {"image": "input_image", "resolution": ""},
    }  # fmt: skip

    DEFAULT_INPUT_VALUES: Mapping[str, Mapping[str, Any]] = {
        "megvii-research/nafnet": {"task_type": "Image Debluring (REDS)"},
    }

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self.base_url = config.base_url or DEFAULT_BASE_URL
        self.prefer_wait_s = int(config.options.get("prefer_wait_s", 10))
        secret = config.options.get("webhook_secret", "")
        self._secret: bytes | None = _secret_key(secret) if secret else None

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"}

    def shape_input(self, model: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        shaped = super().shape_input(model, fields)
        base = model.split(":")[0]
        if base == "firtoz/trellis" and isinstance(shaped.get("images"), str):
            shaped["images"] = [shaped["images"]]  # trellis takes a list of views
        if base == "minimax/hailuo-02":
            # It renders 6 or 10 s, at 512p, 768p or 1080p (the spec's 2K).
            if "duration" in shaped:
                shaped["duration"] = 10 if int(shaped["duration"]) > 8 else 6
            if shaped.get("resolution") == "2K":
                shaped["resolution"] = "1080p"
        return shaped

    # -- predictions --------------------------------------------------------------------

    async def create(self, model: str, inputs: dict[str, Any], call_id: str) -> Prediction:
        body: dict[str, Any] = {"input": inputs}
        if ":" in model:
            body["version"] = model.split(":", 1)[1]
            url = f"{self.base_url}/v1/predictions"
        elif _VERSION.match(model):
            body["version"] = model
            url = f"{self.base_url}/v1/predictions"
        else:
            url = f"{self.base_url}/v1/models/{model}/predictions"
        hook = await self._webhook_target()
        if hook:
            body["webhook"] = hook
            body["webhook_events_filter"] = ["start", "completed"]
        headers = self.auth_headers()
        if self.prefer_wait_s > 0:
            headers["Prefer"] = f"wait={min(60, self.prefer_wait_s)}"
        try:
            resp = await self.http.post(url, json=body, headers=headers)
        except Exception as exc:
            log.warning("replicate %s: create failed (%s)", self.config.name, cause_of(exc))
            raise EngineError(ErrorCode.SERVICE_ERROR, "The model could not be reached.") from exc
        self.raise_for_create(resp)
        prediction = _prediction(resp.json())
        if hook:
            prediction.handle["webhook"] = "1"
        return prediction

    async def fetch(self, prediction: Prediction) -> Prediction:
        resp = await self.get(
            f"{self.base_url}/v1/predictions/{prediction.id}", headers=self.auth_headers()
        )
        self.check_poll(resp)
        return _prediction(resp.json())

    async def cancel(self, prediction: Prediction) -> None:
        await self.http.post(
            f"{self.base_url}/v1/predictions/{prediction.id}/cancel", headers=self.auth_headers()
        )

    # -- webhooks -------------------------------------------------------------------------

    async def _webhook_target(self) -> str | None:
        url = self.webhook_url()
        if url is None:
            return None
        if self._secret is None:
            try:
                resp = await self.http.get(
                    f"{self.base_url}/v1/webhooks/default/secret", headers=self.auth_headers()
                )
                resp.raise_for_status()
                self._secret = _secret_key(str(resp.json()["key"]))
            except Exception as exc:  # polling still ends the run
                log.warning(
                    "replicate %s: no webhook signing secret (%s): polling only",
                    self.config.name,
                    cause_of(exc),
                )
                return None
        return url

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> Prediction | None:
        if self._secret is None:
            return None
        msg_id = headers.get("webhook-id", "")
        stamp = headers.get("webhook-timestamp", "")
        signatures = headers.get("webhook-signature", "")
        if not msg_id.isascii() or not msg_id or not signatures or not fresh_unix_stamp(stamp):
            return None
        if not verify_signature(self._secret, msg_id, stamp, body, signatures):
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None  # signed, but no prediction
        try:
            return _prediction(doc)
        except (ValueError, KeyError, TypeError):
            return None


def _secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` signing secret."""
    return base64.b64decode(secret.split("_", 1)[1] if secret.startswith("whsec_") else secret)


def sign(key: bytes, msg_id: str, stamp: str, body: bytes) -> str:
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def verify_signature(key: bytes, msg_id: str, stamp: str, body: bytes, header: str) -> bool:
    """Any ``v1,<base64>`` of the space-separated header matches the HMAC."""
    expected = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    for entry in header.split(" "):
        version, _, value = entry.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except ValueError:
            continue
        if hmac.compare_digest(given, expected):
            return True
    return False


def _prediction(doc: Mapping[str, Any]) -> Prediction:
    status = _STATUS.get(str(doc.get("status")), "running")
    error = doc.get("error") or ""
    if doc.get("status") == "aborted" and not error:
        error = "aborted before it started"
    logs = doc.get("logs") or ""
    progress = None
    if isinstance(logs, str):
        found = _PERCENT.findall(logs[-2000:])
        if found:
            progress = min(100.0, float(found[-1]))
    return Prediction(
        str(doc["id"]),
        status,
        doc.get("output") if status == "succeeded" else None,
        str(error),
        progress,
    )
