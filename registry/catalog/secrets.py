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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from cryptography.fernet import Fernet, InvalidToken

PREFIX = "enc:v1:"
#: What every API shows in place of a write-only value.
MASK = "********"


class SecretKeyError(RuntimeError):
    pass


def _fernet_key(material: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(material.encode()).digest())


#: The generated key's file in the data folder, and the lock its creation is made under.
KEY_FILE = "secret.key"
_KEY_LOCK = "secret.key.lock"


def load_or_create_key(configured: str | None, data_dir: Path) -> str:
    """The configured key, else the one in ``<data_dir>/secret.key``, generated on first use.

    Processes starting together on an empty data folder must all end up with the one key (a
    sibling with another key cannot read what this one encrypts), so the key is made under a lock
    in the data folder, and published whole: written to a temporary file beside it, synced, then
    hard-linked into place, which fails rather than replaces if the file is there already. A
    reader (even one not taking the lock) sees no file or the whole key, never an empty one."""
    if configured:
        return configured
    path = data_dir / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return key
    data_dir.mkdir(parents=True, exist_ok=True)
    with _locked(data_dir / _KEY_LOCK):
        key = _read_key(path)  # made by the process that held the lock before us
        return key if key is not None else _create_key(path)


def _read_key(path: Path) -> str | None:
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not key:
        raise SecretKeyError(
            f"{path} is empty (left by an interrupted start of an older version?): delete it if nothing was "
            "encrypted with it yet, or set REGISTRY_SECRET_KEY to the key that was"
        )
    return key


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock on ``lock_path`` for the block (released when the process dies too)."""
    if fcntl is None:  # no flock (Windows): the link below is still atomic
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _create_key(path: Path) -> str:
    """A new key, published at ``path`` whole; if a process not taking the lock (an older
    version) got there first, its key."""
    key = secrets.token_urlsafe(32)
    fd, temporary = tempfile.mkstemp(prefix=f".{KEY_FILE}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return _existing_key(path)
        except OSError:  # a file system without hard links: a rename is atomic too (under the lock)
            if path.exists():
                return _existing_key(path)
            os.replace(temporary, path)
        _sync_folder(path.parent)
        return key
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temporary)


def _existing_key(path: Path) -> str:
    key = _read_key(path)
    if key is None:
        raise SecretKeyError(f"{path} appeared and vanished while the key was being made; start again")
    return key


def _sync_folder(folder: Path) -> None:
    """Make the new name durable too (a crash must not leave a key in use but unnamed)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders: nothing more to do
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


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
