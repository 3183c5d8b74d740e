"""Settings: file < environment < arguments, unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from satsgate.config.settings import load_settings


def test_layers_and_coercion(tmp_path: Path) -> None:
    config = tmp_path / "satsgate.toml"
    config.write_text(
        'port = 9000\nbase_url = "https://pay.example.com"\n'
        'mcp_allowed_origins = ["https://app.example.com"]\n'
        '[engines.price_source]\nurl = "https://prices.example.com/btc"\n'
    )
    env = {
        "SATSGATE_PORT": "9100",
        "SATSGATE_MCP_ALLOWED_ORIGINS": "https://a.example, https://b.example",
    }
    settings = load_settings(config, {"data_dir": str(tmp_path / "d")}, environ=env)
    assert settings.port == 9100  # environment beats the file
    assert settings.public_base_url == "https://pay.example.com"
    assert settings.mcp_allowed_origins == ("https://a.example", "https://b.example")
    assert settings.engines["price_source"]["url"] == "https://prices.example.com/btc"
    assert settings.data_dir == tmp_path / "d"
    assert load_settings(config, {"port": 1}, environ=env).port == 1  # arguments beat both


def test_unknown_keys_and_backends_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="prot"):
        load_settings(config, environ={})
    with pytest.raises(ValueError, match="backend"):
        load_settings(None, {"backend": "eclair"}, environ={})


@pytest.mark.parametrize(
    "value",
    [
        "pay.example.com",
        "ftp://pay.example.com",
        "https://",
        "https://pay.example.com/?a=1",
        "https://pay.example.com     # the public address",
        "https://pay example.com",
    ],
)
def test_a_base_url_that_links_cannot_carry_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="base_url must be an http:// or https:// address"):
        load_settings(None, {"base_url": value}, environ={})


def test_good_base_urls_load() -> None:
    for value in ("https://pay.example.com", "http://127.0.0.1:8402", "https://x.org/sats/"):
        assert load_settings(None, {"base_url": value}, environ={}).base_url == value


def test_the_store_url_comes_from_the_store_table_the_environment_or_an_argument(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "satsgate.toml"
    cfg.write_text('[store]\nurl = "postgresql://file@127.0.0.1/satsgate"\n')
    assert load_settings(cfg, environ={}).store_url == "postgresql://file@127.0.0.1/satsgate"
    env = {"SATSGATE_STORE_URL": "postgresql://env@127.0.0.1/satsgate"}
    assert load_settings(cfg, environ=env).store_url == env["SATSGATE_STORE_URL"]
    given = load_settings(cfg, {"store_url": "postgres://arg@db/s"}, environ=env)
    assert given.store_url == "postgres://arg@db/s"
    assert load_settings(environ={}).store_url == ""  # the SQLite file, as before
    with pytest.raises(ValueError, match="postgresql://"):
        load_settings(environ={"SATSGATE_STORE_URL": "mysql://db/satsgate"})
    cfg.write_text('[store]\npath = "x"\n')
    with pytest.raises(ValueError, match=r"\[store\]"):
        load_settings(cfg, environ={})
