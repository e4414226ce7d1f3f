"""API tokens: issued once, stored as SHA-256 hashes, scoped, revocable, optionally expiring.

Scopes: ``admin`` > ``reviewer`` > ``editor`` > ``viewer`` for the admin API; ``agent`` for MCP
only. Admin-API scopes also open MCP (an editor can try the endpoint with their own token), so
``agent`` beside any of them is a contradiction ("MCP only", and more): new tokens may not mix them
(``check_scopes``); tokens made before that rule keep working as the stronger scope says.

Teams: a token (or a single-sign-on user) may belong to teams, each with a role (``viewer`` <
``editor`` < ``reviewer`` < ``admin``). Scopes apply to global entries; a team role to that
team's entries. Everyone but an ``admin`` sees global entries plus their own teams' only.

Verified tokens are cached for a few seconds per process; a revocation or a change of a token's
teams clears that cache on the replica that made it at once, and on the others through
``TOKEN_REVOKED_CHANNEL`` / ``TOKEN_CHANGED_CHANNEL`` (PostgreSQL NOTIFY), whose listeners also close
the token's open MCP streams (a stream keeps what its opener saw: the agent reconnects and is
served as the token is now).

"Last used" (``last_used_at``) is written when a use is verified: an MCP or admin-API request
whose token is not in that cache (so at most once per ``CACHE_SECONDS`` per process), a web UI
sign-in, and a web UI request once the stored instant is more than ``CACHE_SECONDS`` old
(``note_use``): never a write per request.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import or_, select, text, update
from sqlalchemy.orm import Session

from registry.catalog.errors import Conflict, Invalid, NotFound
from registry.catalog.specs import LABEL_PATTERN
from registry.catalog.teams import TEAM_PATTERN as TEAM_PATTERN  # re-exported (registry.oidc)
from registry.catalog.teams import missing_teams
from registry.catalog.values import WriteOptions
from registry.db.audit import Actor, digest
from registry.db.changelog import CHANGELOG_LOCK_KEY, append_event
from registry.db.diskfull import is_full
from registry.db.engine import Database
from registry.db.models import ApiToken, Change, utcnow

SCOPES = ("admin", "reviewer", "editor", "viewer", "agent")
#: What each admin scope includes.
_IMPLIES = {
    "admin": {"admin", "reviewer", "editor", "viewer"},
    "reviewer": {"reviewer", "editor", "viewer"},
    "editor": {"editor", "viewer"},
    "viewer": {"viewer"},
    "agent": set(),
}
#: Roles within a team, weakest first (each includes the ones before it).
TEAM_ROLES = ("viewer", "editor", "reviewer", "admin")
_RANK = {role: rank for rank, role in enumerate(TEAM_ROLES)}
TOKEN_PREFIX = "mcpr_"
#: PostgreSQL channel on which a replica announces a token it revoked (payload: the token id), so
#: every replica forgets it at once and closes the streams opened with it.
TOKEN_REVOKED_CHANNEL = "registry_token_revoked"
#: The same for a token whose teams changed (payload: the token id): forget, and close its streams.
TOKEN_CHANGED_CHANNEL = "registry_token_changed"
#: One sentence per scope, as the token form offers them (strongest first, ``agent`` last).
SCOPE_DESCRIPTIONS = {
    "admin": "Everything: entries, tokens, teams, protected labels and emergency overrides.",
    "reviewer": "An editor who also approves or rejects change requests (never their own).",
    "editor": "A viewer who also creates, edits and archives entries, moves labels and runs test calls.",
    "viewer": "Reads entries, versions, diffs, the change log and usage (web UI and admin API); MCP with any label.",
    "agent": "MCP only: an agent is served its token's label (none: production, or a ?label= that "
    "REGISTRY_AGENT_LABELS allows); no web UI, no admin API.",
}

log = logging.getLogger("registry.tokens")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's identity and what it may do."""

    token_id: int | None
    name: str
    scopes: frozenset[str]
    label: str | None = None
    #: When the token stops being accepted (UTC); None: never.
    expires_at: datetime | None = None
    #: Team memberships as sorted (team, role) pairs (hashable).
    teams: tuple[tuple[str, str], ...] = ()
    #: A single-sign-on user's subject (the configured user claim); None for a token.
    user: str | None = None

    def has(self, scope: str) -> bool:
        return any(scope in _IMPLIES[s] for s in self.scopes)

    @property
    def is_admin(self) -> bool:
        """Admins see and may do everything, in every team."""
        return "admin" in self.scopes

    @functools.cached_property
    def visible_teams(self) -> frozenset[str] | None:
        """The teams whose entries this principal sees besides global ones; None: every team
        (computed once: read on every MCP request)."""
        return None if self.is_admin else frozenset(team for team, _role in self.teams)

    def sees(self, team: str | None) -> bool:
        """Whether an entry owned by ``team`` (None: global) is visible to this principal."""
        return team is None or self.is_admin or any(t == team for t, _role in self.teams)

    def role_on(self, team: str | None) -> str | None:
        """The strongest role this principal holds over entries of ``team`` (None: global):
        ``admin`` scope everywhere; else, for global entries, the strongest admin-API scope;
        for a team's entries, the role in that team. None: no admin-API access."""
        if self.is_admin:
            return "admin"
        if team is None:
            return next((role for role in reversed(TEAM_ROLES) if role != "admin" and self.has(role)), None)
        return next((role for t, role in self.teams if t == team), None)

    def may(self, role: str, team: str | None) -> bool:
        """Whether this principal holds ``role`` (or a stronger one) over entries of ``team``."""
        held = self.role_on(team)
        return held is not None and _RANK[held] >= _RANK[role]

    @property
    def key(self) -> str:
        """Identifies the person or credential behind this principal (self-approval checks,
        usage counts): ``user:<subject>``, ``token:<id>``, or ``anonymous``."""
        return self.actor().key if (self.user or self.token_id is not None) else "anonymous"

    def actor(self, reason: str | None = None, *, override: bool = False) -> Actor:
        """This principal as the audit trail records a write it makes."""
        return Actor(self.name, self.token_id, self.user, reason, override)

    def writes(self, reason: str | None = None, **options: Any) -> WriteOptions:
        """How a catalog write this principal makes is made: by it (``reason`` recorded), with its
        rights, and the rest of ``options`` (``registry.catalog.values.WriteOptions``)."""
        return WriteOptions(actor=self.actor(reason), access=self, **options)

    @property
    def may_use_mcp(self) -> bool:
        return bool(self.scopes)

    @property
    def may_read_any_label(self) -> bool:
        """Admin-API tokens can read every version anyway, so over MCP they may pick any label."""
        return self.has("viewer")

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC))


