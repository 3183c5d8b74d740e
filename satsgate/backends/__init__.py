"""The Lightning node backends, one package or module each, behind
:class:`satsgate.lightning.LightningBackend`:

- :mod:`~satsgate.backends.dev`: the built-in dev node (real signed regtest invoices);
- :mod:`~satsgate.backends.cln`: Core Lightning over its JSON-RPC socket;
- :mod:`~satsgate.backends.lnd`: LND over gRPC (the ``lnd`` extra; not in this release).

:func:`make_backend` is the one place a backend is chosen from the settings (the
``satsgate`` command and the Core Lightning plugin both use it). Optional abilities
are runtime-checkable protocols in :mod:`satsgate.lightning`, never class checks.
"""

from __future__ import annotations

from satsgate.config import Settings
from satsgate.lightning import LightningBackend


class BackendConfigError(ValueError):
    """The settings name no usable backend; the message says what to change."""


def make_backend(settings: Settings) -> LightningBackend:
    """The backend ``settings.backend`` names, not yet started. Each is imported only
    when chosen: the others' libraries (pyln-client, grpcio) need not be installed."""
    if settings.backend == "dev":
        from satsgate.backends.dev import DevBackend

        return DevBackend(settings.data_dir)
    if settings.backend == "cln":
        if not settings.cln_rpc:
            raise BackendConfigError("--backend cln needs --cln-rpc <path to lightning-rpc>")
        from satsgate.backends.cln import ClnBackend

        return ClnBackend(settings.cln_rpc, settings.network)
    raise BackendConfigError(
        "the LND backend is not available in this version; use --backend dev or cln"
    )
