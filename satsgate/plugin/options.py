"""The plugin's options as registered with lightningd, and Settings built from ``init``.

Precedence: defaults < ``satsgate-config`` TOML file < ``SATSGATE_*`` environment
< plugin options that differ from their registered default. lightningd sends
every option with its default filled in, so an option left at its default
cannot be told from one set to that value; it then leaves the file's value alone.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satsgate.config.settings import Settings, load_settings
from satsgate.lightning.backend import normalize_network

# Not "satsgate": lightningd runs plugins in the lightning-dir, and a directory
# named like the package there shadows an editable install for `python -m`.
DEFAULT_DATA_DIR = "satsgate-data"


@dataclass(frozen=True)
class PluginOption:
    name: str  # as in lightningd's config: satsgate-port=8402
    setting: str  # the Settings field it sets
    default: str | int
    description: str
    opt_type: str = "string"


OPTIONS = (
    PluginOption(
        "satsgate-host",
        "host",
        "127.0.0.1",
        "Address the satsgate HTTP service listens on (default 127.0.0.1).",
    ),
    PluginOption(
        "satsgate-port",
        "port",
        8402,
        "TCP port of the satsgate HTTP service (default 8402).",
        "int",
    ),
    PluginOption(
        "satsgate-data-dir",
        "data_dir",
        "",
        "satsgate's data directory (empty: <lightning-dir>/satsgate-data).",
    ),
    PluginOption(
        "satsgate-base-url",
        "base_url",
        "",
        "Public base URL used in links (empty: http://<host>:<port>).",
    ),
    PluginOption(
        "satsgate-config",
        "",
        "",
        "Path of a satsgate TOML settings file; relative to the lightning-dir.",
    ),
)


class PluginConfigError(Exception):
    """The plugin cannot start with this configuration; the message says why."""


@dataclass(frozen=True)
class InitConfig:
    settings: Settings
    rpc_path: str
    node_network: str


def _explicit_keys(config_file: Path | None, environ: Mapping[str, str]) -> set[str]:
    """Settings named in the config file or the environment (as opposed to defaulted)."""
    keys = {f.name for f in dataclasses.fields(Settings) if f"SATSGATE_{f.name.upper()}" in environ}
    if config_file is not None:
        with open(config_file, "rb") as fh:
            keys |= set(tomllib.load(fh))
    return keys


def settings_from_init(
    options: Mapping[str, Any],
    configuration: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> InitConfig:
    """Settings for the service from lightningd's ``init`` message.

    Raises PluginConfigError on an unreadable config file or when a network
    configured for satsgate differs from the node's.
    """
    env = os.environ if environ is None else environ
    lightning_dir = Path(str(configuration["lightning-dir"]))
    rpc_path = str(lightning_dir / str(configuration["rpc-file"]))
    node_network = normalize_network(str(configuration["network"]))

    config_value = str(options.get("satsgate-config") or "")
    config_file = (lightning_dir / config_value) if config_value else None
    overrides: dict[str, Any] = {"backend": "cln", "cln_rpc": rpc_path}
    for opt in OPTIONS:
        value = options.get(opt.name, opt.default)
        if opt.setting and value not in (None, "") and value != opt.default:
            overrides[opt.setting] = value
    try:
        explicit = _explicit_keys(config_file, env)
        settings = load_settings(config_file, overrides, env)
    except (OSError, ValueError) as exc:  # tomllib's decode error is a ValueError
        raise PluginConfigError(f"cannot read satsgate settings: {exc}") from exc

    if "network" in explicit and normalize_network(settings.network) != node_network:
        raise PluginConfigError(
            f"network mismatch: this node runs on {node_network} but satsgate is"
            f" configured for {settings.network}; refusing to start. Fix: set network ="
            f' "{node_network}" in the satsgate config file (or SATSGATE_NETWORK), or remove'
            " it: under Core Lightning satsgate follows the node's network"
        )
    settings = dataclasses.replace(settings, network=node_network)
    if "data_dir" not in overrides and "data_dir" not in explicit:
        settings = dataclasses.replace(settings, data_dir=lightning_dir / DEFAULT_DATA_DIR)
    elif not settings.data_dir.is_absolute():
        settings = dataclasses.replace(settings, data_dir=lightning_dir / settings.data_dir)
    return InitConfig(settings=settings, rpc_path=rpc_path, node_network=node_network)
