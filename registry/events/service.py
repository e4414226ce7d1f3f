"""Event subscriptions and their delivery log: what the admin API and the web UI call (admins only).

A subscription's signing secret is generated here (or supplied by the admin), returned once, and
stored encrypted. Creating, changing, deleting a subscription, rotating its secret and redelivering
are governance events in the change log (kind ``event_subscription``): audited like teams and
tokens, and, being change-log rows, they wake the delivering replica wherever it runs.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.catalog.access import Access
from registry.catalog.errors import Conflict, Invalid, NotFound
from registry.catalog.secrets import SecretBox, SecretKeyError
from registry.catalog.teams import check_admin
from registry.db.audit import Actor
from registry.db.changelog import CATALOG_KINDS, append_event, last_change_id
from registry.db.engine import Database
from registry.db.models import Entry, EventDelivery, EventSubscription, utcnow
from registry.limits import Limits, env_name

from .signing import generate_secret, secret_key
from .types import EVENT_TYPES, TOOL_TEST_FAILED, TOOL_TEST_KIND, Filters

#: The change-log kind of subscription events (``kind`` holds 16 characters).
AUDIT_KIND = "subscription"
NAME_CHARS = 128
DELIVERY_STATUSES = ("pending", "delivered", "failed")
#: How long a rotated-out secret keeps signing, beside the new one.
ROTATION_GRACE = timedelta(hours=24)
#: What a subscription's URL reads as when the key that encrypted it is gone.
UNREADABLE_URL = "(cannot be decrypted: set its URL again)"
_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TEAM = re.compile(r"-|[a-z0-9][a-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class SubscriptionInput:
    """What an admin sends to create or change a subscription (None: unchanged, on an update)."""

    name: str | None = None
    url: str | None = None
    events: Sequence[str] | None = None
    filters: dict[str, Any] | None = None
    slack_text: bool | None = None
    enabled: bool | None = None


def _limit(name: str, loc: str, message: str) -> Invalid:
    return Invalid(
        f"{message} (limit {env_name(name)})", errors=[{"loc": loc, "msg": message, "limit": env_name(name)}]
    )


class EventSubscriptionService:
    def __init__(
        self, db: Database, secrets: SecretBox, limits: Limits, url_guard: Callable[[str], None] | None = None
    ) -> None:
        self.db = db
        self.secrets = secrets
        self.limits = limits
        self.url_guard = url_guard
        #: Told after a change that gives the deliverer work (this process's deliverer, if any).
        self.wake: Callable[[], None] | None = None

    # ---------------------------------------------------------------- checks

    def _check_url(self, url: str) -> str:
        """The URL as stored. Blocking (the guard resolves the host): call it before a session
        opens, never while a row is locked. Userinfo is refused: it would go out as Basic auth
        without the admin seeing it, and it is the one place a URL credential has no need to be."""
        url = url.strip()
        if len(url) > self.limits.uri_chars:
            raise _limit("uri_chars", "url", f"the URL has {len(url)} characters; at most {self.limits.uri_chars}")
        if not re.match(r"https?://", url):
            raise Invalid("the URL must be http:// or https://")
        if _has_userinfo(url):
            message = (
                "the URL holds a user name or password (user:password@host), which would be sent as Basic "
                "auth: put credentials in the URL path or use the signature"
            )
            raise Invalid(message, errors=[{"loc": "url", "msg": message}])
        if self.url_guard is not None:
            try:
                self.url_guard(url)
            except ValueError as exc:
                raise Invalid(f"the URL is refused: {exc}") from None
        return url

    def _check_events(self, events: Sequence[str]) -> list[str]:
        unknown = sorted(set(events) - set(EVENT_TYPES))
        if unknown:
            raise Invalid(f"unknown event types: {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}")
        if not events:
            raise Invalid("choose at least one event type")
        return sorted(set(events))

    def _check_filters(self, raw: dict[str, Any]) -> dict[str, Any]:
        filters = Filters.from_json(raw)
        bound = self.limits.event_filter_values
        for field, values, pattern in (
            ("kinds", filters.kinds, None),
            ("teams", filters.teams, _TEAM),
            ("labels", filters.labels, _LABEL),
        ):
            if len(values) > bound:
                raise _limit(
                    "event_filter_values",
                    f"filters.{field}",
                    f"the {field} filter has {len(values)} values; at most {bound}",
                )
            for value in values:
                if not isinstance(value, str):
                    raise Invalid(f"the {field} filter holds strings")
                if field == "kinds" and value not in CATALOG_KINDS:
                    raise Invalid(f"unknown kind {value!r} in the kinds filter; kinds: {', '.join(CATALOG_KINDS)}")
                if pattern is not None and not pattern.fullmatch(value):
                    raise Invalid(f"{value!r} is not a valid value of the {field} filter")
        if len(filters.name_prefix) > NAME_CHARS:
            raise Invalid(f"the name prefix has more than {NAME_CHARS} characters")
        return Filters(
            kinds=tuple(sorted(set(filters.kinds))),
            name_prefix=filters.name_prefix,
            teams=tuple(sorted(set(filters.teams))),
            labels=tuple(sorted(set(filters.labels))),
        ).as_json()

    def _check_secret(self, secret: str | None) -> str:
        if secret is None:
            return generate_secret()
        try:
            secret_key(secret)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
        return secret

    @staticmethod
    def _check_name(name: str) -> str:
        name = name.strip()
        if not name or len(name) > NAME_CHARS:
            raise Invalid(f"a subscription's name has 1 to {NAME_CHARS} characters")
        return name

    # ---------------------------------------------------------------- reads

    def _view(self, row: EventSubscription, counts: dict[str, int] | None = None) -> dict[str, Any]:
        """A subscription as admins see it (the routes are admin-only): the URL in full, decrypted."""
        return {
            "id": row.id,
            "name": row.name,
            "url": self.url_of(row),
            "events": list(row.events),
            "filters": Filters.from_json(row.filters).as_json(),
            "slack_text": row.slack_text,
            "enabled": row.enabled,
            "cursor": row.cursor,
            "created_by": row.created_by,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "deliveries": counts or {status: 0 for status in DELIVERY_STATUSES},
        }

    def url_of(self, row: EventSubscription) -> str:
        """The stored URL in clear; a placeholder when the key that encrypted it is gone (the page
        still lists the subscription, so it can be changed or deleted)."""
        try:
            return self.secrets.decrypt(row.url)
        except SecretKeyError:
            return UNREADABLE_URL

    @staticmethod
    def _counts(session: Session, ids: Sequence[int]) -> dict[int, dict[str, int]]:
        counts: dict[int, dict[str, int]] = {i: {status: 0 for status in DELIVERY_STATUSES} for i in ids}
        if ids:
            stmt = (
                select(EventDelivery.subscription_id, EventDelivery.status, func.count())
                .where(EventDelivery.subscription_id.in_(list(ids)))
                .group_by(EventDelivery.subscription_id, EventDelivery.status)
            )
            for subscription_id, status, count in session.execute(stmt):
                counts[subscription_id][status] = int(count)
        return counts

    def list_subscriptions(self, access: Access | None) -> list[dict[str, Any]]:
        check_admin(access, "event subscriptions")
        with self.db.session() as session:
            rows = list(session.scalars(select(EventSubscription).order_by(EventSubscription.id)))
            counts = self._counts(session, [row.id for row in rows])
            return [self._view(row, counts[row.id]) for row in rows]

    def _row(self, session: Session, subscription_id: int, *, lock: bool = False) -> EventSubscription:
        row = session.get(EventSubscription, subscription_id, with_for_update=lock)
        if row is None:
            raise NotFound(f"no event subscription {subscription_id}")
        return row

    def get(self, subscription_id: int, access: Access | None) -> dict[str, Any]:
        check_admin(access, "event subscriptions")
        with self.db.session() as session:
            row = self._row(session, subscription_id)
            return self._view(row, self._counts(session, [row.id])[row.id])

    def deliveries(
        self,
        subscription_id: int,
        access: Access | None,
        *,
        status: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[dict[str, Any]]:
        """The newest deliveries first (``before``: a delivery id, for the next page)."""
        check_admin(access, "event subscriptions")
        if status is not None and status not in DELIVERY_STATUSES:
            raise Invalid(f"status is one of {', '.join(DELIVERY_STATUSES)}")
        with self.db.session() as session:
            self._row(session, subscription_id)
            stmt = select(EventDelivery).where(EventDelivery.subscription_id == subscription_id)
            if status is not None:
                stmt = stmt.where(EventDelivery.status == status)
            if before is not None:
                stmt = stmt.where(EventDelivery.id < before)
            rows = session.scalars(stmt.order_by(EventDelivery.id.desc()).limit(max(1, min(limit, 500))))
            return [_delivery_view(row) for row in rows]

    # ---------------------------------------------------------------- writes

    def _audit(self, session: Session, row: EventSubscription, action: str, actor: Actor | str, note: str) -> None:
        append_event(
            session,
            kind=AUDIT_KIND,
            name=row.name[:128],
            action=action,
            actor=actor,
            note=note,
            ref=f"{AUDIT_KIND}:{row.id}",
        )

    def tool_test_failed(self, name: str, version: int, result: dict[str, Any], *, actor: Actor | str) -> None:
        """A tool test call (API or web UI) ended in an error result: the ``tool.test.failed`` event."""
        record_tool_test_failed(self.db, name, version, result, actor=actor)

    def _wake(self) -> None:
        if self.wake is not None:
            self.wake()

    def create(
        self, data: SubscriptionInput, *, secret: str | None, actor: Actor | str, access: Access | None
    ) -> tuple[dict[str, Any], str]:
        """The new subscription and its signing secret (shown this once). It gets the events
        committed after it; none from before."""
        check_admin(access, "event subscriptions")
        name = self._check_name(data.name or "")
        url = self._check_url(data.url or "")
        events = self._check_events(data.events or ())
        filters = self._check_filters(data.filters or {})
        secret = self._check_secret(secret)
        with self.db.session() as session:
            count = session.scalar(select(func.count()).select_from(EventSubscription)) or 0
            bound = self.limits.event_subscriptions
            if count >= bound:
                message = f"there are {count} event subscriptions; at most {bound}"
                raise Conflict(f"{message} (limit {env_name('event_subscriptions')})")
            now = utcnow()
            row = EventSubscription(
                name=name,
                url=self.secrets.encrypt(url),
                events=events,
                filters=filters,
                secret=self.secrets.encrypt(secret),
                slack_text=bool(data.slack_text),
                enabled=True if data.enabled is None else data.enabled,
                cursor=0,
                created_by=_actor_name(actor),
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            session.flush()
            self._audit(session, row, "created", actor, f"{url_origin(url)} for {', '.join(events)}")
            session.flush()
            # After its own audit row: it hears of what is committed from now on.
            row.cursor = last_change_id(session)
            view = self._view(row)
        return view, secret

    def update(
        self, subscription_id: int, data: SubscriptionInput, *, actor: Actor | str, access: Access | None
    ) -> dict[str, Any]:
        """Every check (the URL's resolves its host) runs before the row is locked: a slow
        resolver must not hold ``SELECT ... FOR UPDATE`` and stall the deliverer's queueing."""
        check_admin(access, "event subscriptions")
        name = None if data.name is None else self._check_name(data.name)
        url = None if data.url is None else self._check_url(data.url)
        events = None if data.events is None else self._check_events(data.events)
        filters = None if data.filters is None else self._check_filters(data.filters)
        with self.db.session() as session:
            row = self._row(session, subscription_id, lock=True)
            if name is not None:
                row.name = name
            if url is not None:
                row.url = self.secrets.encrypt(url)
            if events is not None:
                row.events = events
            if filters is not None:
                row.filters = filters
            if data.slack_text is not None:
                row.slack_text = data.slack_text
            if data.enabled is not None:
                row.enabled = data.enabled
            row.updated_at = utcnow()
            origin = url_origin(self.url_of(row))
            self._audit(session, row, "updated", actor, f"{origin} for {', '.join(row.events)}")
            view = self._view(row, self._counts(session, [row.id])[row.id])
        self._wake()
        return view

    def delete(self, subscription_id: int, *, actor: Actor | str, access: Access | None) -> dict[str, Any]:
        check_admin(access, "event subscriptions")
        with self.db.session() as session:
            row = self._row(session, subscription_id, lock=True)
            view = self._view(row, self._counts(session, [row.id])[row.id])
            self._audit(session, row, "deleted", actor, url_origin(self.url_of(row)))
            session.query(EventDelivery).filter(EventDelivery.subscription_id == row.id).delete(
                synchronize_session=False
            )
            session.delete(row)
        return view

    def rotate_secret(
        self, subscription_id: int, *, secret: str | None, actor: Actor | str, access: Access | None
    ) -> str:
        """A new signing secret (generated unless given), in use from the next attempt on; shown once.
        For ``ROTATION_GRACE`` the old one signs too (a second ``v1,`` signature in the header), so
        a receiver still checking with it accepts every event while it is being updated."""
        check_admin(access, "event subscriptions")
        secret = self._check_secret(secret)
        with self.db.session() as session:
            row = self._row(session, subscription_id, lock=True)
            now = utcnow()
            row.previous_secret, row.previous_secret_until = row.secret, now + ROTATION_GRACE
            row.secret = self.secrets.encrypt(secret)
            row.updated_at = now
            self._audit(session, row, "secret_rotated", actor, "signing secret replaced (the old one signs for 24 h)")
        return secret

    def redeliver(
        self, subscription_id: int, delivery_id: int, *, actor: Actor | str, access: Access | None
    ) -> dict[str, Any]:
        """Queue a delivery again, as it was (same body, same ``webhook-id``), due now; it goes in
        change-log order with the subscription's other pending ones."""
        check_admin(access, "event subscriptions")
        with self.db.session() as session:
            row = self._row(session, subscription_id)
            delivery = session.get(EventDelivery, delivery_id, with_for_update=True)
            if delivery is None or delivery.subscription_id != row.id:
                raise NotFound(f"no delivery {delivery_id} of event subscription {subscription_id}")
            delivery.status = "pending"
            delivery.attempts = 0
            delivery.next_attempt_at = utcnow()
            delivery.delivered_at = None
            self._audit(session, row, "redelivered", actor, f"{delivery.webhook_id} ({delivery.event_type})")
            view = _delivery_view(delivery)
        self._wake()
        return view


def record_tool_test_failed(
    db: Database, name: str, version: int, result: dict[str, Any], *, actor: Actor | str
) -> None:
    """Append a ``tool_test``/``test_failed`` event for a test call whose result is an error (the
    ``tool.test.failed`` event; audited like any governance event). Not kind ``tool``: catalog rows
    are replayed against the tables by ``audit verify``, and a test changes no entry. The note is a
    category only: the result's text quotes the caller's argument values (``'hunter2' is not of
    type 'number'``) and the receiver's answer, neither of which belongs in a permanent trail
    every viewer reads, nor in a message sent to subscribers."""
    error = failure_category(result)
    with db.session() as session:
        team = session.scalar(select(Entry.team).where(Entry.kind == "tool", Entry.name == name))
        append_event(
            session,
            kind=TOOL_TEST_KIND,
            name=name,
            action=TOOL_TEST_FAILED,
            actor=actor,
            team=team,
            version=version,
            note=error,
        )


#: (pattern of a registry-made error result's text, category). The first that matches names it.
_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^invalid arguments for tool "), "invalid arguments"),
    (
        re.compile(r"^tool \S+ (declares an|returned structuredContent that violates its) outputSchema"),
        "the result failed its outputSchema",
    ),
    (re.compile(r"^(webhook call to|built-in hook) .* timed out after "), "timeout"),
    (re.compile(r"^webhook call refused"), "refused by the SSRF guard"),
    (re.compile(r"^webhook call to .* was not made"), "an outbound limit was reached"),
    (re.compile(r"^could not connect to webhook host"), "could not connect"),
    (re.compile(r"^tool \S+ asked for input"), "the tool asked for input a test call cannot give"),
    (re.compile(r"^webhook response from .* could not be read"), "the answer could not be read"),
    (re.compile(r"^webhook (request to .* could not be sent|URL is not a valid)"), "the request could not be sent"),
    (re.compile(r"^webhook call to .* failed: "), "the connection failed"),
)
_HTTP_STATUS = re.compile(r"webhook returned HTTP (\d{3})")


