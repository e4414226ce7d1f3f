"""API tokens: issued once, stored as SHA-256 hashes, scoped, revocable.

Scopes: ``admin`` > ``editor`` > ``viewer`` for the admin API; ``agent`` for MCP only.
Admin-API scopes also open MCP (an editor can try the endpoint with their own token).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from registry.catalog.errors import Invalid, NotFound
from registry.catalog.specs import LABEL_PATTERN
from registry.db.engine import Database
from registry.db.models import ApiToken, utcnow

SCOPES = ("admin", "editor", "viewer", "agent")
#: What each admin scope includes.
_IMPLIES = {
    "admin": {"admin", "editor", "viewer"},
    "editor": {"editor", "viewer"},
    "viewer": {"viewer"},
    "agent": set(),
}
TOKEN_PREFIX = "mcpr_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's identity and what it may do."""

    token_id: int | None
    name: str
    scopes: frozenset[str]
    label: str | None = None

    def has(self, scope: str) -> bool:
        return any(scope in _IMPLIES[s] for s in self.scopes)

    @property
    def may_use_mcp(self) -> bool:
        return bool(self.scopes)


ANONYMOUS_AGENT = Principal(token_id=None, name="anonymous", scopes=frozenset({"agent"}))


def token_as_dict(token: ApiToken) -> dict[str, Any]:
    return {
        "id": token.id,
        "name": token.name,
        "scopes": token.scopes,
        "label": token.label,
        "created_by": token.created_by,
        "created_at": token.created_at.isoformat(),
        "last_used_at": token.last_used_at.isoformat() if token.last_used_at else None,
        "revoked": token.revoked_at is not None,
    }


class TokenService:
    #: How long a successful lookup is trusted before the database is asked again (revocation delay).
    CACHE_SECONDS = 5.0

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        label: str | None = None,
        created_by: str | None = None,
        value: str | None = None,
    ) -> tuple[str, dict[str, Any]]:

        scopes = sorted(set(scopes))
        if not name or len(name) > 128:
            raise Invalid("token name must be 1-128 characters")
        if not scopes or any(s not in SCOPES for s in scopes):
            raise Invalid(f"scopes must be a non-empty subset of {', '.join(SCOPES)}")
        if label is not None and not re.match(LABEL_PATTERN, label):
            raise Invalid(f"invalid label {label!r}")
        token = value or TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.db.session() as session:
            row = ApiToken(name=name, token_hash=hash_token(token), scopes=scopes, label=label, created_by=created_by)
            session.add(row)
            session.flush()
            info = token_as_dict(row)
        return token, info

    def ensure(self, name: str, value: str, scopes: Iterable[str]) -> None:
        """Make sure a token with this exact value exists and is active (``REGISTRY_ADMIN_TOKEN``)."""
        digest = hash_token(value)
        with self.db.session() as session:
            row = session.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            if row is not None:
                row.revoked_at = None
                row.scopes = sorted(set(row.scopes) | set(scopes))
                return
        self.create(name, scopes, value=value, created_by="environment")

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.db.session() as session:
            return [token_as_dict(t) for t in session.scalars(select(ApiToken).order_by(ApiToken.id))]

    def revoke(self, token_id: int) -> dict[str, Any]:
        with self.db.session() as session:
            row = session.get(ApiToken, token_id)
            if row is None:
                raise NotFound(f"token {token_id} does not exist")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            info = token_as_dict(row)
        with self._lock:
            self._cache.clear()
        return info

    def peek(self, token: str) -> Principal | None:
        """A recently verified token's principal, without touching the database (None: ask ``authenticate``)."""
        cached = self._cache.get(hash_token(token))
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        return None

    def authenticate(self, token: str) -> Principal | None:
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        with self.db.session() as session:
            row = session.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            if row is None or row.revoked_at is not None:
                return None
            row.last_used_at = utcnow()
            principal = Principal(row.id, row.name, frozenset(row.scopes), row.label)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now + self.CACHE_SECONDS, principal)
        return principal
