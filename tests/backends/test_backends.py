"""One factory for every backend, and optional abilities found by protocol."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from satsgate.backends import BackendConfigError, make_backend
from satsgate.backends.cln import ClnBackend
from satsgate.backends.dev import DevBackend
from satsgate.backends.lnd.backend import LndBackend
from satsgate.cli import build_backend
from satsgate.config.settings import Settings
from satsgate.lightning.backend import InitialCursor, LightningBackend, SimulatedPayments


def test_make_backend_builds_the_configured_node(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path)
    dev = make_backend(replace(base, backend="dev"))
    assert isinstance(dev, DevBackend) and isinstance(dev, LightningBackend)
    cln = make_backend(replace(base, backend="cln", cln_rpc=str(tmp_path / "lightning-rpc")))
    assert isinstance(cln, ClnBackend) and isinstance(cln, LightningBackend)
    with pytest.raises(BackendConfigError, match="--cln-rpc"):
        make_backend(replace(base, backend="cln", cln_rpc=""))
    lnd = make_backend(
        replace(
            base,
            backend="lnd",
            lnd_grpc="127.0.0.1:10009",
            lnd_tls_cert="tls.cert",
            lnd_macaroon="x.macaroon",
        )
    )
    assert isinstance(lnd, LndBackend) and isinstance(lnd, LightningBackend)
    with pytest.raises(BackendConfigError, match="--lnd-tls-cert PATH"):
        make_backend(
            replace(base, backend="lnd", lnd_grpc="127.0.0.1:10009", lnd_macaroon="x.macaroon")
        )
    with pytest.raises(SystemExit, match="--lnd-grpc"):  # the command says why and exits
        build_backend(replace(base, backend="lnd"))


def test_optional_abilities_are_protocols(tmp_path: Path) -> None:
    dev = DevBackend(tmp_path)
    cln = ClnBackend(str(tmp_path / "lightning-rpc"), "regtest")
    assert isinstance(dev, SimulatedPayments) and not isinstance(cln, SimulatedPayments)
    assert isinstance(dev, InitialCursor) and isinstance(cln, InitialCursor)
    lnd = LndBackend("127.0.0.1:10009", "tls.cert", "x.macaroon")
    assert isinstance(lnd, InitialCursor) and not isinstance(lnd, SimulatedPayments)
