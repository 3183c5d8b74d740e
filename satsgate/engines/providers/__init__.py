"""Provider kinds: ``kind = "..."`` in a ``[providers.NAME]`` table -> the adapter factory
that builds it. One module per kind; each factory takes the table (ProviderConfig) and
the engine deps and returns a Provider (satsgate.engines.registry)."""

from __future__ import annotations

from collections.abc import Mapping

from satsgate.engines.config import ProviderConfig
from satsgate.engines.providers import (
    documenso,
    elevenlabs,
    fal,
    replicate,
    retell,
    search,
    smtp,
    telnyx,
    telnyx_client,
    twilio,
    vapi,
)
from satsgate.engines.registry import EngineDeps, Provider, ProviderFactory


# The AI SDKs take seconds to import: only a node that configures their kind loads them.
def _openai(config: ProviderConfig, deps: EngineDeps) -> Provider:
    from satsgate.engines.providers import openai

    return openai.create(config, deps)


def _anthropic(config: ProviderConfig, deps: EngineDeps) -> Provider:
    from satsgate.engines.providers import anthropic

    return anthropic.create(config, deps)


PROVIDER_KINDS: Mapping[str, ProviderFactory] = {
    smtp.KIND: smtp.SmtpProvider,
    "openai": _openai,  # any OpenAI-compatible API
    "anthropic": _anthropic,  # the Anthropic Messages API
    replicate.KIND: replicate.ReplicateProvider,
    fal.KIND: fal.FalProvider,
    elevenlabs.KIND: elevenlabs.ElevenLabsProvider,
    search.SearxngProvider.KIND: search.SearxngProvider,  # a SearXNG instance (web search)
    search.BraveProvider.KIND: search.BraveProvider,  # the Brave Search API
    documenso.KIND: documenso.DocumensoProvider,
    twilio.KIND: twilio.TwilioProvider,  # SMS, automated calls, the voice bridge's calls
    telnyx_client.KIND: telnyx.TelnyxProvider,
    retell.KIND: retell.RetellProvider,  # AI phone calls (ai_call)
    vapi.KIND: vapi.VapiProvider,  # AI phone calls (ai_call)
}
