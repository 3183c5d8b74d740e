"""Settings from lightningd's init message: precedence, data dir, network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satsgate.plugin.options import OPTIONS, PluginConfigError, settings_from_init


def defaults(**set_options: Any) -> dict[str, Any]:
    """What lightningd sends: every option, defaults filled in."""
    options: dict[str, Any] = {o.name: o.default for o in OPTIONS}
    options.update(set_options)
    return options


def configuration(lightning_dir: Path, network: str = "regtest") -> dict[str, Any]:
    return {
        "lightning-dir": str(lightning_dir),
        "rpc-file": "lightning-rpc",
        "startup": True,
        "network": network,
    }


def test_options_at_default_leave_the_config_file_alone(tmp_path: Path) -> None:
    (tmp_path / "sg.toml").write_text('host = "0.0.0.0"\nport = 9000\ndata_dir = "mydata"\n')
    cfg = settings_from_init(
        defaults(**{"satsgate-config": "sg.toml"}), configuration(tmp_path), environ={}
    )
    s = cfg.settings
    assert (s.host, s.port, s.data_dir) == ("0.0.0.0", 9000, tmp_path / "mydata")
    assert (s.backend, s.cln_rpc) == ("cln", str(tmp_path / "lightning-rpc"))
    assert cfg.rpc_path == str(tmp_path / "lightning-rpc")

    set_port = settings_from_init(
        defaults(
            **{
                "satsgate-config": "sg.toml",
                "satsgate-port": 9100,
                "satsgate-data-dir": str(tmp_path / "elsewhere"),
            }
        ),
        configuration(tmp_path),
        environ={},
    ).settings
    assert (set_port.port, set_port.data_dir) == (9100, tmp_path / "elsewhere")


def test_defaults_follow_the_node(tmp_path: Path) -> None:
    s = settings_from_init(defaults(), configuration(tmp_path, "bitcoin"), environ={}).settings
    assert (s.host, s.port, s.network) == ("127.0.0.1", 8402, "bitcoin")
    assert s.data_dir == tmp_path / "satsgate-data"


def test_an_explicit_network_must_match_the_node(tmp_path: Path) -> None:
    ok = settings_from_init(
        defaults(), configuration(tmp_path, "bitcoin"), environ={"SATSGATE_NETWORK": "mainnet"}
    ).settings
    assert ok.network == "bitcoin"
    with pytest.raises(PluginConfigError, match="network mismatch"):
        settings_from_init(
            defaults(), configuration(tmp_path, "bitcoin"), environ={"SATSGATE_NETWORK": "regtest"}
        )


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("port = \n")
    with pytest.raises(PluginConfigError, match="cannot read satsgate settings"):
        settings_from_init(
            defaults(**{"satsgate-config": "bad.toml"}), configuration(tmp_path), environ={}
        )
    with pytest.raises(PluginConfigError, match="cannot read"):
        settings_from_init(
            defaults(**{"satsgate-config": "missing.toml"}), configuration(tmp_path), environ={}
        )
