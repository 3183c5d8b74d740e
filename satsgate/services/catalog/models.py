"""The model catalog of the spec: every category, id, name, tier and default.

A model's price is not kept here: it is the price of the first registered service that
names the model (its ``ServiceSpec``'s price and price shape), so the catalog, the
discovery documents, the estimators and the 402 quote read one number. Prices are sats
at this edge (the spec's unit). ``priceSats`` is None where the price is not one number
(per character, per second, by destination); then ``pricing`` is "dynamic" and
``priceNote`` says how it is computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from satsgate.services.base import sats_for_msat

if TYPE_CHECKING:
    from satsgate.engines import Engines
    from satsgate.services.base import ServiceSpec
    from satsgate.services.catalog.rates import RateBook

Tier = Literal["best", "better", "standard"]

EMAIL_MODEL_ID = 28

# Price shapes whose listed price is the price of one unit (a page, a pass, a recipient).
_ONE_UNIT_SHAPES = ("per_page", "per_pass", "per_recipient")


@dataclass(frozen=True)
class Model:
    id: int
    name: str
    category: str
    tier: Tier | None
    description: str
    is_default: bool = False
    type: str = ""  # the kind of work, for get_model_pricing


@dataclass(frozen=True)
class ModelPrice:
    """What a call on one model costs, as the model catalog lists it."""

    sats: int | None  # None: not one number (then ``note`` says how it is computed)
    note: str = ""

    @property
    def pricing(self) -> str:
        return "fixed" if self.sats is not None else "dynamic"


NOT_SOLD = ModelPrice(None, "no service on this node uses this model")


def model_price(spec: ServiceSpec[Any], model_id: int, book: RateBook) -> ModelPrice:
    """A model's price on ``spec``, from the spec's price shape: a flat price; a tier's
    price (``tier_min_sats``) with its rate; the price of one unit for per-page, per-pass
    and per-recipient prices; else none, with the model's rate or the shape's unit (a
    BTC-pegged minimum at the rate ``book``)."""
    shape = spec.price_shape
    min_sats = sats_for_msat(shape.minimum_msat(book))
    rate = shape.model_rates.get(model_id, "")
    if shape.model == "flat":
        return ModelPrice(min_sats)
    if shape.model == "per_tier" and model_id in shape.tier_min_sats:
        return ModelPrice(shape.tier_min_sats[model_id], rate)
    if shape.model in _ONE_UNIT_SHAPES:
        return ModelPrice(min_sats, f"{min_sats} sats {shape.unit}")
    if rate:
        return ModelPrice(None, rate)
    note = f"{shape.unit}, from {min_sats} sats"
    if shape.rate_by:
        note += " by " + " and ".join(factor.replace("_", " ") for factor in shape.rate_by)
    return ModelPrice(None, note)


def model_prices(services: Iterable[ServiceSpec[Any]], book: RateBook) -> dict[int, ModelPrice]:
    """Each catalog model's price on the first of ``services`` that names it."""
    home: dict[int, ServiceSpec[Any]] = {}
    for spec in services:
        for model_id in spec.model_ids:
            home.setdefault(model_id, spec)
    return {m.id: model_price(home[m.id], m.id, book) if m.id in home else NOT_SOLD for m in MODELS}


def unavailable_models(services: Iterable[ServiceSpec[Any]], engines: Engines) -> dict[int, str]:
    """Why each catalog model cannot run on this node; a model that runs is not a key.

    A model runs when one of ``services`` that names it can run and its engine serves the
    model (the engine's provider maps it, or the local engine lists it)."""
    reasons: dict[int, list[str]] = {m.id: [] for m in MODELS}
    runs: set[int] = set()
    for spec in services:
        service_why = spec.unavailable_reason(engines)
        for model_id in spec.model_ids:
            if model_id not in reasons:
                continue
            why = service_why
            engine = spec.engine
            if why is None and engine is not None and not engines.serves_model(engine, model_id):
                why = f"{spec.title} on this node does not offer this model"
            if why is None:
                runs.add(model_id)
            else:
                reasons[model_id].append(why)
    return {
        model_id: "; ".join(dict.fromkeys(why)) or NOT_SOLD.note
        for model_id, why in reasons.items()
        if model_id not in runs
    }


