"""``/api/v1/event-subscriptions``: change events to other systems (admin).

Thin like the other routes: ``registry.events.service.EventSubscriptionService`` checks and stores,
and the web UI calls the same service.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from registry.api.auth import AdminPrincipal
from registry.api.deps import EventsDep
from registry.api.problems import ALWAYS, WITH_BODY, documented
from registry.events.service import NAME_CHARS, SubscriptionInput
from registry.events.types import EVENT_TYPES

EventType = Literal[
    "catalog.version.created",
    "catalog.label.moved",
    "catalog.entry.archived",
    "catalog.entry.restored",
    "change_request.opened",
    "change_request.approved",
    "change_request.rejected",
    "change_request.published",
    "tool.test.failed",
]
assert set(EventType.__args__) == set(EVENT_TYPES)  # type: ignore[attr-defined]

SubscriptionId = Annotated[int, Path(ge=1, le=2**53, description="an event subscription's id", examples=[1])]
DeliveryId = Annotated[int, Path(ge=1, le=2**53, description="a delivery's id", examples=[1])]
#: ``whsec_`` and base64 of 24-64 bytes.
Secret = Annotated[
    str,
    Field(
        min_length=38,
        max_length=100,
        pattern=r"^whsec_[A-Za-z0-9+/]+={0,2}$",
        description="a signing secret: whsec_ and the base64 of 24 to 64 random bytes (omit it: one is generated)",
    ),
]
_SECRET_EXAMPLE = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

_FILTERS_EXAMPLE: dict[str, Any] = {
    "kinds": ["prompt"],
    "name_prefix": "support.",
    "teams": ["payments"],
    "labels": ["production"],
}
_SUBSCRIPTION_EXAMPLE: dict[str, Any] = {
    "id": 1,
    "name": "ops channel",
    "url": "https://hooks.example.com/registry",
    "events": ["catalog.label.moved", "change_request.published"],
    "filters": _FILTERS_EXAMPLE,
    "slack_text": False,
    "enabled": True,
    "cursor": 1234,
    "created_by": "admin",
    "created_at": "2026-12-05T09:00:00+00:00",
    "updated_at": "2026-12-05T09:00:00+00:00",
    "deliveries": {"pending": 0, "delivered": 42, "failed": 1},
}


class EventFilters(BaseModel):
    """Which events of the chosen types are sent: every filter given must match (empty: any)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_FILTERS_EXAMPLE]})

    kinds: list[Literal["prompt", "resource", "tool"]] = Field(default_factory=list, max_length=3)
    name_prefix: str = Field(default="", max_length=NAME_CHARS, description="entry names starting with this")
    teams: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=1000, description="the entry's team (`-`: global entries)"
    )
    labels: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=1000, description="events naming one of these labels"
    )


class SubscriptionRequest(BaseModel):
    """A new event subscription."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "ops channel",
                    "url": "https://hooks.example.com/registry",
                    "events": ["catalog.label.moved", "change_request.published"],
                    "filters": {"labels": ["production"]},
                }
            ]
        },
    )

    name: str = Field(min_length=1, max_length=NAME_CHARS, description="what admins call it")
    url: str = Field(
        min_length=8, max_length=4096, pattern=r"^https?://", description="where events are POSTed (http or https)"
    )
    events: list[EventType] = Field(min_length=1, max_length=len(EVENT_TYPES))
    filters: EventFilters = Field(default_factory=EventFilters)
    slack_text: bool = Field(
        default=False, strict=True, description="add a Slack-compatible `text` member to each body"
    )
    enabled: bool = Field(default=True, strict=True, description="false: nothing is queued or sent meanwhile")
    secret: Secret | None = None


class SubscriptionUpdate(BaseModel):
    """What changes; members left out are kept."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"enabled": False}]})

    name: str | None = Field(default=None, min_length=1, max_length=NAME_CHARS)
    url: str | None = Field(default=None, min_length=8, max_length=4096, pattern=r"^https?://")
    events: list[EventType] | None = Field(default=None, min_length=1, max_length=len(EVENT_TYPES))
    filters: EventFilters | None = None
    slack_text: bool | None = Field(default=None, strict=True)
    enabled: bool | None = Field(default=None, strict=True)