class TokenRejected(Exception):
    """A token that is not accepted; ``reason`` is safe to show the caller."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


INVALID_TOKEN = "invalid or revoked token"
EXPIRED_TOKEN = "token expired"
MALFORMED_TOKEN = "malformed token"

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def looks_like_jwt(token: str) -> bool:
    """Three base64url segments, and not one of our own tokens (``mcpr_...``)."""
    return not token.startswith(TOKEN_PREFIX) and _JWT_SHAPE.fullmatch(token) is not None


class JwtVerifier(Protocol):
    """Verifies single sign-on bearer JWTs (``registry.oidc.OidcVerifier``)."""

    def verify(self, token: str) -> Principal:
        """The token's principal; raises ``TokenRejected`` saying why it is refused."""
        ...


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
        "expires_at": _aware(token.expires_at).isoformat() if token.expires_at else None,
        "expired": token.expires_at is not None and _aware(token.expires_at) <= datetime.now(UTC),
        "teams": dict(token.teams or {}),
    }


def check_teams(teams: Mapping[str, str] | None) -> dict[str, str]:
    """Validated team memberships (team -> role); raises ``Invalid`` naming the bad one."""
    result: dict[str, str] = {}
    for team, role in (teams or {}).items():
        if not isinstance(team, str) or not re.fullmatch(TEAM_PATTERN, team):
            raise Invalid(f"invalid team name {team!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
        if role not in _RANK:
            raise Invalid(f"invalid role {role!r} in team {team!r}: use one of {', '.join(TEAM_ROLES)}")
        result[team] = role
    if len(result) > 256:
        raise Invalid("a token may belong to at most 256 teams")
    return result


def check_scopes(scopes: Iterable[str]) -> list[str]:
    """Validated scopes, sorted: a non-empty subset of ``SCOPES`` without a contradiction.

    ``agent`` means "MCP only" and every other scope opens the admin API (and MCP too), so a
    token with both would be both; it is refused, naming the two. A weaker scope beside a
    stronger one (``admin`` + ``viewer``) is only redundant and is accepted, as before."""
    chosen = sorted(set(scopes))
    if not chosen or any(s not in SCOPES for s in chosen):
        raise Invalid(f"scopes must be a non-empty subset of {', '.join(SCOPES)}")
    others = [s for s in SCOPES if s in chosen and s != "agent"]
    if "agent" in chosen and others:
        raise Invalid(
            f"scopes agent and {others[0]} contradict each other: agent means MCP only, while {others[0]} opens "
            f"the admin API (and MCP too). Give one: {others[0]} alone, or agent alone"
        )
    return chosen


def acts_as(scopes: Iterable[str]) -> str | None:
    """The one role a token's scopes amount to: its strongest scope (``agent`` when it has no
    other). For listing tokens made before ``check_scopes``, whose scopes may be mixed."""
    held = set(scopes)
    return next((s for s in SCOPES if s in held), None)


def _aware(value: datetime) -> datetime:
    """A UTC-aware datetime (a naive one is taken to be UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class TokenService:
    #: How long a successful lookup is trusted before the database is asked again (revocation delay).
    CACHE_SECONDS = 5.0
    #: How long a verified JWT's principal is kept (never past the token's ``exp``): saves the
    #: signature check on every request of a busy agent; a JWT cannot be revoked here anyway.
    JWT_CACHE_SECONDS = 60.0

    def __init__(self, db: Database, jwt_verifier: JwtVerifier | None = None) -> None:
        self.db = db
        #: Single sign-on: JWT-shaped bearer tokens go here (None: static tokens only).
        self.jwt_verifier = jwt_verifier
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        #: Called with a token id after this process revoked it (from the revoking thread).
        self._revoke_listeners: list[Callable[[int], None]] = []

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        label: str | None = None,
        created_by: str | None = None,
        value: str | None = None,
        expires_at: datetime | None = None,
        teams: Mapping[str, str] | None = None,
        actor: Actor | str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """A new token (its value is returned only here). ``expires_at``: when it stops working;
        ``teams``: team -> role memberships. ``actor``: who creates it, for the audit trail's
        ``token_created`` event (default: ``created_by``)."""
        memberships = check_teams(teams)
        if not name or len(name) > 128:
            raise Invalid("token name must be 1-128 characters")
        scopes = check_scopes(scopes)
        if label is not None and not re.fullmatch(LABEL_PATTERN, label):
            raise Invalid(f"invalid label {label!r}")
        if expires_at is not None:
            expires_at = _aware(expires_at)
            if expires_at <= datetime.now(UTC):
                raise Invalid("expires_at must be in the future")
        token = value or TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.db.session() as session:
            unknown = missing_teams(session, memberships)
            if unknown:
                raise Invalid(f"unknown team {unknown[0]!r}: teams must exist before tokens join them")
            row = ApiToken(
                name=name,
                token_hash=hash_token(token),
                scopes=scopes,
                label=label,
                created_by=created_by,
                expires_at=expires_at,
                teams=memberships,
            )
            session.add(row)
            session.flush()
            info = token_as_dict(row)
            who = actor if actor is not None else (created_by or "system")
            _token_event(session, "token_created", info, actor=who, note=_describe_token(info))
        return token, info

    def ensure(self, name: str, value: str, scopes: Iterable[str]) -> None:
        """Make sure a token with this exact value exists and is active (``REGISTRY_ADMIN_TOKEN``)."""
        token_digest = hash_token(value)
        with self.db.session() as session:
            row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest))
            if row is not None:
                scopes = sorted(set(row.scopes) | set(scopes))
                if row.revoked_at is not None or row.expires_at is not None or scopes != sorted(row.scopes):
                    row.revoked_at = None
                    row.expires_at = None
                    row.scopes = scopes
                    info = token_as_dict(row)
                    note = f"REGISTRY_ADMIN_TOKEN made it active again: {_describe_token(info)}"
                    _token_event(session, "token_restored", info, actor="environment", note=note)
                return
        self.create(name, scopes, value=value, created_by="environment")

    def record_expired(self, now: datetime | None = None) -> int:
        """Append a ``token_expired`` event for each token whose expiry has passed and has none
        yet (the sweep calls this every minute or so); how many it appended."""
        now = now or utcnow()
        with self.db.session() as session:
            if self.db.is_postgres:  # replicas sweep too: one at a time decides what is recorded
                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHANGELOG_LOCK_KEY})
            expired = list(
                session.scalars(
                    select(ApiToken).where(
                        ApiToken.expires_at.is_not(None), ApiToken.expires_at <= now, ApiToken.revoked_at.is_(None)
                    )
                )
            )
            if not expired:
                return 0
            refs = [_token_ref(row.id) for row in expired]
            recorded = set(
                session.scalars(select(Change.ref).where(Change.action == "token_expired", Change.ref.in_(refs)))
            )
            added = 0
            for row in expired:
                if _token_ref(row.id) in recorded:
                    continue
                append_event(
                    session,
                    kind="token",
                    name=row.name,
                    action="token_expired",
                    actor="system",
                    ref=_token_ref(row.id),
                    note=f"token #{row.id} expired at {_aware(row.expires_at).isoformat() if row.expires_at else now}",
                )
                added += 1
            return added

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.db.session() as session:
            return [token_as_dict(t) for t in session.scalars(select(ApiToken).order_by(ApiToken.id))]

    def on_revoke(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(token_id)`` after this process revokes a token or changes its teams (in
        that thread): either way what the token's open streams were opened with no longer holds."""
        self._revoke_listeners.append(listener)

    def revoke(self, token_id: int, *, actor: Actor | str = "system") -> dict[str, Any]:
        with self.db.session() as session:
            row = session.get(ApiToken, token_id)
            if row is None:
                raise NotFound(f"token {token_id} does not exist")
            newly = row.revoked_at is None
            if newly:
                row.revoked_at = utcnow()
            info = token_as_dict(row)
            if newly:
                _token_event(session, "token_revoked", info, actor=actor, note=f"token #{token_id} revoked")
            if self.db.is_postgres:
                # Delivered at commit, to every replica (this one included) listening on the channel.
                session.execute(
                    text("SELECT pg_notify(:channel, :id)"), {"channel": TOKEN_REVOKED_CHANNEL, "id": str(token_id)}
                )
        self._changed(token_id)
        return info

    def _changed(self, token_id: int) -> None:
        """After this process revoked a token or changed its teams: forget cached verifications
        and tell the listeners (which close the token's MCP streams)."""
        self.forget_cached()
        for listener in self._revoke_listeners:
            try:
                listener(token_id)
            except Exception:
                log.exception("token revocation listener failed")

    def set_teams(
        self, token_id: int, teams: Mapping[str, str] | None, *, actor: Actor | str = "system"
    ) -> dict[str, Any]:
        """Replace token ``token_id``'s team memberships (team -> role; empty: none) and answer
        the token as it is now.

        Audited as ``token_teams_changed`` (the note says before and after; the digest covers the
        new memberships). It takes effect at once, as a revocation does: the verification cache
        is cleared here and, through ``TOKEN_CHANGED_CHANNEL``, on every replica, and the token's
        MCP streams are closed (a stream keeps the view it was opened with; the agent reconnects
        and sees the new one). Web UI sessions read the token's row on every request anyway.
        A revoked or expired token is refused (``Conflict``): it can never be used again. The
        same memberships again write nothing."""
        memberships = check_teams(teams)
        with self.db.session() as session:
            row = session.get(ApiToken, token_id, with_for_update=True)
            if row is None:
                raise NotFound(f"token {token_id} does not exist")
            if row.revoked_at is not None:
                raise Conflict(f"token {token_id} ({row.name}) is revoked: its teams can no longer change")
            if row.expires_at is not None and _aware(row.expires_at) <= datetime.now(UTC):
                raise Conflict(f"token {token_id} ({row.name}) has expired: its teams can no longer change")
            unknown = missing_teams(session, memberships)
            if unknown:
                raise Invalid(f"unknown team {unknown[0]!r}: teams must exist before tokens join them")
            before = dict(row.teams or {})
            if before == memberships:
                return token_as_dict(row)
            row.teams = memberships
            info = token_as_dict(row)
            note = f"token #{token_id} teams: {_describe_teams(before)} -> {_describe_teams(memberships)}"
            _token_event(session, "token_teams_changed", info, actor=actor, note=note)
            if self.db.is_postgres:
                session.execute(
                    text("SELECT pg_notify(:channel, :id)"), {"channel": TOKEN_CHANGED_CHANNEL, "id": str(token_id)}
                )
        self._changed(token_id)
        return info

    def note_use(self, token_id: int, last_used_at: datetime | None) -> None:
        """Note a web UI request of token ``token_id`` as its last use, when the stored instant
        (``last_used_at``, as the caller just read it) is more than ``CACHE_SECONDS`` old: the
        resolution MCP and admin-API use get from the verification cache, without a write per
        page. A database whose disk is full only misses the note."""
        now = utcnow()
        if last_used_at is not None and (now - _aware(last_used_at)).total_seconds() < self.CACHE_SECONDS:
            return
        stale = now - timedelta(seconds=self.CACHE_SECONDS)
        try:
            with self.db.session() as session:
                session.execute(
                    update(ApiToken)
                    .where(
                        ApiToken.id == token_id,
                        or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < stale),
                    )
                    .values(last_used_at=now)
                )
        except Exception as exc:
            if not is_full(exc):
                raise

    def forget_cached(self) -> None:
        """Drop every cached verification (a token was revoked here or on another replica)."""
        with self._lock:
            self._cache.clear()

    def peek(self, token: str) -> Principal | None:
        """A recently verified, unexpired token's principal, without touching the database
        (None: ask ``verify``, which also says why a token is refused)."""
        cached = self._cache.get(hash_token(token))
        if cached is not None and cached[0] > time.monotonic() and not cached[1].expired():
            return cached[1]
        return None

    def authenticate(self, token: str) -> Principal | None:
        """The token's principal, or None when it is unknown, revoked or expired."""
        try:
            return self.verify(token)
        except TokenRejected:
            return None

    def verify(self, token: str) -> Principal:
        """The token's principal; raises ``TokenRejected`` saying why it is refused."""
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            if cached[1].expired():
                raise TokenRejected(EXPIRED_TOKEN)
            return cached[1]
        jwt_refusal: TokenRejected | None = None
        if self.jwt_verifier is not None and looks_like_jwt(token):
            try:
                principal = self.jwt_verifier.verify(token)
            except TokenRejected as exc:
                if exc.reason != MALFORMED_TOKEN:
                    raise
                jwt_refusal = exc  # not a JWT after all: maybe a static token with dots in it
            else:
                self._remember(digest, now + self.JWT_CACHE_SECONDS, principal)
                return principal
        checked: Principal | None = None
        try:
            with self.db.session() as session:
                row = session.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
                if row is None or row.revoked_at is not None:
                    raise jwt_refusal or TokenRejected(INVALID_TOKEN)
                expires_at = _aware(row.expires_at) if row.expires_at is not None else None
                principal = Principal(
                    row.id,
                    row.name,
                    frozenset(row.scopes),
                    row.label,
                    expires_at,
                    teams=tuple(sorted((row.teams or {}).items())),
                )
                if principal.expired():
                    raise TokenRejected(EXPIRED_TOKEN)
                checked = principal
                row.last_used_at = utcnow()
        except Exception as exc:
            # The token was read and is valid; only noting its use could not be stored because the
            # database or its disk is full. That must not turn a read into a 503: serve it.
            if checked is None or not is_full(exc):
                raise
            principal = checked
        self._remember(digest, now + self.CACHE_SECONDS, principal)
        return principal

    def _remember(self, digest: str, until: float, principal: Principal) -> None:
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (until, principal)


