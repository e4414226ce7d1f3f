"""Settings, read once from the environment (and the CLI, which overrides them).

Kept as a plain frozen dataclass so tests can build one directly without touching os.environ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from registry.limits import Limits

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class SettingsError(ValueError):
    """Settings a server cannot run with; the message names the setting to change."""


def check_server_settings(settings: Settings) -> None:
    """Refuse, at start-up, settings an HTTP server must not run with (``SettingsError``).

    The web UI's single sign-on sends browsers to the issuer with a ``redirect_uri``; taken from
    the request's ``Host`` header, anyone could make it point elsewhere (the issuer then sends the
    authorization code to that host, if it accepts the URI). So with single sign-on for the web UI
    the public URL must be configured: one address, the operator's, registered at the issuer too.
    """
    if settings.oidc_issuer and settings.oidc_client_id and not settings.public_url:
        raise SettingsError(
            "single sign-on for the web UI (REGISTRY_OIDC_CLIENT_ID) needs REGISTRY_PUBLIC_URL, the address people "
            "reach this server at (e.g. https://registry.example.com): sign-in redirects are built from it, never "
            "from a request's Host header; register its /ui/sso/callback at the issuer"
        )
    if settings.public_url:
        parts = urlsplit(settings.public_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise SettingsError(
                f"REGISTRY_PUBLIC_URL must be an http(s) URL such as https://registry.example.com, "
                f"not {settings.public_url[:200]!r}"
            )


def _env_bool(name: str, default: bool | None) -> bool | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str) -> tuple[str, ...]:
    raw = os.environ.get(name, "")
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _positive(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path.cwd() / "data")
    database_url: str | None = None
    admin_token: str | None = None
    secret_key: str | None = None
    #: The audit chain's key (``REGISTRY_AUDIT_KEY``); None: derived from the secret key.
    audit_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    #: Extra Origins allowed on the MCP endpoint besides the server's own.
    allowed_origins: tuple[str, ...] = ()
    #: None means "on when bound to loopback"; see ``anonymous_agents_enabled``.
    anonymous_agents: bool | None = None
    webhook_allowed_networks: str = ""
    session_idle_timeout_s: float = 3600.0
    #: ``ttlMs`` on cacheable 2026-07-28 results (lists, reads, discovery): how long a client may
    #: reuse one. Short, since admins edit the catalog under running agents (0: do not reuse).
    cache_ttl_ms: int = 5000
    #: Labels that agents whose token names no label (and anonymous agents) may pick with ``?label=``.
    agent_selectable_labels: tuple[str, ...] = ("production", "staging")
    #: Size, structure, time and count limits on everything callers send (see registry/limits.py).
    limits: Limits = field(default_factory=Limits)
    #: PostgreSQL connect timeout in seconds (libpq counts whole seconds, at least 2).
    db_connect_timeout_s: float = 2.0
    #: PostgreSQL ``statement_timeout`` in seconds (0: none). A round trip that gets no answer for
    #: this long plus 2 s (a frozen server answers nothing, not even an error) is abandoned too.
    db_statement_timeout_s: float = 15.0
    #: How long the liveness ping of a pooled PostgreSQL connection waits for the database before
    #: it counts as unavailable (503 / "temporarily unavailable") for a moment. Generous enough that
    #: a busy machine is not taken for a dead database.
    db_ping_timeout_s: float = 2.0
    #: How long /readyz waits for the database: readiness probes want an answer within a second.
    db_ready_timeout_s: float = 0.8
    #: SQLite: how long a write waits for a lock held by another connection or process.
    db_busy_timeout_s: float = 30.0
    #: Addresses (IPs or CIDRs, comma-separated; ``*`` for any) of reverse proxies whose
    #: X-Forwarded-For / X-Forwarded-Proto headers are believed. None: the headers are ignored, so
    #: nobody can claim another client address or scheme by sending them.
    forwarded_allow_ips: str | None = None
    #: How long a web UI sign-in lasts (hours; never past the token's own expiry).
    ui_session_hours: float = 12.0
    #: Labels no save moves: a change request approved by other reviewers does (more can be
    #: protected through the API and the UI). Empty in the embedded default (publish on save, so
    #: one person can try the product alone); the compose file protects ``production``.
    protected_labels: tuple[str, ...] = ()
    #: Approvals (by reviewers other than the author) a change request needs by default.
    required_approvals: int = 1
    #: Single sign-on: the OIDC issuer whose bearer JWTs the admin API and MCP accept, and through
    #: which the web UI signs people in (None: static tokens only).
    oidc_issuer: str | None = None
    #: The ``aud`` access tokens must carry. None: bearer JWTs are refused (single sign-on then
    #: opens the web UI only); it is never taken from the client id, which ID tokens carry.
    oidc_audience: str | None = None
    #: The web UI's client at the issuer (authorization code + PKCE); the secret is optional.
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    #: The claims that name the user, their teams (``team:role`` strings or a team -> role
    #: object) and their registry role (admin | reviewer | editor | viewer | agent).
    oidc_user_claim: str = "sub"
    oidc_name_claim: str = "email"
    oidc_teams_claim: str = "groups"
    oidc_role_claim: str = "registry_role"
    #: The role of a user whose token has no role claim.
    oidc_default_role: str = "viewer"
    #: Scopes the web UI asks the issuer for.
    oidc_scopes: str = "openid profile email"
    #: How long discovery and the JWKS are trusted before they are fetched again (an unknown key
    #: id fetches the JWKS at once, at most every ``oidc_jwks_min_refresh_s``).
    oidc_jwks_cache_s: float = 300.0
    oidc_jwks_min_refresh_s: float = 10.0
    #: The server's public base URL (``https://registry.example.com``), for the OAuth
    #: protected-resource metadata and sign-in redirects; None: taken from each request, which is
    #: refused with single sign-on for the web UI (``check_server_settings``).
    public_url: str | None = None
    #: Count uses (gets, reads, calls) per entry version and agent per hour.
    usage_enabled: bool = True
    #: How often counted uses are added to the database.
    usage_flush_s: float = 10.0
    #: Record tool and prompt argument values in trace spans (``REGISTRY_TRACE_ARGUMENTS``); off: never.
    trace_arguments: bool = False
    #: How often new MCP sessions made during a burst are written (their rows, batched).
    session_flush_s: float = 0.2
    #: How often a process reads the change log unpoked: the backstop for a missed NOTIFY or sibling poke.
    change_poll_s: float = 2.0
    #: ``serve``: processes serving the one port (each a full replica; 1: a single process, no supervisor).
    workers: int = 1
    #: Seconds a stopping server (SIGTERM) gives running requests to finish (uvicorn's graceful
    #: shutdown); shortly before it ends, those still running are answered "server restarting".
    shutdown_grace_s: float = 10.0
    #: Deliver change events to subscriptions (``registry.events``) from this process, when it holds the lease.
    events_enabled: bool = True
    #: Retry schedule of a failed event delivery: ``base * 2**(attempt-1)``, at most ``max``, and the
    #: attempts after which it is given up (``failed``; "redeliver" queues it again).
    events_retry_base_s: float = 5.0
    events_retry_max_s: float = 600.0
    events_max_attempts: int = 10
    #: How long the delivering process's lease lasts unrenewed (renewed every third of it): how long
    #: events wait after that process died without stopping (kill -9, a lost machine).
    events_lease_s: float = 30.0

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = Path(os.environ.get("REGISTRY_DATA_DIR", str(Path.cwd() / "data")))
        return cls(
            data_dir=data_dir,
            database_url=os.environ.get("REGISTRY_DATABASE_URL") or None,
            admin_token=os.environ.get("REGISTRY_ADMIN_TOKEN") or None,
            secret_key=os.environ.get("REGISTRY_SECRET_KEY") or None,
            audit_key=os.environ.get("REGISTRY_AUDIT_KEY") or None,
            host=os.environ.get("REGISTRY_HOST", "127.0.0.1"),
            port=int(os.environ.get("REGISTRY_PORT", "8080")),
            allowed_origins=_env_list("REGISTRY_ALLOWED_ORIGINS"),
            anonymous_agents=_env_bool("REGISTRY_ANONYMOUS_AGENTS", None),
            webhook_allowed_networks=os.environ.get("REGISTRY_WEBHOOK_ALLOWED_NETWORKS", ""),
            session_idle_timeout_s=float(os.environ.get("REGISTRY_SESSION_IDLE_TIMEOUT_S", "3600")),
            cache_ttl_ms=max(0, int(os.environ.get("REGISTRY_CACHE_TTL_MS", "5000"))),
            agent_selectable_labels=_env_list("REGISTRY_AGENT_LABELS") or ("production", "staging"),
            limits=Limits.from_env(),
            db_connect_timeout_s=float(os.environ.get("REGISTRY_DB_CONNECT_TIMEOUT_S", "2")),
            db_statement_timeout_s=float(os.environ.get("REGISTRY_DB_STATEMENT_TIMEOUT_S", "15")),
            db_ping_timeout_s=float(os.environ.get("REGISTRY_DB_PING_TIMEOUT_S", "2")),
            db_ready_timeout_s=float(os.environ.get("REGISTRY_DB_READY_TIMEOUT_S", "0.8")),
            db_busy_timeout_s=float(os.environ.get("REGISTRY_DB_BUSY_TIMEOUT_S", "30")),
            forwarded_allow_ips=os.environ.get("REGISTRY_FORWARDED_ALLOW_IPS", "").strip() or None,
            ui_session_hours=float(os.environ.get("REGISTRY_UI_SESSION_HOURS", "12")),
            protected_labels=_env_list("REGISTRY_PROTECTED_LABELS"),
            required_approvals=max(1, int(os.environ.get("REGISTRY_REQUIRED_APPROVALS", "1"))),
            oidc_issuer=os.environ.get("REGISTRY_OIDC_ISSUER") or None,
            oidc_audience=os.environ.get("REGISTRY_OIDC_AUDIENCE") or None,
            oidc_client_id=os.environ.get("REGISTRY_OIDC_CLIENT_ID") or None,
            oidc_client_secret=os.environ.get("REGISTRY_OIDC_CLIENT_SECRET") or None,
            oidc_user_claim=os.environ.get("REGISTRY_OIDC_USER_CLAIM") or "sub",
            oidc_name_claim=os.environ.get("REGISTRY_OIDC_NAME_CLAIM") or "email",
            oidc_teams_claim=os.environ.get("REGISTRY_OIDC_TEAMS_CLAIM") or "groups",
            oidc_role_claim=os.environ.get("REGISTRY_OIDC_ROLE_CLAIM") or "registry_role",
            oidc_default_role=os.environ.get("REGISTRY_OIDC_DEFAULT_ROLE") or "viewer",
            oidc_scopes=os.environ.get("REGISTRY_OIDC_SCOPES") or "openid profile email",
            oidc_jwks_cache_s=float(os.environ.get("REGISTRY_OIDC_JWKS_CACHE_S", "300")),
            oidc_jwks_min_refresh_s=float(os.environ.get("REGISTRY_OIDC_JWKS_MIN_REFRESH_S", "10")),
            public_url=(os.environ.get("REGISTRY_PUBLIC_URL") or "").rstrip("/") or None,
            usage_enabled=_env_bool("REGISTRY_USAGE", True) is not False,
            usage_flush_s=float(os.environ.get("REGISTRY_USAGE_FLUSH_S", "10")),
            trace_arguments=_env_bool("REGISTRY_TRACE_ARGUMENTS", False) is True,
            session_flush_s=min(0.5, max(0.01, float(os.environ.get("REGISTRY_SESSION_FLUSH_S", "0.2")))),
            change_poll_s=_positive("REGISTRY_CHANGE_POLL_S", 2.0),
            workers=int(os.environ.get("REGISTRY_WORKERS", "1") or "1"),
            shutdown_grace_s=_positive("REGISTRY_SHUTDOWN_GRACE_S", 10.0),
            events_enabled=_env_bool("REGISTRY_EVENTS", True) is not False,
            events_retry_base_s=_positive("REGISTRY_EVENTS_RETRY_BASE_S", 5.0),
            events_retry_max_s=_positive("REGISTRY_EVENTS_RETRY_MAX_S", 600.0),
            events_max_attempts=max(1, int(os.environ.get("REGISTRY_EVENTS_MAX_ATTEMPTS", "10") or "10")),
            events_lease_s=max(1.0, _positive("REGISTRY_EVENTS_LEASE_S", 30.0)),
        )

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'registry.db').as_posix()}"

    @property
    def oidc_bearer_enabled(self) -> bool:
        """Whether bearer JWTs from the issuer open the admin API and MCP: only with an explicit
        ``REGISTRY_OIDC_AUDIENCE`` (the client id alone is for the web UI's sign-in)."""
        return bool(self.oidc_issuer and self.oidc_audience)

    @property
    def anonymous_agents_enabled(self) -> bool:
        if self.anonymous_agents is not None:
            return self.anonymous_agents
        return self.host in LOOPBACK_HOSTS
