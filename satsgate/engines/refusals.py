"""What a model said when it refused on content, as a caller may see it.

The free-retry answer (CONTENT_FILTERED_RETRY) and the refusal's refund show the
upstream model's own refusal text as ``model_said`` when the adapter has it (a refusing
answer's text, a 400 content-policy error's message, a refused prediction's error): one line,
at most 300 characters, without addresses and without provider or model names (no
provider name ever reaches a caller). A structured error body is not the model's words:
nothing is shown for it.
"""

from __future__ import annotations

import re

MODEL_SAID_CHARS = 300

# Provider and model names never reach a caller (the spec: model_said never names one).
_NAMES = re.compile(
    r"\b(?:an?\s+)?(?:open\s?ai|chat\s?gpt|gpt[-\w.]*|dall[-\s]?e[-\w]*|anthropic|"
    r"claude[-\w.]*|gemini[-\w.]*|google|mistral[-\w.]*|llama[-\w.]*|meta\s+ai|replicate|"
    r"fal(?:\.ai)?|stability(?:\s?ai)?|groq|together(?:\s?ai)?|openrouter|ollama|vllm)"
    r"(?P<s>'s)?(?:\s+(?:ai\s+)?(?:language\s+)?(?:models?|assistants?))?\b",
    re.IGNORECASE,
)


_URL = re.compile(r"\b(?:https?|wss?)://\S+", re.IGNORECASE)


def _unnamed(match: re.Match[str]) -> str:
    return "the model's" if match.group("s") else "the model"


def said_by_model(text: object) -> str | None:
    """An upstream's refusal text as a caller may see it (see the module), or None."""
    if not isinstance(text, str) or not text.strip() or "{" in text:
        return None
    said = _NAMES.sub(_unnamed, " ".join(_URL.sub("", text).split()))
    if len(said) > MODEL_SAID_CHARS:
        said = said[: MODEL_SAID_CHARS - 1].rstrip() + "…"
    return said or None
