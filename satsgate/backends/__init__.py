"""The Lightning node backends, one package or module each, behind
:class:`satsgate.lightning.backend.LightningBackend`:

- :mod:`~satsgate.backends.dev`: the built-in dev node (real signed regtest invoices);
- :mod:`~satsgate.backends.cln`: Core Lightning over its JSON-RPC socket;
- :mod:`~satsgate.backends.lnd`: LND over gRPC (the ``lnd`` extra: grpcio, protobuf).

:func:`make_backend` is the one place a backend is chosen from the settings (the
``satsgate`` command and the Core Lightning plugin both use it). Optional abilities
are runtime-checkable protocols in :mod:`satsgate.lightning.backend`, never class checks.
"""

from __future__ import annotations

from satsgate.config.settings import Settings
from satsgate.lightning.backend import LightningBackend


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
    if settings.backend == "lnd":
        missing = [
            flag
            for flag, value in (
                ("--lnd-grpc HOST:PORT", settings.lnd_grpc),
                ("--lnd-tls-cert PATH", settings.lnd_tls_cert),
                ("--lnd-macaroon PATH", settings.lnd_macaroon),
            )
            if not value
        ]
        if missing:
            raise BackendConfigError(f"--backend lnd needs {', '.join(missing)}")
        try:
            from satsgate.backends.lnd.backend import LndBackend
        except ImportError as exc:
            raise BackendConfigError(
                f"--backend lnd needs the lnd extra (pip install 'satsgate[lnd]'): {exc}"
            ) from None
        return LndBackend(
            settings.lnd_grpc, settings.lnd_tls_cert, settings.lnd_macaroon, settings.network
        )
    raise BackendConfigError(f"unknown backend {settings.backend!r}; use dev, cln or lnd")
