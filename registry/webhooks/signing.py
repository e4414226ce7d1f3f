"""HMAC signatures for webhook requests (header ``X-Registry-Signature``).

The format follows the widely used ``t=<unix seconds>,v1=<hex digest>`` scheme: the digest is
HMAC-SHA256 over ``f"{t}."`` followed by the raw request body, so a receiver can tell the body
came from the registry, unmodified, and recently (the timestamp is signed too, which bounds replays).
Signing the raw bytes rather than re-serialised JSON means receivers must verify before parsing.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Final

__all__ = ["DEFAULT_TOLERANCE_S", "SIGNATURE_HEADER", "sign", "verify"]

SIGNATURE_HEADER: Final = "X-Registry-Signature"
#: How far a signature's timestamp may be from the receiver's clock, in seconds.
DEFAULT_TOLERANCE_S: Final = 300


def _key(secret: bytes | str) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _digest(secret: bytes | str, body: bytes, timestamp: int) -> str:
    message = f"{timestamp}.".encode("ascii") + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def sign(secret: bytes | str, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-Registry-Signature`` value for ``body``: ``t=<unix seconds>,v1=<hex HMAC-SHA256>``.

    ``timestamp`` defaults to now; pass one to get a reproducible value (tests, receivers).
    """
    t = int(time.time()) if timestamp is None else int(timestamp)
    return f"t={t},v1={_digest(secret, body, t)}"


def verify(
    secret: bytes | str,
    body: bytes,
    header: str | None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """Whether ``header`` is a valid signature of ``body`` made with ``secret`` within ``tolerance_s``
    seconds of ``now`` (default: the current time).

    Never raises: a missing or malformed header is simply not valid. Several ``v1=`` entries are
    accepted (any one may match), so a sender can sign with an old and a new secret while rotating.
    Digests are compared in constant time.
    """
    if not header:
        return False
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return False
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                return False
        elif key == "v1":
            candidates.append(value.strip().lower())
    if timestamp is None or not candidates:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, body, timestamp)
    # Check every candidate so the time taken does not depend on which one matched.
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(expected.encode("ascii"), candidate.encode("ascii", "replace"))
    return matched
