"""Change events delivered to a loopback receiver, on SQLite and PostgreSQL: Standard Webhooks
signatures checked by an implementation of the test's own, retries carrying the same webhook-id,
redelivery, event selection and filters, the SSRF guard, the limits, and the retry schedule and
lease fencing with an injected clock."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from registry.db.changelog import append_change, last_change_id
from registry.db.models import EventDelivery
from registry.events import queue
from registry.events.deliverer import EventDeliverer
from registry.events.lease import Lease
from registry.events.service import EventSubscriptionService, SubscriptionInput
from registry.events.signing import sign
from registry.events.types import EVENT_TYPES
from registry.runtime import Registry
from tests.conftest import LiveServer, start_live_server
from tests.events.receiver import Received, receiving, verify
from tests.waiting import wait_until

ALL_EVENTS = list(EVENT_TYPES)  # a subscription to every event type


@pytest.fixture
def server(settings: Any) -> Iterator[LiveServer]:
    """A registry that may reach loopback receivers, retrying quickly."""
    registry, live = start_live_server(
        settings,
        webhook_allowed_networks="127.0.0.0/8",
        events_retry_base_s=0.2,
        events_retry_max_s=0.5,
        change_poll_s=0.5,
    )
    yield live
    live.stop()
    registry.close()


def subscribe(api: httpx.Client, url: str, events: list[str], **more: Any) -> dict[str, Any]:
    answer = api.post("/api/v1/event-subscriptions", json={"name": "test", "url": url, "events": events, **more})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def create_prompt(api: httpx.Client, name: str, **more: Any) -> None:
    body = {"name": name, "template": "Hello {{ who }}", "arguments": [{"name": "who"}], **more}
    answer = api.post("/api/v1/prompts", json=body)
    assert answer.status_code == 201, answer.text


def settled(server: LiveServer, api: httpx.Client, *subscriptions: dict[str, Any]) -> bool:
    """Every subscription has examined the whole change log and has nothing pending."""
    with server.registry.db.session() as session:
        last = last_change_id(session)
    for subscription in subscriptions:
        now = api.get(f"/api/v1/event-subscriptions/{subscription['id']}").json()
        if now["cursor"] < last or now["deliveries"]["pending"]:
            return False
    return True


def test_the_receiver_verifies_every_signature(server: LiveServer) -> None:
    with receiving() as receiver, server.client() as api:
        subscription = subscribe(api, receiver.url, ["catalog.version.created", "catalog.label.moved"])
        secret = subscription["secret"]
        assert secret.startswith("whsec_")
        assert "secret" not in api.get(f"/api/v1/event-subscriptions/{subscription['id']}").json()
        create_prompt(api, "greeting")
        assert api.put("/api/v1/prompts/greeting/labels/staging", json={"version": 1}).status_code == 200
        wait_until(lambda: len(receiver.all()) >= 2, "two events", timeout=30)

        got = receiver.all()
        assert [item.type for item in got] == ["catalog.version.created", "catalog.label.moved"]
        for item in got:
            assert verify(secret, item), item.headers
            assert abs(int(item.headers["webhook-timestamp"]) - time.time()) < 300
            assert item.headers["content-type"] == "application/json"
            assert item.id.startswith("msg_")
        other = "whsec_" + base64.b64encode(b"x" * 32).decode()
        assert not verify(other, got[0])
        tampered = Received(got[0].headers, got[0].body.replace(b"greeting", b"greetinG"))
        assert not verify(secret, tampered)

        created, moved = (item.json for item in got)
        assert created["data"]["name"] == "greeting" and created["data"]["kind"] == "prompt"
        assert created["data"]["version"] == 1
        assert moved["data"]["labels"] == ["staging"]
        assert datetime.fromisoformat(created["timestamp"]).tzinfo is not None

        log = api.get(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries").json()["items"]
        assert [(d["status"], d["attempts"], d["last_status_code"]) for d in log] == [("delivered", 1, 200)] * 2
        assert {d["webhook_id"] for d in log} == {item.id for item in got}


def test_the_signature_matches_the_specifications_example() -> None:
    # The example of the Standard Webhooks reference libraries' tests.
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_500_then_200_gets_the_event_twice_with_the_same_id(server: LiveServer) -> None:
    with receiving() as receiver, server.client() as api:
        receiver.statuses = [500]
        subscription = subscribe(api, receiver.url, ["catalog.version.created"])
        create_prompt(api, "retried")
        wait_until(lambda: len(receiver.all()) >= 2, "the retry", timeout=30)
        first, second = receiver.all()
        assert first.id == second.id
        assert first.body == second.body
        assert verify(subscription["secret"], first) and verify(subscription["secret"], second)
        wait_until(lambda: settled(server, api, subscription), "the delivery to be recorded", timeout=30)
        (delivery,) = api.get(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries").json()["items"]
        assert delivery["status"] == "delivered" and delivery["attempts"] == 2
        assert delivery["webhook_id"] == first.id
        assert len(receiver.all()) == 2
        # What an operator sees of it (this server is the only one: it holds the lease).
        metrics = api.get("/metrics").text
        assert 'registry_event_deliveries_total{outcome="retry"} 1.0' in metrics, metrics
        assert 'registry_event_deliveries_total{outcome="delivered"} 1.0' in metrics
        assert "registry_event_lease_held 1.0" in metrics


def test_redeliver_sends_the_same_id_again(server: LiveServer) -> None:
    with receiving() as receiver, server.client() as api:
        subscription = subscribe(api, receiver.url, ["catalog.version.created"])
        create_prompt(api, "again")
        wait_until(lambda: settled(server, api, subscription) and receiver.all(), "the delivery", timeout=30)
        (delivery,) = api.get(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries").json()["items"]
        answer = api.post(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries/{delivery['id']}/redeliver")
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "pending"
        wait_until(lambda: len(receiver.all()) >= 2, "the redelivery", timeout=30)
        first, second = receiver.all()
        assert first.id == second.id == delivery["webhook_id"] and first.body == second.body
        missing = api.post(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries/999999/redeliver")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"


def test_events_and_filters_choose_what_is_sent(server: LiveServer) -> None:
    with receiving() as everything, receiving() as archived, receiving() as staging, server.client() as api:
        subs = [
            subscribe(api, everything.url, ALL_EVENTS),
            subscribe(
                api,
                archived.url,
                ["catalog.entry.archived"],
                filters={"kinds": ["prompt"], "name_prefix": "support."},
                slack_text=True,
            ),
            subscribe(
                api, staging.url, ["catalog.label.moved", "catalog.version.created"], filters={"labels": ["staging"]}
            ),
        ]
        create_prompt(api, "support.refund")
        create_prompt(api, "other.note")
        assert api.delete("/api/v1/prompts/support.refund").status_code == 200
        assert api.delete("/api/v1/prompts/other.note").status_code == 200
        assert api.post("/api/v1/prompts/other.note/restore").status_code == 200
        assert api.put("/api/v1/prompts/other.note/labels/staging", json={"version": 1}).status_code == 200
        wait_until(lambda: settled(server, api, *subs), "every subscription to catch up", timeout=30)

        assert [(item.type, item.json["data"]["name"]) for item in everything.all()] == [
            ("catalog.version.created", "support.refund"),
            ("catalog.version.created", "other.note"),
            ("catalog.entry.archived", "support.refund"),
            ("catalog.entry.archived", "other.note"),
            ("catalog.entry.restored", "other.note"),
            ("catalog.label.moved", "other.note"),
        ]
        (only,) = archived.all()
        assert only.type == "catalog.entry.archived" and only.json["data"]["name"] == "support.refund"
        assert "support.refund" in only.json["text"]  # the Slack-compatible text
        (moved,) = staging.all()
        assert moved.type == "catalog.label.moved" and moved.json["data"]["labels"] == ["staging"]
        # Change-log order: ids grow with the events.
        ids = [item.json["data"]["change_id"] for item in everything.all()]
        assert ids == sorted(ids)


def test_the_ssrf_guard_and_the_limits_refuse_at_save(settings: Any) -> None:
    registry, live = start_live_server(settings, limits=replace(settings.limits, event_subscriptions=1))
    try:
        with live.client() as api:
            for url in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest"):
                refused = api.post("/api/v1/event-subscriptions", json={"name": "x", "url": url, "events": ALL_EVENTS})
                assert refused.status_code == 422, (url, refused.text)
                assert refused.headers["content-type"] == "application/problem+json"
                assert "refused" in refused.json()["detail"]
            long_url = "https://example.com/" + "a" * 2100
            refused = api.post("/api/v1/event-subscriptions", json={"name": "x", "url": long_url, "events": ALL_EVENTS})
            assert refused.status_code == 422 and "REGISTRY_LIMIT_URI_CHARS" in refused.json()["detail"]
            refused = api.post(
                "/api/v1/event-subscriptions", json={"name": "x", "url": "https://example.com/", "events": ["nope"]}
            )
            assert refused.status_code == 422
            # The count bound, checked without the URL guard (the service, as the deliverer's tests use it).
        service = EventSubscriptionService(
            registry.db, registry.secrets, replace(settings.limits, event_subscriptions=1)
        )
        one = SubscriptionInput(name="a", url="https://hooks.example.com/a", events=["catalog.label.moved"])
        service.create(one, secret=None, actor="t", access=None)
        with pytest.raises(Exception, match="REGISTRY_LIMIT_EVENT_SUBSCRIPTIONS"):
            service.create(one, secret=None, actor="t", access=None)
        too_many = SubscriptionInput(
            name="b", url="https://hooks.example.com/b", events=["catalog.label.moved"], filters={"labels": ["l"] * 40}
        )
        with pytest.raises(Exception, match="REGISTRY_LIMIT_EVENT_FILTER_VALUES"):
            service.update(1, too_many, actor="t", access=None)
    finally:
        live.stop()
        registry.close()


async def test_the_ssrf_guard_refuses_at_connect_time(registry: Registry) -> None:
    """A receiver saved while its address was allowed, then refused by the connect-time guard."""
    deliverer = EventDeliverer(registry.db, registry.secrets, registry.settings.limits, allowed_networks=())
    await deliverer.start()
    try:
        item = queue.Due(1, 1, "msg_1_1", "http://127.0.0.1:9/hook", ("whsec_" + "A" * 32,), "{}", 0)
        outcome = await deliverer.send(item)
    finally:
        await deliverer.stop()
    assert not outcome.ok and outcome.error is not None and "SSRF" in outcome.error


def test_retries_back_off_then_give_up_and_the_lease_fences(registry: Registry) -> None:
    """The schedule with an injected clock (no waiting), a dead event not holding the next back,
    and a holder whose lease was taken over unable to record."""
    limits = registry.settings.limits
    service = EventSubscriptionService(registry.db, registry.secrets, limits)
    made, _secret = service.create(
        SubscriptionInput(name="s", url="https://hooks.example.com/s", events=["catalog.version.created"]),
        secret=None,
        actor="t",
        access=None,
    )
    with registry.db.session() as session:
        for name in ("one", "two"):
            append_change(session, kind="prompt", name=name, action="created", actor="t", labels=["latest"], version=1)
    assert queue.queue_new(registry.db, limits) == 2
    assert queue.queue_new(registry.db, limits) == 0  # the cursor moved with them

    now = datetime(2030, 1, 1, tzinfo=UTC)
    clock = [now]
    lease = Lease(registry.db, 30, clock=lambda: clock[0])
    held = lease.acquire()
    assert held is not None
    schedule = dict(retry_base_s=5.0, retry_max_s=12.0, max_attempts=4)
    waits = []
    for _attempt in range(4):
        waiting = queue.due(registry.db, registry.secrets, set(), clock[0])
        (item,) = waiting.due
        assert item.webhook_id == f"msg_{made['id']}_{item.webhook_id.rsplit('_', 1)[1]}"
        assert queue.record(registry.db, item, held, queue.Outcome(503, None), clock=lambda: clock[0], **schedule)
        after = queue.due(registry.db, registry.secrets, set(), clock[0])
        if after.next_at is not None and not after.due:
            waits.append((after.next_at - clock[0]).total_seconds())
            clock[0] = after.next_at
    assert waits == [5.0, 10.0, 12.0]
    assert [queue.backoff_s(n, 5.0, 600.0) for n in (1, 2, 3, 8, 20)] == [5.0, 10.0, 20.0, 600.0, 600.0]
    with registry.db.session() as session:
        statuses = [row.status for row in session.query(EventDelivery).order_by(EventDelivery.change_id)]
    assert statuses == ["failed", "pending"]

    # The dead one does not hold the next back; a holder whose lease was taken cannot record.
    (second,) = queue.due(registry.db, registry.secrets, set(), clock[0]).due
    clock[0] += timedelta(seconds=31)
    usurper = Lease(registry.db, 30, clock=lambda: clock[0]).acquire()
    assert usurper is not None and usurper.epoch == held.epoch + 1
    assert lease.acquire() is None
    assert not queue.record(registry.db, second, held, queue.Outcome(200, None), clock=lambda: clock[0], **schedule)
    assert queue.record(registry.db, second, usurper, queue.Outcome(200, None), clock=lambda: clock[0], **schedule)


def _open_request(api: httpx.Client, name: str) -> int:
    """The change request asking production for the newest version (a save may have opened it)."""
    opened = api.post("/api/v1/change-requests", json={"kind": "prompt", "name": name, "label": "production"})
    if opened.status_code == 409 and "change_request_id" in opened.json():
        return int(opened.json()["change_request_id"])
    assert opened.status_code == 201, opened.text
    return int(opened.json()["id"])


def test_change_requests_and_failed_tool_tests_are_events(server: LiveServer) -> None:
    with receiving() as receiver, receiving() as production, receiving() as failing, server.client() as api:
        failing.statuses = [500] * 10  # a tool webhook that fails
        everything = subscribe(api, receiver.url, ALL_EVENTS)
        governed = subscribe(
            api,
            production.url,
            ["change_request.opened", "change_request.approved", "change_request.published"],
            filters={"labels": ["production"], "kinds": ["prompt"]},
        )
        create_prompt(api, "reviewed")
        assert api.put("/api/v1/protected-labels/production", json={}).status_code == 200
        made = api.post("/api/v1/tokens", json={"name": "events-reviewer", "scopes": ["reviewer"]})
        reviewer = {"Authorization": f"Bearer {made.json()['token']}"}

        body = {"template": "Hi {{ who }}", "arguments": [{"name": "who"}]}
        assert api.put("/api/v1/prompts/reviewed", json=body).status_code == 200
        first = _open_request(api, "reviewed")
        approved = api.post(f"/api/v1/change-requests/{first}/approve", json={"comment": "ok"}, headers=reviewer)
        assert approved.status_code == 200, approved.text
        assert api.post(f"/api/v1/change-requests/{first}/publish").status_code == 200
        assert api.put("/api/v1/prompts/reviewed", json={**body, "template": "Yo {{ who }}"}).status_code == 200
        second = _open_request(api, "reviewed")
        rejected = api.post(f"/api/v1/change-requests/{second}/reject", json={"comment": "no"}, headers=reviewer)
        assert rejected.status_code == 200, rejected.text

        tool = {
            "name": "flaky",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "webhook": {"url": failing.url},
        }
        assert api.post("/api/v1/tools", json=tool).status_code == 201
        tested = api.post("/api/v1/tools/flaky/test", json={"arguments": {"text": "x"}, "version": 1})
        assert tested.status_code == 200 and tested.json()["result"]["isError"], tested.text
        wait_until(lambda: settled(server, api, everything, governed), "every subscription to catch up", timeout=30)

        kinds = [item.type for item in receiver.all()]
        requests = [t for t in kinds if t.startswith("change_request.")]
        assert requests == [
            "change_request.opened",
            "change_request.approved",
            "change_request.published",
            "change_request.opened",
            "change_request.rejected",
        ]
        (failed,) = receiver.of_type("tool.test.failed")
        assert failed.json["data"]["name"] == "flaky"
        assert failed.json["data"]["error"] == "webhook answered HTTP 500"  # a category, never the answer's text
        assert kinds.index("change_request.published") < kinds.index("tool.test.failed")
        assert [item.type for item in production.all()] == requests[:4]
        detail = production.all()[0].json["data"]["change_request"]
        assert (detail["id"], detail["label"]) == (first, "production")
        # The new governance rows keep the audit chain whole.
        assert server.registry.audit.verify().intact


def test_finished_deliveries_are_pruned_after_30_days(registry: Registry) -> None:
    limits = registry.settings.limits
    service = EventSubscriptionService(registry.db, registry.secrets, limits)
    service.create(
        SubscriptionInput(name="s", url="https://hooks.example.com/s", events=["catalog.version.created"]),
        secret=None,
        actor="t",
        access=None,
    )
    with registry.db.session() as session:
        for name in ("old", "pending"):
            append_change(session, kind="prompt", name=name, action="created", actor="t", labels=["latest"], version=1)
    queue.queue_new(registry.db, limits)
    with registry.db.session() as session:
        old = session.query(EventDelivery).order_by(EventDelivery.change_id).first()
        assert old is not None
        old.status = "delivered"
    later = datetime.now(UTC) + timedelta(days=queue.KEEP_DAYS + 1)
    assert queue.prune(registry.db, later) == 1
    with registry.db.session() as session:
        assert [row.status for row in session.query(EventDelivery)] == ["pending"]


def test_a_rotated_secret_signs_beside_the_new_one_for_a_day(server: LiveServer) -> None:
    with receiving() as receiver, server.client() as api:
        subscription = subscribe(api, receiver.url, ["catalog.version.created"])
        old = subscription["secret"]
        rotated = api.post(f"/api/v1/event-subscriptions/{subscription['id']}/rotate-secret", json={})
        assert rotated.status_code == 200, rotated.text
        new = rotated.json()["secret"]
        assert new != old and new.startswith("whsec_")
        create_prompt(api, "rotated")
        wait_until(lambda: receiver.all(), "the event", timeout=30)
        (item,) = receiver.all()
        assert len(item.headers["webhook-signature"].split(" ")) == 2
        assert verify(new, item) and verify(old, item)
        supplied = "whsec_" + base64.b64encode(b"s" * 32).decode()
        again = api.post(f"/api/v1/event-subscriptions/{subscription['id']}/rotate-secret", json={"secret": supplied})
        assert again.json()["secret"] == supplied
        not_base64 = {"secret": "whsec_" + "A" * 33 + "="}  # schema-valid, but no base64
        bad = api.post(f"/api/v1/event-subscriptions/{subscription['id']}/rotate-secret", json=not_base64)
        assert bad.status_code == 422 and "base64" in bad.json()["detail"], bad.text
