"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

A secret is ``whsec_`` and the base64 of 24 to 64 random bytes; the key is those bytes. Each request
carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``:
``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``. Receivers use any Standard
Webhooks library, or the few lines in the README.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
#: Random bytes in a generated secret; a supplied one may have 24 to 64.
SECRET_BYTES = 32
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64


def generate_secret() -> str:
    """A new signing secret, shown once to the admin who made it."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of ``secret``; ``ValueError`` saying what a secret must look like."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"a signing secret is {SECRET_PREFIX!r} followed by base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(f"a signing secret's key has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {len(key)}")
    return key


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one request."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")
