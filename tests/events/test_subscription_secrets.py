"""A subscription's URL is a credential (a Slack webhook's path): the audit trail names only its
origin and only admins read those rows, it is stored encrypted and may be longer than 2,048
characters (PostgreSQL too), userinfo is refused, the URL check runs outside the row lock, and one
subscription whose secret no longer decrypts fails only its own deliveries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from registry.catalog.audit_log import AuditFilter, audit_page
from registry.catalog.errors import Invalid
from registry.catalog.secrets import SecretBox
from registry.db.changelog import append_change
from registry.db.models import EventDelivery, EventSubscription
from registry.events import queue
from registry.events.deliverer import EventDeliverer
from registry.events.service import AUDIT_KIND, EventSubscriptionService, SubscriptionInput
from registry.runtime import Registry
from registry.tokens import Principal
from registry.webhooks.ssrf import parse_networks
from tests.conftest import start_live_server
from tests.events.receiver import receiving
from tests.waiting import wait_until

SLACK = "https://user:pw@hooks.slack.com/services/T000/B000/XXXXSECRET?token=abc"
SLACK_PLAIN = "https://hooks.slack.com:8443/services/T000/B000/XXXXSECRET?token=abc"
VIEWER = Principal(token_id=None, name="viewer", scopes=frozenset({"viewer"}))
ADMIN = Principal(token_id=None, name="admin", scopes=frozenset({"admin"}))


def _service(registry: Registry, **limits: Any) -> EventSubscriptionService:
    return EventSubscriptionService(registry.db, registry.secrets, replace(registry.settings.limits, **limits))


def _subscribe(service: EventSubscriptionService, url: str, name: str = "s") -> dict[str, Any]:
    made, _secret = service.create(
        SubscriptionInput(name=name, url=url, events=["catalog.version.created"]), secret=None, actor="t", access=None
    )
    return made


def _save_prompt(registry: Registry, name: str) -> None:
    with registry.db.session() as session:
        append_change(session, kind="prompt", name=name, action="created", actor="t", labels=["latest"], version=1)


def test_the_audit_trail_names_only_the_receivers_origin_and_only_admins_read_it(registry: Registry) -> None:
    service = _service(registry)
    made = _subscribe(service, SLACK_PLAIN)
    service.update(made["id"], SubscriptionInput(url=SLACK_PLAIN + "&v=2"), actor="t", access=None)
    service.delete(made["id"], actor="t", access=None)

    rows = [r for r in audit_page(registry.db, AuditFilter(kind=AUDIT_KIND), access=ADMIN).items]
    assert [r["action"] for r in rows] == ["deleted", "updated", "created"]
    for row in rows:
        assert "hooks.slack.com:8443" in row["note"] and row["note"].startswith("https://")
        assert "services" not in row["note"] and "SECRET" not in row["note"] and "token" not in row["note"]
    # A viewer reads the trail (API and web UI alike go through audit_page): no subscription rows.
    assert audit_page(registry.db, AuditFilter(kind=AUDIT_KIND), access=VIEWER).items == []
    assert all(r["kind"] != AUDIT_KIND for r in audit_page(registry.db, AuditFilter(), access=VIEWER).items)


def test_a_subscriptions_url_is_stored_encrypted_and_shown_to_admins(registry: Registry) -> None:
    service = _service(registry)
    made = _subscribe(service, SLACK_PLAIN)
    with registry.db.session() as session:
        stored = session.get(EventSubscription, made["id"])
        assert stored is not None and "XXXXSECRET" not in stored.url and stored.url.startswith("enc:v1:")
    assert made["url"] == SLACK_PLAIN
    assert service.get(made["id"], access=ADMIN)["url"] == SLACK_PLAIN
    assert [s["url"] for s in service.list_subscriptions(ADMIN)] == [SLACK_PLAIN]


def test_userinfo_in_a_url_is_refused_at_save(settings: Any) -> None:
    registry, live = start_live_server(settings)
    try:
        with live.client() as api:
            answer = api.post(
                "/api/v1/event-subscriptions", json={"name": "x", "url": SLACK, "events": ["catalog.label.moved"]}
            )
            assert answer.status_code == 422, answer.text
            detail = answer.json()["detail"]
            assert "put credentials in the URL path or use the signature" in detail and "Basic auth" in detail
        with pytest.raises(Invalid, match="user name or password"):
            _subscribe(_service(registry), "https://a@hooks.example.com/x")
    finally:
        live.stop()
        registry.close()


async def test_an_undecryptable_secret_fails_only_its_own_deliveries(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    limits = registry.settings.limits
    with receiving() as good_receiver, receiving() as bad_receiver:
        service = _service(registry)
        good = _subscribe(service, good_receiver.url, "good")
        bad = _subscribe(service, bad_receiver.url, "bad")
        other_key = SecretBox("another key, not the registry's")
        with registry.db.session() as session:
            row = session.get(EventSubscription, bad["id"])
            assert row is not None
            row.secret = other_key.encrypt("whsec_" + "A" * 32)
        _save_prompt(registry, "p")
        deliverer = EventDeliverer(
            registry.db, registry.secrets, limits, allowed_networks=parse_networks("127.0.0.0/8"), retry_base_s=60
        )
        await deliverer.start()
        try:
            with caplog.at_level(logging.WARNING, logger="registry.events"):
                for _ in range(3):
                    await deliverer.round()
                    await asyncio.sleep(0.1)
                await asyncio.to_thread(wait_until, lambda: good_receiver.all(), "the good one's event", timeout=15)
                for _ in range(2):
                    await deliverer.round()
                    await asyncio.sleep(0.1)
        finally:
            await deliverer.stop()
        assert bad_receiver.all() == []
        warnings = [r for r in caplog.records if "cannot decrypt the signing secret" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
    with registry.db.session() as session:
        (failed,) = session.query(EventDelivery).filter(EventDelivery.subscription_id == bad["id"])
        assert failed.status == "pending" and failed.attempts == 1
        assert failed.last_error == queue.UNDECRYPTABLE == "cannot decrypt the signing secret: rotate it"
        assert failed.next_attempt_at > failed.last_attempt_at  # backs off like any failure
        (delivered,) = session.query(EventDelivery).filter(EventDelivery.subscription_id == good["id"])
        assert delivered.status == "delivered"


def test_a_url_longer_than_2048_characters_is_saved(registry: Registry) -> None:
    service = _service(registry, uri_chars=8192)
    url = "https://hooks.example.com/" + "a" * 3000
    made = _subscribe(service, url)
    assert service.get(made["id"], access=None)["url"] == url
    longer = url + "b" * 1000
    assert service.update(made["id"], SubscriptionInput(url=longer), actor="t", access=None)["url"] == longer


def test_update_checks_the_url_before_locking_the_row(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    open_sessions = [0]
    checked_inside: list[int] = []
    real = registry.db.session

    @contextlib.contextmanager
    def counted() -> Iterator[Any]:
        open_sessions[0] += 1
        try:
            with real() as session:
                yield session
        finally:
            open_sessions[0] -= 1

    def guard(_url: str) -> None:
        checked_inside.append(open_sessions[0])

    service = EventSubscriptionService(registry.db, registry.secrets, registry.settings.limits, url_guard=guard)
    made = _subscribe(service, "https://hooks.example.com/a")
    monkeypatch.setattr(registry.db, "session", counted)
    service.update(made["id"], SubscriptionInput(url="https://hooks.example.com/b"), actor="t", access=None)
    assert checked_inside == [0, 0]  # create's, then update's: neither inside a session
