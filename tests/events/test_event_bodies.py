"""What a subscriber is sent: Slack ``text`` whose every value is inert mrkdwn on one line, and a
body cut to ``REGISTRY_LIMIT_EVENT_PAYLOAD_BYTES`` by encoded bytes (a multi-byte note, and ``text``
sized on its own rather than counting the note twice)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from registry.db.changelog import append_change
from registry.db.models import EventDelivery
from registry.events import queue
from registry.events.service import EventSubscriptionService, SubscriptionInput
from registry.events.types import Event, body, slack_text
from registry.runtime import Registry


def _service(registry: Registry, **limits: Any) -> EventSubscriptionService:
    return EventSubscriptionService(registry.db, registry.secrets, replace(registry.settings.limits, **limits))


def _event(note: str) -> Event:
    data = {"kind": "prompt", "name": "p", "version": 3, "labels": [], "team": None, "actor": "eve", "note": note}
    return Event(7, "catalog.version.created", datetime.now(UTC).isoformat(), "prompt", "p", None, (), data)


def test_slack_text_escapes_every_value_and_keeps_to_one_line() -> None:
    event = _event("<!channel> ping & <https://evil.example|click here>\n*fake second line*")
    event = replace(event, name="a<b>", data={**event.data, "actor": "<@U123>"})
    text = slack_text(event)
    assert "\n" not in text
    assert "&lt;!channel&gt; ping &amp; &lt;https://evil.example|click here&gt; *fake second line*" in text
    assert "a&lt;b&gt;" in text and "&lt;@U123&gt;" in text
    assert "<" not in text and ">" not in text


@pytest.mark.parametrize("with_text", [False, True])
def test_the_body_is_cut_by_encoded_bytes(with_text: bool) -> None:
    note = "ж" * 2000  # two bytes a character
    bound = 1500
    sent = body(_event(note), with_text=with_text, max_bytes=bound)
    size = len(sent.encode())
    assert bound - 8 <= size <= bound, size  # cut to fit, not far below
    document = json.loads(sent)
    assert document["data"]["truncated"] is True and document["data"]["note"].endswith("…")
    if with_text:
        assert document["text"].endswith("…") and len(document["text"].encode()) < 500


def test_the_payload_limit_holds_for_queued_bodies(registry: Registry) -> None:
    service = _service(registry, event_payload_bytes=1024)
    made, _ = service.create(
        SubscriptionInput(
            name="s", url="https://hooks.example.com/s", events=["catalog.version.created"], slack_text=True
        ),
        secret=None,
        actor="t",
        access=None,
    )
    with registry.db.session() as session:
        append_change(
            session, kind="prompt", name="p", action="created", actor="t", labels=["latest"], version=1, note="€" * 900
        )
    assert queue.queue_new(registry.db, service.limits) == 1
    with registry.db.session() as session:
        (delivery,) = session.query(EventDelivery).filter(EventDelivery.subscription_id == made["id"])
        assert 1024 - 8 <= len(delivery.body.encode()) <= 1024
        assert json.loads(delivery.body)["data"]["truncated"] is True
