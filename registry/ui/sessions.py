"""Server-side web UI sessions: a pasted API token becomes a cookie for a while.

Why a table and not a signed cookie holding the token: a session must end when its token is
revoked or expires, and when the person signs out (a signed cookie stays valid until it expires,
wherever a copy of it went). The browser holds only a random secret; the ``ui_sessions`` row
keeps its SHA-256, the token it stands for, the session's CSRF token and its end. Every request
reads the row joined with the token's, in one indexed query, so a revoked or expired token is
refused on its very next page, on every replica.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from registry.db.engine import Database
from registry.db.models import ApiToken, UiSession
from registry.tokens import Principal, TokenRejected, TokenService

#: What a token needs to open the web UI (agent tokens open MCP only).
UI_SCOPE = "viewer"
AGENT_ONLY = "this is an agent token: it opens the MCP endpoint only. Sign in with a viewer, editor or admin token."
#: Longest token accepted in the sign-in form (real ones are 48 characters).
TOKEN_CHARS = 512


@dataclass(frozen=True)
class SignedIn:
    """A live session: who, the CSRF token its forms carry, and when it ends."""

    principal: Principal
    csrf_token: str
    expires_at: datetime

    @property
    def can_edit(self) -> bool:
        return self.principal.has("editor")

    @property
    def is_admin(self) -> bool:
        return self.principal.has("admin")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UiSessionStore:
    """Creates, finds and ends web UI sessions (rows of ``ui_sessions``)."""

    def __init__(self, db: Database, tokens: TokenService, *, hours: float) -> None:
        self.db = db
        self.tokens = tokens
        self.lifetime = timedelta(hours=hours)

    def sign_in(self, token: str) -> tuple[str, SignedIn]:
        """A new session for ``token``: (the cookie's secret, the session). Raises
        ``TokenRejected`` with a reason fit for the sign-in page."""
        token = token.strip()
        if not token:
            raise TokenRejected("paste an API token")
        if len(token) > TOKEN_CHARS:
            raise TokenRejected(INVALID_TOKEN_TEXT)
        principal = self.tokens.verify(token)  # unknown, revoked or expired: TokenRejected
        if not principal.has(UI_SCOPE):
            raise TokenRejected(AGENT_ONLY)
        now = datetime.now(UTC)
        ends = now + self.lifetime
        if principal.expires_at is not None:
            ends = min(ends, principal.expires_at)
        secret = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        assert principal.token_id is not None  # verified tokens have rows
        with self.db.session() as session:
            # Sign-in is rare: a good moment to drop the sessions that have ended.
            session.execute(delete(UiSession).where(UiSession.expires_at <= now))
            session.add(
                UiSession(
                    id=_digest(secret), token_id=principal.token_id, csrf_token=csrf, created_at=now, expires_at=ends
                )
            )
        return secret, SignedIn(principal, csrf, ends)

    def find(self, secret: str) -> SignedIn | None:
        """The live session the cookie's ``secret`` opens; None when there is none (never was,
        signed out, ended, or its token was revoked or has expired)."""
        if not secret or len(secret) > 128:
            return None
        with self.db.session() as session:
            row = session.execute(
                select(UiSession, ApiToken)
                .join(ApiToken, ApiToken.id == UiSession.token_id)
                .where(UiSession.id == _digest(secret))
            ).first()
        if row is None:
            return None
        ui, token = row
        now = datetime.now(UTC)
        token_expiry = _aware(token.expires_at) if token.expires_at is not None else None
        if _aware(ui.expires_at) <= now or token.revoked_at is not None:
            return None
        if token_expiry is not None and token_expiry <= now:
            return None
        principal = Principal(
            token.id,
            token.name,
            frozenset(token.scopes),
            token.label,
            token_expiry,
            teams=tuple(sorted((token.teams or {}).items())),
        )
        if not principal.has(UI_SCOPE):
            return None
        return SignedIn(principal, ui.csrf_token, _aware(ui.expires_at))

    def sign_out(self, secret: str) -> None:
        if not secret or len(secret) > 128:
            return
        with self.db.session() as session:
            session.execute(delete(UiSession).where(UiSession.id == _digest(secret)))


INVALID_TOKEN_TEXT = "that token is not valid: it is unknown or has been revoked"
