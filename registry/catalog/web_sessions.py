"""Server-side web UI sessions: a pasted API token (or a single sign-on) becomes a cookie for a while
(the store the web UI reaches through ``registry.api.deps.WebSessionsDep``).

Why a table and not a signed cookie holding the token: a session must end when its token is
revoked or expires, and when the person signs out (a signed cookie stays valid until it expires,
wherever a copy of it went). The browser holds only a random secret; the ``ui_sessions`` row
keeps its SHA-256, the token it stands for, the session's CSRF token and its end. Every request
reads the row joined with the token's, in one indexed query, so a revoked or expired token is
refused on its very next page, on every replica.

A single sign-on session (``registry/ui/sso.py``) has no token: its row keeps the ``identity``
the issuer's ID token gave at sign-in (user, name, scopes, teams, end), and the principal is
rebuilt from that. Roles and teams changed at the issuer apply from the next sign-in, so such a
session lasts at most ``SSO_SESSION_HOURS`` (``REGISTRY_UI_SESSION_HOURS`` if shorter).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select

from registry.db.engine import Database
from registry.db.models import ApiToken, UiSession
from registry.tokens import SCOPES, TEAM_ROLES, Principal, TokenRejected, TokenService, looks_like_jwt

#: What a token needs to open the web UI (agent tokens open MCP only).
UI_SCOPE = "viewer"
AGENT_ONLY = "this is an agent token: it opens the MCP endpoint only. Sign in with a viewer, editor or admin token."
#: Longest token accepted in the sign-in form (real ones are 48 characters) ...
TOKEN_CHARS = 512
#: ... unless it is a single sign-on access token (a JWT: a few thousand characters).
JWT_CHARS = 16 * 1024
#: Longest a single sign-on session lasts: its roles and teams are what the issuer said at sign-in.
SSO_SESSION_HOURS = 12.0


@dataclass(frozen=True)
class SignedIn:
    """A live session: who, the CSRF token its forms carry, and when it ends."""

    principal: Principal
    csrf_token: str
    expires_at: datetime

    @property
    def can_edit(self) -> bool:
        """Whether this session may edit some entries: the editor scope (global entries) or the
        editor role in a team. Which ones: ``may_edit``."""
        return bool(self.edit_teams)

    def may_edit(self, team: str | None) -> bool:
        """Whether this session may edit the entries of ``team`` (None: global ones)."""
        return self.principal.may("editor", team)

    @property
    def edit_teams(self) -> list[str | None]:
        """Where this session may create entries: None (global) first if allowed, then teams by name."""
        teams = sorted(team for team, _role in self.principal.teams if self.principal.may("editor", team))
        return ([None] if self.principal.may("editor", None) else []) + list(teams)

    @property
    def is_admin(self) -> bool:
        return self.principal.has("admin")

    @property
    def draft_owner(self) -> str:
        """Whose drafts the browser keeps for this session (``admin_ui/static/drafts.js``): a
        stable, non-secret name for the person, never the token or the session. A token's
        principal is its name (as authorship and the audit trail are), so a new token issued
        under the same name after a revocation finds its drafts again; a single sign-on user is
        the issuer's subject, which outlives display-name changes."""
        if self.principal.user is not None:
            return "sso:" + self.principal.user
        return "token:" + self.principal.name


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
        if len(token) > (JWT_CHARS if looks_like_jwt(token) else TOKEN_CHARS):
            raise TokenRejected(INVALID_TOKEN_TEXT)
        principal = self.tokens.verify(token)  # unknown, revoked or expired: TokenRejected
        if principal.token_id is None:  # a single sign-on access token (JWT): until it expires
            return self.sign_in_identity(principal)
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

    def sign_in_identity(self, principal: Principal) -> tuple[str, SignedIn]:
        """A new session for a single sign-on user (a principal from the issuer's token, no
        token row): (the cookie's secret, the session). It lasts ``REGISTRY_UI_SESSION_HOURS``,
        at most ``SSO_SESSION_HOURS``, and never past the principal's own expiry when that is
        an access token's (``expires_at``; an ID token's is ignored by the caller)."""
        if principal.user is None or principal.token_id is not None:
            raise ValueError("sign_in_identity takes a single sign-on principal")
        if not principal.has(UI_SCOPE):
            raise TokenRejected(SSO_AGENT_ONLY)
        now = datetime.now(UTC)
        ends = now + min(self.lifetime, timedelta(hours=SSO_SESSION_HOURS))
        if principal.expires_at is not None:
            ends = min(ends, principal.expires_at)
        identity = {
            "user": principal.user,
            "name": principal.name,
            "scopes": sorted(principal.scopes),
            "teams": dict(principal.teams),
            "exp": int(ends.timestamp()),
        }
        secret = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        with self.db.session() as session:
            session.execute(delete(UiSession).where(UiSession.expires_at <= now))
            session.add(
                UiSession(
                    id=_digest(secret),
                    token_id=None,
                    identity=identity,
                    csrf_token=csrf,
                    created_at=now,
                    expires_at=ends,
                )
            )
        return secret, SignedIn(replace(principal, expires_at=ends), csrf, ends)

    def find(self, secret: str) -> SignedIn | None:
        """The live session the cookie's ``secret`` opens; None when there is none (never was,
        signed out, ended, or its token was revoked or has expired)."""
        if not secret or len(secret) > 128:
            return None
        with self.db.session() as session:
            row = session.execute(
                select(UiSession, ApiToken)
                .outerjoin(ApiToken, ApiToken.id == UiSession.token_id)
                .where(UiSession.id == _digest(secret))
            ).first()
        if row is None:
            return None
        ui, token = row
        now = datetime.now(UTC)
        if _aware(ui.expires_at) <= now:
            return None
        if token is None:  # single sign-on (or its token row is gone: then no identity either)
            if ui.token_id is not None or not isinstance(ui.identity, dict):
                return None
            principal = _identity_principal(ui.identity, _aware(ui.expires_at))
            if principal is None or not principal.has(UI_SCOPE):
                return None
            return SignedIn(principal, ui.csrf_token, _aware(ui.expires_at))
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
        # The token's "last used": a write only when the stored instant is a few seconds old.
        self.tokens.note_use(token.id, token.last_used_at)
        return SignedIn(principal, ui.csrf_token, _aware(ui.expires_at))

    def sign_out(self, secret: str) -> None:
        if not secret or len(secret) > 128:
            return
        with self.db.session() as session:
            session.execute(delete(UiSession).where(UiSession.id == _digest(secret)))


INVALID_TOKEN_TEXT = "that token is not valid: it is unknown or has been revoked"
SSO_AGENT_ONLY = (
    "your single sign-on account has the agent role: it opens the MCP endpoint only. "
    "The web UI needs the viewer, editor, reviewer or admin role."
)


def _identity_principal(identity: dict[str, Any], ends: datetime) -> Principal | None:
    """The principal a single sign-on session stands for (None: a row that is not one)."""
    user, name, scopes, teams = (identity.get(k) for k in ("user", "name", "scopes", "teams"))
    if not isinstance(user, str) or not isinstance(name, str) or not isinstance(scopes, list):
        return None
    memberships = teams if isinstance(teams, dict) else {}
    return Principal(
        token_id=None,
        name=name,
        scopes=frozenset(s for s in scopes if s in SCOPES),
        expires_at=ends,
        teams=tuple(sorted((t, r) for t, r in memberships.items() if isinstance(t, str) and r in TEAM_ROLES)),
        user=user,
    )
