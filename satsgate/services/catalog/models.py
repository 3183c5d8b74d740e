"""The model catalog of the spec: every category, id, tier, default and price.

Prices are sats at this edge (the spec's unit). ``price_sats`` is None where
the price is not one number (per character, per second, by destination); then
``pricing`` is "dynamic" and ``price_note`` says how it is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Tier = Literal["best", "better", "standard"]

EMAIL_MODEL_ID = 28


@dataclass(frozen=True)
class Model:
    id: int
    name: str
    category: str
    tier: Tier | None
    price_sats: int | None
    description: str
    is_default: bool = False
    price_note: str = ""
    type: str = ""  # the kind of work, for get_model_pricing

    @property
    def pricing(self) -> str:
        return "fixed" if self.price_sats is not None else "dynamic"

    def as_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "category": self.category,
            "tier": self.tier,
            "isDefault": self.is_default,
            "priceSats": self.price_sats,
            "sats": self.price_sats,
            "description": self.description,
            "pricing": self.pricing,
        }
        if self.price_note:
            entry["priceNote"] = self.price_note
        return entry


MODELS: tuple[Model, ...] = (
    # image [16]
    Model(
        16,
        "Image Best",
        "image",
        "best",
        1200,
        "Top tier: maximum quality, strict content filters.",
        True,
        type="image",
    ),
    Model(
        8,
        "Image Better",
        "image",
        "better",
        150,
        "150 sats at 1K or 300 at 2K, up to 10 reference images, most permissive policy.",
        price_note="150 at 1K, 300 at 2K",
        type="image",
    ),
    Model(
        2,
        "Image Standard",
        "image",
        "standard",
        100,
        "100 flat at 1K, 1 reference image.",
        type="image",
    ),
    # speech [33]
    Model(
        10,
        "Transcription",
        "speech",
        None,
        None,
        "Speech to text, 13 languages.",
        price_note="10 sats per minute of audio",
        type="transcription",
    ),
    Model(
        33,
        "Premium TTS",
        "speech",
        "best",
        None,
        "Premium text-to-speech with emotion control.",
        True,
        price_note="about 16 characters per sat",
        type="tts",
    ),
    Model(
        34,
        "Premium Mini TTS",
        "speech",
        "better",
        None,
        "Premium mini text-to-speech tier.",
        price_note="about 16 characters per sat",
        type="tts",
    ),
    Model(
        43,
        "Global TTS",
        "speech",
        "standard",
        None,
        "Global text-to-speech tier, 602+ languages, voice by description.",
        price_note="about 106 characters per sat",
        type="tts",
    ),
    Model(
        3,
        "Studio TTS",
        "speech",
        None,
        300,
        "Studio text-to-speech tier: voice from a reference clip, MP3 output.",
        price_note="flat 300",
        type="tts",
    ),
    # vision [5]
    Model(
        5,
        "Vision Chat",
        "vision",
        "best",
        21,
        "Describe and answer questions about an image.",
        True,
        type="vision",
    ),
    # text [6]
    Model(
        6,
        "Text Best",
        "text",
        "best",
        None,
        "Best tier, 262K context, vision through an image parameter.",
        True,
        price_note="10 characters per sat, minimum 15 sats",
        type="text",
    ),
    Model(1, "Text Better", "text", "better", 5, "Better tier.", type="text"),
    Model(
        31,
        "Text Standard",
        "text",
        "standard",
        None,
        "Standard tier, 119 languages accepted.",
        price_note="1000 characters per sat, minimum 5 sats",
        type="text",
    ),
    # utility [30]
    Model(29, "HTML to PDF", "utility", None, 50, "HTML or Markdown to PDF.", type="pdf"),
    Model(
        30,
        "Receipt OCR",
        "utility",
        None,
        25,
        "Structured receipt extraction, per page.",
        True,
        type="ocr",
    ),
    Model(
        53,
        "Render Card",
        "utility",
        None,
        5,
        "Headline, versus, list, stat or quote card as PNG or JPEG; deterministic layout, "
        "no AI; the text sent is the text shown.",
        type="card",
    ),
    Model(
        11,
        "File Conversion",
        "utility",
        None,
        100,
        "Convert between document and image formats.",
        type="conversion",
    ),
    Model(13, "PDF Merge", "utility", None, 100, "Merge PDF documents in order.", type="pdf"),
    Model(26, "Utility 26", "utility", None, 100, "Utility model 26.", type="utility"),
    # The spec prices e-mail at 200 per e-mail and lists "26 at 100, 28 at 200": e-mail is
    # model 28, the only utility model at 200. send-email's price derives from this entry
    # (satsgate.services.catalog.pricing FLAT_SATS["email"]).
    Model(
        EMAIL_MODEL_ID,
        "E-mail",
        "utility",
        None,
        200,
        "E-mail through the node's mail server, per recipient.",
        type="email",
    ),
    Model(
        46, "E-signature", "utility", None, 1000, "E-signature, flat per document.", type="esign"
    ),
    Model(
        47,
        "Boarding Pass Wallet",
        "utility",
        None,
        100,
        "Boarding pass to wallet pass, per pass.",
        type="wallet",
    ),
    # search
    Model(15, "Search", "search", None, 21, "Web search.", True, type="search"),
    # 3d [17]
    Model(
        17,
        "Photo or Prompt to 3D",
        "3d",
        None,
        1600,
        "Photo or prompt to GLB; async, up to about 5 minutes.",
        True,
        type="3d",
    ),
    # image_edit
    Model(
        18,
        "Image Edit",
        "image_edit",
        None,
        200,
        "Image editing, flat at any output size.",
        True,
        type="image_edit",
    ),
    # telco
    Model(
        20,
        "Telco",
        "telco",
        None,
        None,
        "SMS and calls, priced by destination.",
        True,
        price_note="by destination country and duration",
        type="telco",
    ),
    # voice cloning
    Model(
        22,
        "Voice Cloning",
        "voice_cloning",
        None,
        7500,
        "Clone a voice from a sample; reusable in text-to-speech.",
        True,
        type="voice_clone",
    ),
    # music [23]
    Model(
        23,
        "Music",
        "music",
        None,
        None,
        "15 to 300 seconds, 44.1 kHz stereo; prepaid with refund on failure.",
        True,
        price_note="5 sats per second (75 to 1500)",
        type="music",
    ),
    # video_from_image [24], video [25]
    Model(
        24,
        "Image to Video",
        "video_from_image",
        None,
        None,
        "Animate an image, 5 to 15 s, native audio; async.",
        True,
        price_note="250 sats per second at 768p, 400 at 2K",
        type="video",
    ),
    Model(
        25,
        "Video",
        "video",
        None,
        None,
        "Text to video, 5 to 15 s, native audio; 2K is upscaled from 768p; async.",
        True,
        price_note="250 sats per second at 768p, 400 at 2K",
        type="video",
    ),
    # ocr [27]
    Model(
        27,
        "Document Extraction",
        "ocr",
        None,
        10,
        "Document to Markdown, per page.",
        True,
        price_note="10 sats per page",
        type="ocr",
    ),
    # image_process [48]
    Model(
        35,
        "Background Removal",
        "image_process",
        None,
        44,
        "Transparent PNG cut-out.",
        type="image_process",
    ),
    Model(36, "Upscale", "image_process", None, 5, "Upscale 2x to 4x.", type="image_process"),
    Model(
        37, "Face Restoration", "image_process", None, 25, "Restore faces.", type="image_process"
    ),
    Model(
        38,
        "NSFW Classification",
        "image_process",
        None,
        2,
        "Returns normal or nsfw.",
        type="image_process",
    ),
    Model(
        39,
        "Object Detection",
        "image_process",
        None,
        5,
        "Open-set object detection: boxes with coordinates and confidence.",
        type="image_process",
    ),
    Model(
        40,
        "Object Eraser",
        "image_process",
        None,
        130,
        "Image plus binary mask: white is erased, black is kept.",
        type="image_process",
    ),
    Model(
        41,
        "Colorization",
        "image_process",
        None,
        5,
        "Colorize a greyscale photo.",
        type="image_process",
    ),
    Model(
        42,
        "Deblur and Denoise",
        "image_process",
        None,
        110,
        "Deblur and denoise a photo.",
        type="image_process",
    ),
    Model(
        48,
        "Depth Estimation",
        "image_process",
        None,
        5,
        "Raw greyscale depth map plus colour visualization.",
        True,
        type="image_process",
    ),
    # Fax / FaxInbound
    Model(44, "Fax Send", "fax", None, 500, "Send a fax.", True, type="fax"),
    Model(45, "Fax Receive", "fax", None, 500, "Receive faxes.", type="fax"),
)

MODELS_BY_ID: dict[int, Model] = {m.id: m for m in MODELS}
CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(m.category for m in MODELS))


def models_in(category: str | None) -> list[Model]:
    return [m for m in MODELS if category is None or m.category == category]


def default_model(category: str) -> Model | None:
    for m in MODELS:
        if m.category == category and m.is_default:
            return m
    return None


def list_models_document(category: str | None = None) -> dict[str, Any]:
    """GET /api/l402/models and the list_models tool."""
    return {
        "models": [m.as_entry() for m in models_in(category)],
        "categories": list(CATEGORIES),
    }