def _token_ref(token_id: int) -> str:
    """The ``ref`` of every audit event about token ``token_id``."""
    return f"token:{token_id}"


def _token_event(session: Session, action: str, info: Mapping[str, Any], *, actor: Actor | str, note: str) -> None:
    """Append a token's governance event; its digest covers what the token may do (``info``)."""
    append_event(
        session,
        kind="token",
        name=info["name"],
        action=action,
        actor=actor,
        ref=_token_ref(info["id"]),
        note=note,
        digest=digest(_audited_fields(info)),
    )


def _audited_fields(info: Mapping[str, Any]) -> dict[str, Any]:
    """What a token event's digest covers: what the token may do, never its value."""
    return {key: info.get(key) for key in ("id", "name", "scopes", "label", "teams", "expires_at", "revoked_at")}


def _describe_teams(teams: Mapping[str, str] | None) -> str:
    return ", ".join(f"{team}:{role}" for team, role in sorted((teams or {}).items())) or "none"


def _describe_token(info: Mapping[str, Any]) -> str:
    teams = _describe_teams(info.get("teams"))
    return (
        f"token #{info['id']}: scopes {', '.join(info.get('scopes') or [])}; teams {teams}; "
        f"label {info.get('label') or '-'}; expires {info.get('expires_at') or 'never'}"
    )
