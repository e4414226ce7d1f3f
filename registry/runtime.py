"""The running registry's parts, built once from the settings and shared by the app and the CLI."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from registry.catalog.audit_verify import brings_keys, key_the_chain
from registry.catalog.bundle_archive import ZipBundles
from registry.catalog.bundles import BundleService
from registry.catalog.drafts import DraftService
from registry.catalog.errors import Conflict
from registry.catalog.protection import ProtectionPolicy
from registry.catalog.reports import AuditService, UsageService
from registry.catalog.reviews import ChangeRequestService
from registry.catalog.secrets import SecretBox, audit_key, load_or_create_key
from registry.catalog.service import CatalogService
from registry.catalog.teams import TeamService
from registry.catalog.uploads import UploadStore
from registry.catalog.watchers import EntryWatchers
from registry.catalog.web_sessions import UiSessionStore
from registry.config import Settings
from registry.db import migrate
from registry.db.engine import Database, deadline
from registry.events.service import EventSubscriptionService
from registry.oidc import OidcVerifier
from registry.paths import seed_data_dir
from registry.tokens import TokenService
from registry.webhooks import WebhookURLError, parse_networks, validate_webhook_url_sync

log = logging.getLogger("registry")


def resolve_bundle(name_or_path: str) -> Path:
    """A bundle given as a folder, or as the name of one under ``seed_data/``."""
    candidate = Path(name_or_path)
    if candidate.is_dir():
        return candidate
    bundled = seed_data_dir() / name_or_path
    if bundled.is_dir():
        return bundled
    available = sorted(p.name for p in seed_data_dir().iterdir() if p.is_dir() and not p.name.startswith("_"))
    raise FileNotFoundError(f"no bundle folder {name_or_path!r}; bundled ones: {', '.join(available)}")


def registry_of(app: Any) -> Registry:
    """The registry an ASGI app (or the web UI's sub-app) was built with: the one place that knows it is kept
    on ``app.state``, so routes reach services through ``registry.api.deps`` and never through app state."""
    registry: Registry = app.state.registry
    return registry


def attach(app: Any, registry: Registry) -> None:
    """Keep ``registry`` on ``app`` for :func:`registry_of`."""
    app.state.registry = registry


class Registry:
    """Database, secrets, services. One per process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database.from_settings(settings)
        self.secrets = SecretBox(load_or_create_key(settings.secret_key, settings.data_dir))
        self.db.audit_key = audit_key(settings.audit_key, self.secrets)
        #: Labels no save moves (REGISTRY_PROTECTED_LABELS plus those protected through the API).
        self.protection = ProtectionPolicy(self.db, settings.protected_labels, settings.required_approvals)
        self.catalog = CatalogService(
            self.db, self.secrets, url_guard=self._url_guard(), limits=settings.limits, protection=self.protection
        )
        #: Change requests: moving protected labels by review.
        self.reviews = ChangeRequestService(self.catalog, self.protection)
        #: Bundles: import and export (``mcp-registry import``/``export``, the seed), zipped in the web UI.
        self.bundles = BundleService(self.db, self.catalog, self.protection)
        self.zip_bundles = ZipBundles(self.bundles)
        #: The editors' questions about unsaved definitions.
        self.drafts = DraftService(self.catalog, allowed_networks=parse_networks(settings.webhook_allowed_networks))
        #: Single sign-on: bearer JWTs from REGISTRY_OIDC_ISSUER (None: static tokens only).
        self.oidc = OidcVerifier(settings) if settings.oidc_issuer else None
        self.tokens = TokenService(self.db, jwt_verifier=self.oidc)
        self.teams = TeamService(self.db)
        self.audit = AuditService(self.db)
        self.usage = UsageService(self.db, settings.session_idle_timeout_s)
        #: Pages waiting for saves of one entry (fed by the MCP runtime's change feed).
        self.watchers = EntryWatchers(settings.limits.ui_event_streams)
        #: The web UI's sessions (a cookie for a token or a single sign-on) and its held bundle uploads.
        self.web_sessions = UiSessionStore(self.db, self.tokens, hours=settings.ui_session_hours)
        self.uploads = UploadStore(self.db)
        #: Change events to other systems: subscriptions and their delivery log (``registry.events``).
        self.events = EventSubscriptionService(self.db, self.secrets, settings.limits, url_guard=self._url_guard())

    def _url_guard(self) -> Callable[[str], None]:
        allowed = parse_networks(self.settings.webhook_allowed_networks)

        def guard(url: str) -> None:
            try:
                validate_webhook_url_sync(url, allowed)
            except WebhookURLError as exc:
                raise ValueError(str(exc)) from None

        return guard

    def migrate(self) -> None:
        """Migrate, and write this process's ``REGISTRY_PROTECTED_LABELS`` into the catalog."""
        with migrate.exclusive(self.db):
            self._upgrade()
            self.protection.record_settings()

    def _upgrade(self) -> None:
        """Migrate (under the caller's preparation lock) and key an unkeyed audit chain when this
        upgrade is the one that brought keys (``key_the_chain``); check the key either way."""
        before = migrate.current_revision(self.db)
        migrate.upgrade(self.db)
        key_the_chain(self.db, may_key=brings_keys(before))

    def is_empty(self) -> bool:
        """Whether the catalog has no entry at all (one indexed probe, whatever its size)."""
        with self.db.session() as session:
            return session.execute(text("SELECT id FROM entries LIMIT 1")).first() is None

    def seed(self, bundle: str, *, only_missing: bool = True, publish_protected: bool | None = None) -> None:
        """Load a bundle as the system (``seed``). Only the seed of an empty catalog publishes to
        protected labels (``publish_protected``; None: whether the catalog is empty now): on a
        catalog people already use, a seed's new entries go to review like any import's."""
        path = resolve_bundle(bundle)
        if publish_protected is None:
            publish_protected = self.is_empty()
        attempts = 3 if only_missing else 1
        for attempt in range(attempts):
            try:
                done = self.bundles.apply_import(
                    path, actor="seed", only_missing=only_missing, publish_protected=publish_protected
                )
                break
            except Conflict:
                # Someone not holding the preparation lock (an import, an admin) created one of these
                # entries between our look and our write: it is present now, which is all seeding wants.
                if attempt == attempts - 1:
                    raise
        created = sum(1 for item in done if item.action == "create")
        log.info("seed %s: %d created, %d already present", path.name, created, len(done) - created)
        opened = sorted(number for item in done for number in item.change_requests)
        if opened:
            shown = ", ".join(f"#{number}" for number in opened[:20]) + (" ..." if len(opened) > 20 else "")
            log.info("seed %s: the catalog was not empty, so protected labels wait for review: %s", path.name, shown)

    def prepare(self, *, seed: str | None = None, demo_if_empty: bool = False) -> None:
        """Migrate, ensure the environment's admin token, load seed data: under the database's
        preparation lock, so processes starting together take turns (the later ones find it done)."""
        with migrate.exclusive(self.db):
            self._upgrade()
            self.protection.record_settings()
            if self.settings.admin_token:
                self.tokens.ensure("admin (REGISTRY_ADMIN_TOKEN)", self.settings.admin_token, ["admin"])
            # The seeds of a start-up that found the catalog empty are the system's own first
            # catalog and publish; on a catalog in use, a seed's protected labels go to review.
            empty = self.is_empty()
            if demo_if_empty and empty:
                self.seed("demo", publish_protected=True)
            if seed:
                self.seed(seed, publish_protected=empty)

    def ready(self) -> tuple[bool, str]:
        """Whether the database answers and is migrated. Each round trip is bounded by
        ``db_ready_timeout_s``, so a frozen database makes this answer "no" quickly."""
        try:
            with deadline(self.settings.db_ready_timeout_s):
                current = migrate.is_current(self.db)
        except Exception as exc:
            return False, f"database unreachable: {type(exc).__name__}"
        if not current:
            return False, "database schema is not at the current migration; run `mcp-registry db upgrade`"
        return True, "ok"

    def close(self) -> None:
        if self.oidc is not None:
            self.oidc.close()
        self.db.dispose()
