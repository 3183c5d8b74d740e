"""The node's Nostr key: a secp256k1 secret made once and kept in the data directory."""

from __future__ import annotations

import os
from pathlib import Path

from nostr_sdk import Keys, SecretKey

KEY_FILE = "nostr_secret_key"


def key_path(data_dir: Path) -> Path:
    return data_dir / KEY_FILE


def ensure_keys(data_dir: Path) -> Keys:
    """The key in ``<data_dir>/nostr_secret_key`` (hex, mode 0600), created the first time.
    A file that holds no key is an error, never replaced: the announcements' identity
    (the npub agents know) would change."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = key_path(data_dir)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(SecretKey.generate().to_hex() + "\n")
    text = path.read_text().strip()
    try:
        return Keys(SecretKey.parse(text))
    except Exception as exc:  # nostr-sdk raises its own error type for a bad key
        raise ValueError(f"{path} does not hold a Nostr secret key: {exc}") from None


def npub(keys: Keys) -> str:
    return str(keys.public_key().to_bech32())
