"""Event subscriptions in the web UI, in a real browser: an admin subscribes a loopback receiver
through the form (the secret shown once), sees the delivery in the log, and redelivers it (the
receiver gets it again under the same webhook-id). Every page is checked for errors and
accessibility (``UiPage``)."""

from __future__ import annotations

import os
import secrets

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.events.receiver import receiving, verify
from tests.factories import prompt_body
from tests.ui.conftest import UiPage, UiServer
from tests.waiting import wait_until


def test_an_admin_subscribes_and_redelivers(ui: UiPage, ui_server: UiServer) -> None:
    suffix = secrets.token_hex(3)
    with receiving() as receiver:
        ui.sign_in(ui.server.admin_token)
        ui.goto("/ui/events")
        ui.page.get_by_label("Name", exact=True).fill(f"hook-{suffix}")
        ui.page.get_by_label("URL", exact=True).fill(receiver.url)
        ui.page.get_by_label("catalog.version.created", exact=True).check()
        ui.page.get_by_label("Name starts with", exact=True).fill(f"evt-{suffix}")
        ui.page.get_by_role("button", name="Create subscription").click()
        ui.check()
        secret = ui.page.get_by_label("Signing secret").input_value()
        assert secret.startswith("whsec_")
        ui.shot("event-secret")

        with ui_server.admin() as admin:
            made = admin.post("/api/v1/prompts", json=prompt_body(f"evt-{suffix}"))
            assert made.status_code == 201, made.text
        wait_until(lambda: len(receiver.all()) == 1, "the event", timeout=30)
        assert verify(secret, receiver.all()[0])

        # The delivery is recorded just after the receiver answered: wait for that, then look.
        with ui_server.admin() as admin:
            [subscription] = [
                s for s in admin.get("/api/v1/event-subscriptions").json()["items"] if s["name"] == f"hook-{suffix}"
            ]
            deliveries = f"/api/v1/event-subscriptions/{subscription['id']}/deliveries"
            wait_until(
                lambda: [d["status"] for d in admin.get(deliveries).json()["items"]] == ["delivered"],
                "the delivery recorded as delivered",
                timeout=30,
            )
        ui.page.get_by_role("link", name="To the subscription and its deliveries").click()
        log = ui.page.get_by_role("table", name="The newest deliveries of this subscription")
        expect(log).to_contain_text("delivered")
        ui.check()
        ui.shot("event-deliveries")
        first_id = receiver.all()[0].id
        ui.page.get_by_role("button", name=f"Redeliver {first_id}").click()
        ui.check()
        expect(ui.page.get_by_role("status").first).to_contain_text("queued again")
        wait_until(lambda: len(receiver.all()) == 2, "the redelivery", timeout=30)
        assert receiver.all()[1].id == first_id