class DeliveryCounts(BaseModel):
    pending: int = Field(ge=0)
    delivered: int = Field(ge=0)
    failed: int = Field(ge=0)


class SubscriptionInfo(BaseModel):
    """An event subscription (its secret is never shown again)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_SUBSCRIPTION_EXAMPLE]})

    id: int
    name: str
    url: str
    events: list[str]
    filters: EventFilters
    slack_text: bool
    enabled: bool
    cursor: int = Field(description="the last change-log id examined for it")
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    deliveries: DeliveryCounts


class SubscriptionCreated(SubscriptionInfo):
    """The new subscription and its signing secret, shown this once."""

    model_config = ConfigDict(json_schema_extra={"examples": [{**_SUBSCRIPTION_EXAMPLE, "secret": _SECRET_EXAMPLE}]})

    secret: str


class SubscriptionList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_SUBSCRIPTION_EXAMPLE]}]})

    items: list[SubscriptionInfo]


class SecretRequest(BaseModel):
    """A new signing secret: given, or (omitted) generated."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{}, {"secret": _SECRET_EXAMPLE}]})

    secret: Secret | None = None


class SecretAnswer(BaseModel):
    """The subscription's new signing secret, shown this once."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"secret": _SECRET_EXAMPLE}]})

    secret: str


_DELIVERY_EXAMPLE: dict[str, Any] = {
    "id": 7,
    "subscription_id": 1,
    "change_id": 1240,
    "webhook_id": "msg_1_1240",
    "event_type": "catalog.label.moved",
    "status": "pending",
    "attempts": 1,
    "next_attempt_at": "2026-12-05T09:00:05+00:00",
    "last_status_code": 500,
    "last_error": "HTTP 500",
    "created_at": "2026-12-05T09:00:00+00:00",
    "last_attempt_at": "2026-12-05T09:00:00+00:00",
    "delivered_at": None,
}


class DeliveryInfo(BaseModel):
    """One event for one subscription, and how its delivery went."""

    model_config = ConfigDict(json_schema_extra={"examples": [_DELIVERY_EXAMPLE]})

    id: int
    subscription_id: int
    change_id: int
    webhook_id: str
    event_type: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    last_attempt_at: datetime | None
    delivered_at: datetime | None


class DeliveryList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_DELIVERY_EXAMPLE]}]})

    items: list[DeliveryInfo]


class EventTypeInfo(BaseModel):
    type: str
    description: str


class EventTypeList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [{"type": "catalog.label.moved", "description": "a label moved"}]}]}
    )

    items: list[EventTypeInfo]


router = APIRouter(tags=["event subscriptions"])
PREFIX = "/event-subscriptions"


def _input(body: SubscriptionRequest | SubscriptionUpdate) -> SubscriptionInput:
    return SubscriptionInput(
        name=body.name,
        url=body.url,
        events=body.events,
        filters=body.filters.model_dump() if body.filters is not None else None,
        slack_text=body.slack_text,
        enabled=body.enabled,
    )


@router.get(
    "/event-types",
    summary="The event types a subscription may choose (admin)",
    operation_id="listEventTypes",
    response_model=EventTypeList,
    responses=documented(*ALWAYS),
)
def list_event_types(_principal: AdminPrincipal) -> dict[str, Any]:
    return {"items": [{"type": name, "description": text} for name, text in EVENT_TYPES.items()]}


@router.get(
    PREFIX,
    summary="List event subscriptions (admin)",
    operation_id="listEventSubscriptions",
    response_model=SubscriptionList,
    responses=documented(*ALWAYS),
)
def list_subscriptions(events: EventsDep, principal: AdminPrincipal) -> dict[str, Any]:
    return {"items": events.list_subscriptions(principal)}


@router.post(
    PREFIX,
    status_code=201,
    summary="Subscribe a URL to change events (admin); the signing secret is shown once",
    operation_id="createEventSubscription",
    response_model=SubscriptionCreated,
    responses=documented(*ALWAYS, *WITH_BODY, 409),
)
def create_subscription(
    events: EventsDep, body: SubscriptionRequest, principal: AdminPrincipal, response: Response
) -> dict[str, Any]:
    view, secret = events.create(_input(body), secret=body.secret, actor=principal.actor(), access=principal)
    response.headers["Location"] = f"/api/v1/event-subscriptions/{view['id']}"
    return {**view, "secret": secret}


@router.get(
    PREFIX + "/{subscription_id}",
    summary="Get an event subscription (admin)",
    operation_id="getEventSubscription",
    response_model=SubscriptionInfo,
    responses=documented(*ALWAYS, 404, 422),
)
def get_subscription(events: EventsDep, subscription_id: SubscriptionId, principal: AdminPrincipal) -> dict[str, Any]:
    return events.get(subscription_id, principal)


@router.patch(
    PREFIX + "/{subscription_id}",
    summary="Change an event subscription (admin)",
    operation_id="updateEventSubscription",
    response_model=SubscriptionInfo,
    responses=documented(*ALWAYS, *WITH_BODY, 404),
)
def update_subscription(
    events: EventsDep, subscription_id: SubscriptionId, body: SubscriptionUpdate, principal: AdminPrincipal
) -> dict[str, Any]:
    return events.update(subscription_id, _input(body), actor=principal.actor(), access=principal)


@router.delete(
    PREFIX + "/{subscription_id}",
    summary="Delete an event subscription and its delivery log (admin)",
    operation_id="deleteEventSubscription",
    response_model=SubscriptionInfo,
    responses=documented(*ALWAYS, 404, 422),
)
def delete_subscription(
    events: EventsDep, subscription_id: SubscriptionId, principal: AdminPrincipal
) -> dict[str, Any]:
    return events.delete(subscription_id, actor=principal.actor(), access=principal)


@router.post(
    PREFIX + "/{subscription_id}/rotate-secret",
    summary="Replace a subscription's signing secret (admin); the new one is shown once",
    operation_id="rotateEventSubscriptionSecret",
    response_model=SecretAnswer,
    responses=documented(*ALWAYS, *WITH_BODY, 404),
)
def rotate_secret(
    events: EventsDep, subscription_id: SubscriptionId, body: SecretRequest, principal: AdminPrincipal
) -> dict[str, Any]:
    secret = events.rotate_secret(subscription_id, secret=body.secret, actor=principal.actor(), access=principal)
    return {"secret": secret}


@router.get(
    PREFIX + "/{subscription_id}/deliveries",
    summary="A subscription's delivery log, newest first (admin)",
    operation_id="listEventDeliveries",
    response_model=DeliveryList,
    responses=documented(*ALWAYS, 404, 422),
)
def list_deliveries(
    events: EventsDep,
    subscription_id: SubscriptionId,
    principal: AdminPrincipal,
    status: Annotated[Literal["pending", "delivered", "failed"] | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=1, le=2**53, description="a delivery id: the page before it")] = None,
) -> dict[str, Any]:
    items = events.deliveries(subscription_id, principal, status=status, limit=limit, before=before)
    return {"items": items}


@router.post(
    PREFIX + "/{subscription_id}/deliveries/{delivery_id}/redeliver",
    summary="Send a delivery again, with the same webhook-id and body (admin)",
    operation_id="redeliverEvent",
    response_model=DeliveryInfo,
    responses=documented(*ALWAYS, 404, 422),
)
def redeliver(
    events: EventsDep, subscription_id: SubscriptionId, delivery_id: DeliveryId, principal: AdminPrincipal
) -> dict[str, Any]:
    return events.redeliver(subscription_id, delivery_id, actor=principal.actor(), access=principal)
