"""Encryption at rest for write-only values (webhook header values and signing secrets).

Values are Fernet tokens (AES-128-CBC + HMAC-SHA256, from ``cryptography``) prefixed with
``enc:v1:`` so a stored value is recognisably encrypted. The key comes from
``REGISTRY_SECRET_KEY`` or is generated once into the data folder; any string is accepted as a
key and stretched with SHA-256, so operators can use a passphrase from their secret store.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

PREFIX = "enc:v1:"
#: What every API shows in place of a write-only value.
MASK = "********"


class SecretKeyError(RuntimeError):
    pass


def _fernet_key(material: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(material.encode()).digest())


def load_or_create_key(configured: str | None, data_dir: Path) -> str:
    """The configured key, else the one in ``<data_dir>/secret.key``, generated on first use."""
    if configured:
        return configured
    path = data_dir / "secret.key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def audit_key(configured: str | None, box: SecretBox | None) -> bytes:
    """The audit chain's key: from ``REGISTRY_AUDIT_KEY`` when set (so auditors can hold it apart
    from the key that encrypts webhook secrets), else derived from the secret key."""
    if configured:
        return hashlib.sha256(b"mcp-registry audit key\0" + configured.encode()).digest()
    if box is None:
        raise ValueError("no audit key: set REGISTRY_AUDIT_KEY or REGISTRY_SECRET_KEY")
    return box.derive_key("audit chain")


class SecretBox:
    def __init__(self, key: str) -> None:
        self._fernet = Fernet(_fernet_key(key))
        # Kept for derive_key only: a different hash input than the encryption key's.
        self._derive_base = hashlib.sha256(b"mcp-registry derive\0" + key.encode()).digest()

    def derive_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` (e.g. signing MCP request states), derived from the
        secret key (HMAC-SHA256) and independent of the key that encrypts values at rest."""
        return hmac.new(self._derive_base, purpose.encode(), hashlib.sha256).digest()

    def encrypt(self, value: str) -> str:
        return PREFIX + self._fernet.encrypt(value.encode()).decode()

    def decrypt(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            raise SecretKeyError("stored secret is not in the expected encrypted form")
        try:
            return self._fernet.decrypt(stored[len(PREFIX) :].encode()).decode()
        except InvalidToken:
            raise SecretKeyError(
                "a stored secret cannot be decrypted: REGISTRY_SECRET_KEY differs from the key it was written with"
            ) from None

    @staticmethod
    def is_encrypted(value: Any) -> bool:
        return isinstance(value, str) and value.startswith(PREFIX)