def defaults_here(services: Iterable[ServiceSpec[Any]], unavailable: Mapping[int, str]) -> set[int]:
    """The model each category's default stands for on this node: the catalog's default
    where it runs, else the model a request naming none is moved to (the service's own
    ``fit_model``: the nearest one that runs), if any runs."""
    defaults = {m.id for m in MODELS if m.is_default and m.id not in unavailable}
    for spec in services:
        default = getattr(spec.params, "DEFAULT", None)
        if not isinstance(default, int) or default not in unavailable:
            continue
        if not MODELS_BY_ID[default].is_default:
            continue
        fitting = spec.params.model_construct()  # a request that names no model
        fit = getattr(fitting, "fit_model", None)
        if fit is None:
            continue
        fit(lambda model_id: model_id not in unavailable)
        chosen = fitting.chosen_model
        if chosen not in unavailable:
            defaults.add(chosen)
    return defaults


def model_entry(
    model: Model, price: ModelPrice, unavailable: str | None, is_default: bool
) -> dict[str, Any]:
    """One model as the catalog lists it: a model that cannot run here says why and is
    never the default (``defaults_here``)."""
    entry: dict[str, Any] = {
        "id": model.id,
        "name": model.name,
        "category": model.category,
        "tier": model.tier,
        "isDefault": is_default,
        "available": unavailable is None,
        "priceSats": price.sats,
        "sats": price.sats,
        "description": model.description,
        "pricing": price.pricing,
    }
    if price.note:
        entry["priceNote"] = price.note
    if unavailable is not None:
        entry["unavailableReason"] = unavailable
    return entry


