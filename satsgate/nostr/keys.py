"""The node's Nostr key: a secp256k1 secret made once and kept in the data directory."""

from __future__ import annotations

from pathlib import Path

from nostr_sdk import Keys, SecretKey

from satsgate.config.secret_file import read_or_create_secret

KEY_FILE = "nostr_secret_key"


def key_path(data_dir: Path) -> Path:
    return data_dir / KEY_FILE


def ensure_keys(data_dir: Path) -> Keys:
    """The key in ``<data_dir>/nostr_secret_key`` (hex, mode 0600), created the first time.
    A file that holds no key is an error, never replaced: the announcements' identity
    (the npub agents know) would change."""
    path = key_path(data_dir)
    text = read_or_create_secret(path, lambda: SecretKey.generate().to_hex())
    try:
        return Keys(SecretKey.parse(text))
    except Exception as exc:  # nostr-sdk raises its own error type for a bad key
        raise ValueError(f"{path} does not hold a Nostr secret key: {exc}") from None


def npub(keys: Keys) -> str:
    return str(keys.public_key().to_bech32())