def failure_category(result: dict[str, Any]) -> str:
    """A short, fixed description of an error result: never its text, which may quote argument
    values or whatever the tool answered; only a status code is carried over."""
    blocks = result.get("content") or []
    texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    first: str = texts[0] if texts else ""
    status = _HTTP_STATUS.match(first)
    if status is not None:
        return f"webhook answered HTTP {status.group(1)}"
    for pattern, category in _FAILURES:
        if pattern.search(first):
            return category
    return "the tool returned an error result"


def url_origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what the audit trail names. A receiver's URL is a
    credential (a Slack webhook's path, a token in the query), so its path, query and any userinfo
    stay out of the permanent record."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "(an invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _has_userinfo(url: str) -> bool:
    try:
        return "@" in urllib.parse.urlsplit(url).netloc
    except ValueError:
        return True


def _actor_name(actor: Actor | str) -> str:
    return (actor.name if isinstance(actor, Actor) else actor)[:128]


def _delivery_view(row: EventDelivery) -> dict[str, Any]:
    return {
        "id": row.id,
        "subscription_id": row.subscription_id,
        "change_id": row.change_id,
        "webhook_id": row.webhook_id,
        "event_type": row.event_type,
        "status": row.status,
        "attempts": row.attempts,
        "next_attempt_at": row.next_attempt_at if row.status == "pending" else None,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "created_at": row.created_at,
        "last_attempt_at": row.last_attempt_at,
        "delivered_at": row.delivered_at,
    }
