"""``/ui/events`` (admin): event subscriptions (list, create, edit, delete, rotate the secret) and
each one's delivery log with "Redeliver".

Like the REST routes, these only pick the page: ``registry.events.service`` checks, stores and
audits. A signing secret is shown once, on the page that answers its creation or rotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import Response

from registry.api.deps import EventsDep
from registry.catalog.errors import CatalogError
from registry.db.changelog import CATALOG_KINDS
from registry.events.service import SubscriptionInput
from registry.events.types import EVENT_TYPES
from registry.ui.auth import Admin, AdminForm, form_field
from registry.ui.views import View

SubscriptionId = Annotated[int, Path(ge=1, le=2**53)]
DeliveryId = Annotated[int, Path(ge=1, le=2**53)]
#: Deliveries shown on a subscription's page (newest first).
SHOWN_DELIVERIES = 100


def _values(fields: FormData) -> dict[str, Any]:
    """The form as the template shows it again (after a refusal) and the service takes it."""

    def listed(name: str) -> list[str]:
        return [value for value in fields.getlist(name) if isinstance(value, str)]

    def words(name: str) -> list[str]:
        return [word for word in form_field(fields, name).replace(",", " ").split() if word]

    return {
        "name": form_field(fields, "name").strip(),
        "url": form_field(fields, "url").strip(),
        "events": listed("events"),
        "kinds": listed("kinds"),
        "name_prefix": form_field(fields, "name_prefix").strip(),
        "teams": words("teams"),
        "labels": words("labels"),
        "slack_text": bool(form_field(fields, "slack_text")),
        "enabled": bool(form_field(fields, "enabled")),
    }


def _input(values: dict[str, Any]) -> SubscriptionInput:
    return SubscriptionInput(
        name=values["name"],
        url=values["url"],
        events=values["events"],
        filters={
            "kinds": values["kinds"],
            "name_prefix": values["name_prefix"],
            "teams": values["teams"],
            "labels": values["labels"],
        },
        slack_text=values["slack_text"],
        enabled=values["enabled"],
    )


def _shown(subscription: dict[str, Any]) -> dict[str, Any]:
    filters = subscription["filters"]
    return {
        "name": subscription["name"],
        "url": subscription["url"],
        "events": subscription["events"],
        "kinds": filters["kinds"],
        "name_prefix": filters["name_prefix"],
        "teams": filters["teams"],
        "labels": filters["labels"],
        "slack_text": subscription["slack_text"],
        "enabled": subscription["enabled"],
    }


_BLANK = {
    "name": "",
    "url": "",
    "events": [],
    "kinds": [],
    "name_prefix": "",
    "teams": [],
    "labels": [],
    "slack_text": False,
    "enabled": True,
}


@dataclass
class EventPages(View):
    events: EventsDep

    def _common(self) -> dict[str, Any]:
        return {"nav": "events", "event_types": EVENT_TYPES, "kinds": CATALOG_KINDS}

    def list_page(
        self, *, values: dict[str, Any] | None = None, error: str | None = None, status: int = 200, ui: Any
    ) -> Response:
        context = {
            **self._common(),
            "title": "Events",
            "subscriptions": self.events.list_subscriptions(ui.principal),
            "values": values or _BLANK,
            "error": error,
        }
        return self.render("events.html", context, status=status)

    def subscription_page(
        self,
        subscription_id: int,
        *,
        ui: Any,
        values: dict[str, Any] | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> Response:
        subscription = self.events.get(subscription_id, ui.principal)
        deliveries = self.events.deliveries(subscription_id, ui.principal, limit=SHOWN_DELIVERIES)
        context = {
            **self._common(),
            "title": f"Events: {subscription['name']}",
            "subscription": subscription,
            "deliveries": deliveries,
            "values": values or _shown(subscription),
            "error": error,
        }
        return self.render("event_subscription.html", context, status=status)

    def secret_page(self, subscription: dict[str, Any], secret: str, *, created: bool) -> Response:
        context = {
            **self._common(),
            "title": "Signing secret",
            "subscription": subscription,
            "secret": secret,
            "created": created,
        }
        return self.render("event_secret.html", context, status=201 if created else 200)


EventPagesDep = Annotated[EventPages, Depends()]
router = APIRouter(prefix="/events")


@router.get("")
def list_subscriptions(ui: Admin, pages: EventPagesDep) -> Response:
    return pages.list_page(ui=ui)


@router.post("")
async def create_subscription(form: AdminForm, pages: EventPagesDep) -> Response:
    ui, fields = form
    values = _values(fields)
    values["enabled"] = True
    try:
        view, secret = await run_in_threadpool(
            pages.events.create, _input(values), secret=None, actor=ui.principal.actor(), access=ui.principal
        )
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        return await run_in_threadpool(lambda: pages.list_page(values=values, error=detail, status=status, ui=ui))
    return pages.secret_page(view, secret, created=True)


@router.get("/{subscription_id}")
def subscription(ui: Admin, pages: EventPagesDep, subscription_id: SubscriptionId) -> Response:
    return pages.subscription_page(subscription_id, ui=ui)


@router.post("/{subscription_id}")
async def update_subscription(form: AdminForm, pages: EventPagesDep, subscription_id: SubscriptionId) -> Response:
    ui, fields = form
    values = _values(fields)
    try:
        await run_in_threadpool(
            pages.events.update, subscription_id, _input(values), actor=ui.principal.actor(), access=ui.principal
        )
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        return await run_in_threadpool(
            lambda: pages.subscription_page(subscription_id, ui=ui, values=values, error=detail, status=status)
        )
    return pages.redirect(f"/ui/events/{subscription_id}", "The subscription is saved.")


@router.post("/{subscription_id}/rotate")
async def rotate_secret(form: AdminForm, pages: EventPagesDep, subscription_id: SubscriptionId) -> Response:
    ui, _fields = form
    secret = await run_in_threadpool(
        pages.events.rotate_secret, subscription_id, secret=None, actor=ui.principal.actor(), access=ui.principal
    )
    view = await run_in_threadpool(pages.events.get, subscription_id, ui.principal)
    return pages.secret_page(view, secret, created=False)


@router.post("/{subscription_id}/delete")
async def delete_subscription(form: AdminForm, pages: EventPagesDep, subscription_id: SubscriptionId) -> Response:
    ui, _fields = form
    view = await run_in_threadpool(
        pages.events.delete, subscription_id, actor=ui.principal.actor(), access=ui.principal
    )
    return pages.redirect("/ui/events", f"Subscription {view['name']} is deleted.")


@router.post("/{subscription_id}/deliveries/{delivery_id}/redeliver")
async def redeliver(
    form: AdminForm, pages: EventPagesDep, subscription_id: SubscriptionId, delivery_id: DeliveryId
) -> Response:
    ui, _fields = form
    delivery = await run_in_threadpool(
        pages.events.redeliver, subscription_id, delivery_id, actor=ui.principal.actor(), access=ui.principal
    )
    return pages.redirect(
        f"/ui/events/{subscription_id}", f"Event {delivery['webhook_id']} is queued again (same webhook-id)."
    )
