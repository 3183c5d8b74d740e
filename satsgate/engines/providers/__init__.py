"""Provider kinds: ``kind = "..."`` in a ``[providers.NAME]`` table -> the adapter factory
that builds it. One module per kind; each factory takes the table (ProviderConfig) and
the engine deps and returns a Provider (satsgate.engines.registry)."""

from __future__ import annotations

from collections.abc import Mapping

from satsgate.engines.providers import anthropic as anthropic_kind
from satsgate.engines.providers import openai as openai_kind
from satsgate.engines.providers import smtp
from satsgate.engines.registry import ProviderFactory

PROVIDER_KINDS: Mapping[str, ProviderFactory] = {
    smtp.KIND: smtp.SmtpProvider,
    openai_kind.KIND: openai_kind.create,  # any OpenAI-compatible API
    anthropic_kind.KIND: anthropic_kind.create,  # the Anthropic Messages API
}