MODELS: tuple[Model, ...] = (
    Model(
        16,
        "Image Best",
        "image",
        "best",
        "Top tier: maximum quality, strict content filters.",
        True,
        type="image",
    ),
    Model(
        8,
        "Image Better",
        "image",
        "better",
        "Up to 10 reference images, most permissive policy.",
        type="image",
    ),
    Model(2, "Image Standard", "image", "standard", "1K only, 1 reference image.", type="image"),
    Model(
        10, "Transcription", "speech", None, "Speech to text, 13 languages.", type="transcription"
    ),
    Model(
        33,
        "Premium TTS",
        "speech",
        "best",
        "Premium text-to-speech with emotion control.",
        True,
        type="tts",
    ),
    Model(
        34, "Premium Mini TTS", "speech", "better", "Premium mini text-to-speech tier.", type="tts"
    ),
    Model(
        43,
        "Global TTS",
        "speech",
        "standard",
        "Global text-to-speech tier, 602+ languages, voice by description.",
        type="tts",
    ),
    Model(
        3,
        "Studio TTS",
        "speech",
        None,
        "Studio text-to-speech tier: voice from a reference clip, MP3 output.",
        type="tts",
    ),
    Model(
        5,
        "Vision Chat",
        "vision",
        "best",
        "Describe and answer questions about an image.",
        True,
        type="vision",
    ),
    Model(
        6,
        "Text Best",
        "text",
        "best",
        "Best tier, 262K context, vision through an image parameter.",
        True,
        type="text",
    ),
    Model(1, "Text Better", "text", "better", "Better tier.", type="text"),
    Model(
        31,
        "Text Standard",
        "text",
        "standard",
        "Standard tier, 119 languages accepted.",
        type="text",
    ),
    Model(29, "HTML to PDF", "utility", None, "HTML or Markdown to PDF.", type="pdf"),
    Model(
        30,
        "Receipt OCR",
        "utility",
        None,
        "Structured receipt extraction, per page.",
        True,
        type="ocr",
    ),
    Model(
        53,
        "Render Card",
        "utility",
        None,
        "Headline, versus, list, stat or quote card as PNG or JPEG; deterministic layout, "
        "no AI; the text sent is the text shown.",
        type="card",
    ),
    Model(
        11,
        "File Conversion",
        "utility",
        None,
        "Convert between document and image formats.",
        type="conversion",
    ),
    Model(13, "PDF Merge", "utility", None, "Merge PDF documents in order.", type="pdf"),
    Model(26, "Utility 26", "utility", None, "Utility model 26.", type="utility"),
    Model(
        EMAIL_MODEL_ID,
        "E-mail",
        "utility",
        None,
        "E-mail through the node's mail server, per recipient.",
        type="email",
    ),
    Model(46, "E-signature", "utility", None, "E-signature, flat per document.", type="esign"),
    Model(
        47,
        "Boarding Pass Wallet",
        "utility",
        None,
        "Boarding pass to wallet pass, per pass.",
        type="wallet",
    ),
    Model(15, "Search", "search", None, "Web search.", True, type="search"),
    Model(
        17,
        "Photo or Prompt to 3D",
        "3d",
        None,
        "Photo or prompt to GLB; async, up to about 5 minutes.",
        True,
        type="3d",
    ),
    Model(
        18,
        "Image Edit",
        "image_edit",
        None,
        "Image editing, flat at any output size.",
        True,
        type="image_edit",
    ),
    Model(20, "Telco", "telco", None, "SMS and calls, priced by destination.", True, type="telco"),
    Model(
        22,
        "Voice Cloning",
        "voice_cloning",
        None,
        "Clone a voice from a sample; reusable in text-to-speech.",
        True,
        type="voice_clone",
    ),
    Model(
        23,
        "Music",
        "music",
        None,
        "15 to 300 seconds, 44.1 kHz stereo; prepaid with refund on failure.",
        True,
        type="music",
    ),
    Model(
        24,
        "Image to Video",
        "video_from_image",
        None,
        "Animate an image, 5 to 15 s, native audio; async.",
        True,
        type="video",
    ),
    Model(
        25,
        "Video",
        "video",
        None,
        "Text to video, 5 to 15 s, native audio; 2K is upscaled from 768p; async.",
        True,
        type="video",
    ),
    Model(
        27, "Document Extraction", "ocr", None, "Document to Markdown, per page.", True, type="ocr"
    ),
    Model(
        35,
        "Background Removal",
        "image_process",
        None,
        "Transparent PNG cut-out.",
        type="image_process",
    ),
    Model(36, "Upscale", "image_process", None, "Upscale 2x to 4x.", type="image_process"),
    Model(37, "Face Restoration", "image_process", None, "Restore faces.", type="image_process"),
    Model(
        38,
        "NSFW Classification",
        "image_process",
        None,
        "Returns normal or nsfw.",
        type="image_process",
    ),
    Model(
        39,
        "Object Detection",
        "image_process",
        None,
        "Open-set object detection: boxes with coordinates and confidence.",
        type="image_process",
    ),
    Model(
        40,
        "Object Eraser",
        "image_process",
        None,
        "Image plus binary mask: white is erased, black is kept.",
        type="image_process",
    ),
    Model(
        41,
        "Colorization",
        "image_process",
        None,
        "Colorize a greyscale photo.",
        type="image_process",
    ),
    Model(
        42,
        "Deblur and Denoise",
        "image_process",
        None,
        "Deblur and denoise a photo.",
        type="image_process",
    ),
    Model(
        48,
        "Depth Estimation",
        "image_process",
        None,
        "Raw greyscale depth map plus colour visualization.",
        True,
        type="image_process",
    ),
    Model(44, "Fax Send", "fax", None, "Send a fax.", True, type="fax"),
    Model(45, "Fax Receive", "fax", None, "Receive faxes.", type="fax"),
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


def list_models_document(
    services: Iterable[ServiceSpec[Any]],
    book: RateBook,
    engines: Engines,
    category: str | None = None,
) -> dict[str, Any]:
    """GET /api/l402/models and the list_models tool: each model priced by ``services`` at
    the rate ``book``, and whether it runs on this node's ``engines``."""
    services = tuple(services)
    prices = model_prices(services, book)
    unavailable = unavailable_models(services, engines)
    defaults = defaults_here(services, unavailable)
    return {
        "models": [
            model_entry(m, prices[m.id], unavailable.get(m.id), m.id in defaults)
            for m in models_in(category)
        ],
        "categories": list(CATEGORIES),
    }
