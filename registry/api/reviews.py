"""``/api/v1/change-requests``, ``/api/v1/protected-labels`` and each entry's ``/checks``.

Protected labels (``production``, typically) are not moved by saves; a change request moves one
once reviewers other than its author approved it (``registry/catalog/reviews.py``). Routes stay
thin: the change request service authorises (roles on the entry's team, never the author as a
reviewer), checks and writes; these map HTTP onto it and declare the contract.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from registry.api import models
from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.deps import ProtectionDep, ReviewsDep
from registry.api.kinds import EntryName, KindDep, kind_router
from registry.api.problems import ALWAYS, WITH_BODY, documented
from registry.catalog.protection import MAX_APPROVALS
from registry.catalog.reviews import MAX_PAGE
from registry.catalog.specs import KIND_BY_COLLECTION, LABEL_PATTERN, NAME_PATTERN

Kind = Literal["prompt", "resource", "tool"]
#: A title: one line, no control characters.
ONE_LINE = "^[^\\x00-\\x1f\\x7f]*$"
State = Literal["draft", "in_review", "approved", "rejected", "published", "withdrawn"]
#: A reason or comment: what the change log records (``REGISTRY_LIMIT_CHANGE_NOTE_CHARS`` by default).
REASON_CHARS = 2000

_CHECKS_EXAMPLE: dict[str, Any] = {
    "items": [
        {"check": "samples", "status": "pass", "title": "2 sample sets render", "detail": ""},
        {
            "check": "breaking_changes",
            "status": "fail",
            "title": "1 breaking change against production",
            "detail": "required argument 'tone' was added: agents that do not send it are refused",
        },
    ],
    "failed": True,
}
_SUMMARY_EXAMPLE: dict[str, Any] = {
    "id": 7,
    "kind": "prompt",
    "name": "summarize",
    "team": None,
    "label": "production",
    "from_version": 1,
    "to_version": 2,
    "state": "in_review",
    "title": "Shorter summaries",
    "description": "Agents asked for bullet points.",
    "author": "alice",
    "approvals_required": 1,
    "approvals": 0,
    "rejections": 0,
    "checks_failed": None,
    "created_at": "2025-06-02T10:30:00+00:00",
    "updated_at": "2025-06-02T10:30:00+00:00",
    "published_at": None,
    "published_by": None,
    "publish_when_approved": False,
}
_DETAIL_EXAMPLE: dict[str, Any] = {
    **_SUMMARY_EXAMPLE,
    "current_version": 1,
    "proposed": {
        "version": 2,
        "author": "alice",
        "change_note": "bullet points",
        "created_at": "2025-06-02T10:29:00+00:00",
    },
    "your_verdict": None,
    "auto_publish_refused": None,
    "stale": False,
    "reviews": [],
    "diff": {
        "kind": "prompt",
        "name": "summarize",
        "from": 1,
        "to": 2,
        "changed": ["messages"],
        "fields": {"messages": "--- v1/messages\n+++ v2/messages\n@@ -1 +1 @@\n-Summarize\n+Summarize briefly\n"},
        "diff": "--- summarize@v1\n+++ summarize@v2\n",
    },
    "checks": _CHECKS_EXAMPLE,
    "checks_overridden": False,
    "checks_override_reason": None,
    "publishable": False,
    "authored_by_you": True,
}


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})


class CheckItem(BaseModel):
    """One pre-publish finding."""

    check: str = Field(description="samples, breaking_changes or embedding_prompts")
    status: Literal["pass", "warn", "fail"]
    title: str
    detail: str


class CheckReport(BaseModel):
    """Pre-publish checks (``failed``: some item fails, which blocks publication without a reviewer's override)."""

    model_config = _examples(_CHECKS_EXAMPLE)

    items: list[CheckItem]
    failed: bool


class Review(BaseModel):
    id: int
    verdict: Literal["approve", "reject", "comment"]
    reviewer: str
    comment: str | None
    override_checks: bool = Field(description="approved although the checks fail (the comment is the reason)")
    created_at: datetime


class ChangeRequestSummary(BaseModel):
    """A request to move a protected label of one entry to a version."""

    model_config = _examples(_SUMMARY_EXAMPLE)

    id: int = Field(ge=1)
    kind: Kind
    name: str
    team: str | None = Field(description="the entry's team when it was opened (null: global)")
    label: str
    from_version: int | None = Field(description="the label's version when it was opened (null: it was not set)")
    to_version: int
    state: State
    title: str
    description: str | None
    author: str
    approvals_required: int
    approvals: int = Field(description="approvals that count: distinct reviewers, never the author")
    rejections: int = Field(description="rejections that stand (a reviewer's latest verdict)")
    checks_failed: bool | None = Field(description="the last stored check result (null: not checked yet)")
    created_at: datetime
    updated_at: datetime
    published_at: datetime | None
    published_by: str | None
    publish_when_approved: bool = Field(
        description="chosen by the author: the approval that brings the approvals needed publishes it in the same "
        "transaction (when the pre-publish checks pass or are overridden and the label has not moved)"
    )


class ProposedVersion(BaseModel):
    """The version a request proposes, as its author saved it."""

    version: int
    author: str | None
    change_note: str | None = Field(description="the author's change note of that version")
    created_at: datetime | None


class ChangeRequest(ChangeRequestSummary):
    """A change request with its reviews, the diff it asks for and fresh pre-publish checks."""

    model_config = _examples(_DETAIL_EXAMPLE)

    current_version: int | None = Field(description="the version the label points at now")
    proposed: ProposedVersion
    your_verdict: Literal["approve", "reject"] | None = Field(
        description="your own standing verdict on it (null: none yet)"
    )
    auto_publish_refused: str | None = Field(
        description="publish_when_approved was chosen and the request is approved but not published: why (checks "
        "fail without an override, or the label moved since)"
    )
    stale: bool = Field(description="the label moved since the request was opened: it can no longer be published")
    reviews: list[Review]
    diff: models.Diff | None = Field(description="from_version -> to_version (null when the label was not set)")
    checks: CheckReport
    checks_overridden: bool
    checks_override_reason: str | None
    publishable: bool = Field(description="approved, checks pass (or overridden), not stale")
    authored_by_you: bool
    notice: str | None = Field(
        default=None,
        description="set when the call changed nothing because it was already done (you already approved, "
        "the request was already published): a retry or a second click is answered as a success",
    )


class ChangeRequestPage(BaseModel):
    """Change requests the token may see, newest first."""

    model_config = _examples({"items": [_SUMMARY_EXAMPLE], "total": 1, "limit": 50, "offset": 0})

    items: list[ChangeRequestSummary]
    total: int
    limit: int
    offset: int


class ChangeRequestOpen(BaseModel):
    """Ask to point a protected label of an entry at a version."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "kind": "prompt",
                    "name": "summarize",
                    "label": "release",
                    "title": "Publish the shorter summary",
                    "draft": True,
                },
                {"kind": "prompt", "name": "summarize", "publish_when_approved": True},
                {"kind": "resource", "name": "server-info", "label": "release"},
            ]
        },
    )

    kind: Kind
    name: Annotated[str, Field(pattern=NAME_PATTERN, min_length=1, max_length=128)]
    label: models.SettableLabel = Field(default="production", description="a protected label")
    to_version: models.VersionNumber | None = Field(default=None, description="default: the newest version")
    title: str | None = Field(
        default=None, max_length=256, pattern=ONE_LINE, description="one line; default: what moves where"
    )
    description: str | None = Field(default=None, max_length=8192, description="why, for the reviewers")
    draft: StrictBool = Field(default=False, description="open it as a draft (submit it for review later)")
    publish_when_approved: StrictBool = Field(
        default=False,
        description="publish it as soon as the approvals it needs are in, in the approving review's transaction "
        "(audited as an automatic publication on that reviewer's approval); refused by a pre-publish check or a "
        "moved label, it stays approved and says why (auto_publish_refused)",
    )


class Approval(BaseModel):
    """An approval; ``override_checks`` lets it be published although its checks fail (``comment`` is the reason)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"comment": "Looks good"},
                {"comment": "tone is optional in practice", "override_checks": True},
            ]
        },
    )

    comment: str | None = Field(default=None, max_length=REASON_CHARS)
    override_checks: StrictBool = False  # JSON true/false only: 0 or "no" is refused, as the schema says


class Rejection(BaseModel):
    """A rejection, saying why (it stands until the same reviewer approves)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"comment": "Breaks the CI agent"}]})

    comment: str = Field(min_length=1, max_length=REASON_CHARS)


class Publication(BaseModel):
    """Publish an approved request; an admin's ``override_reason`` publishes any open one at once."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{}, {"override_reason": "incident 42: roll out the fix now"}]}
    )

    override_reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=REASON_CHARS,
        description="admins only: skip approvals and checks (an emergency override, recorded with this reason)",
    )


class ProtectedLabel(BaseModel):
    model_config = _examples(
        {
            "name": "production",
            "approvals": 1,
            "source": "environment",
            "created_by": None,
            "created_at": None,
        }
    )

    name: str
    approvals: int = Field(description="approvals a change request to it needs")
    source: Literal["environment", "api"] = Field(
        description="environment: written into the catalog from REGISTRY_PROTECTED_LABELS at start-up (the "
        "variable only adds; a label it still names cannot be unprotected here); api: set through the API or UI"
    )
    created_by: str | None
    created_at: datetime | None


class ProtectedLabelList(BaseModel):
    model_config = _examples(
        {
            "items": [
                {"name": "production", "approvals": 1, "source": "environment", "created_by": None, "created_at": None}
            ]
        }
    )

    items: list[ProtectedLabel]


class Protection(BaseModel):
    """Protect a label (or change how many approvals moving it needs)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"approvals": 2}, {}]})

    approvals: int | None = Field(
        default=None, ge=1, le=MAX_APPROVALS, description="default: REGISTRY_REQUIRED_APPROVALS"
    )


#: A publication without a body: no override.
_NO_OVERRIDE = Publication()

RequestId = Annotated[int, Path(ge=1, le=models.INT64_MAX, description="a change request's id", examples=[1])]
ProtectedLabelPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="a label name (not `latest`)",
        json_schema_extra={"pattern": LABEL_PATTERN, "not": {"const": "latest"}},
        examples=["release"],
    ),
]


router = APIRouter()


# ------------------------------------------------------------------ protected labels


@router.get(
    "/protected-labels",
    tags=["reviews"],
    summary="List protected labels (no save moves them; a change request does)",
    operation_id="listProtectedLabels",
    response_model=ProtectedLabelList,
    responses=documented(*ALWAYS),
)
def list_protected(protection: ProtectionDep, _p: ViewerPrincipal) -> dict[str, Any]:
    return {"items": protection.list_labels()}


@router.put(
    "/protected-labels/{label}",
    tags=["reviews"],
    summary="Protect a label, or change the approvals it needs (admin)",
    operation_id="protectLabel",
    response_model=ProtectedLabel,
    responses=documented(*ALWAYS, *WITH_BODY),
)
def protect(
    protection: ProtectionDep, label: ProtectedLabelPath, body: Protection, principal: AdminPrincipal
) -> dict[str, Any]:
    return protection.protect(label, body.approvals, actor=principal.actor(), access=principal)


@router.delete(
    "/protected-labels/{label}",
    tags=["reviews"],
    status_code=204,
    summary="Unprotect a label (admin; audit-logged; not one this server's REGISTRY_PROTECTED_LABELS still names)",
    operation_id="unprotectLabel",
    responses=documented(*ALWAYS, 404, 409, 422),
)
def unprotect(protection: ProtectionDep, label: ProtectedLabelPath, principal: AdminPrincipal) -> Response:
    protection.unprotect(label, actor=principal.actor(), access=principal)
    return Response(status_code=204)


# ------------------------------------------------------------------ change requests


@router.get(
    "/change-requests",
    tags=["reviews"],
    summary="List change requests you may see, newest first",
    operation_id="listChangeRequests",
    response_model=ChangeRequestPage,
    responses=documented(*ALWAYS, 422),
)
def list_requests(
    reviews: ReviewsDep,
    principal: ViewerPrincipal,
    state: Annotated[
        str | None,
        Query(max_length=16, pattern="^(draft|in_review|approved|rejected|published|withdrawn)$"),
    ] = None,
    kind: Annotated[str | None, Query(max_length=16, pattern="^(prompt|resource|tool)$")] = None,
    name: Annotated[str | None, Query(max_length=128, pattern=NAME_PATTERN)] = None,
    team: Annotated[str | None, Query(max_length=64, pattern="^[a-z0-9][a-z0-9_.-]{0,63}$")] = None,
    label: Annotated[str | None, Query(max_length=64, pattern=LABEL_PATTERN)] = None,
    waiting: Annotated[
        bool,
        Query(description="only requests waiting for your review: in review, not yours, no verdict of yours yet"),
    ] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=models.INT32_MAX)] = 0,
) -> dict[str, Any]:
    return reviews.list_requests(
        access=principal,
        state=state,
        kind=kind,
        name=name,
        team=team,
        label=label,
        waiting_for=principal.actor() if waiting else None,
        limit=limit,
        offset=offset,
    )


@router.post(
    "/change-requests",
    status_code=201,
    tags=["reviews"],
    summary="Open a change request to move a protected label",
    operation_id="openChangeRequest",
    response_model=ChangeRequest,
    responses={
        **documented(*ALWAYS, *WITH_BODY, 404, 409),
        201: {"description": "The request, in review (or a draft)"},
    },
)
def open_request(reviews: ReviewsDep, body: ChangeRequestOpen, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.open(
        body.kind,
        body.name,
        actor=principal.actor(),
        access=principal,
        label=body.label,
        to_version=body.to_version,
        title=body.title,
        description=body.description,
        draft=body.draft,
        publish_when_approved=body.publish_when_approved,
    )


@router.get(
    "/change-requests/{request_id}",
    tags=["reviews"],
    summary="A change request: its reviews, diff and fresh pre-publish checks",
    operation_id="getChangeRequest",
    response_model=ChangeRequest,
    responses=documented(*ALWAYS, 404, 422),
)
def get_request(reviews: ReviewsDep, request_id: RequestId, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.get(request_id, access=principal, viewer=principal.actor())


def _transition(operation: str, summary: str, description: str, *, body: bool = False) -> dict[str, Any]:
    return {
        "tags": ["reviews"],
        "summary": summary,
        "description": description,
        "operation_id": operation,
        "response_model": ChangeRequest,
        "responses": documented(*ALWAYS, *(WITH_BODY if body else (422,)), 404, 409),
    }


@router.post(
    "/change-requests/{request_id}/submit",
    **_transition("submitChangeRequest", "Submit a draft for review", "Its author (or an admin)."),
)
def submit(reviews: ReviewsDep, request_id: RequestId, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.submit(request_id, actor=principal.actor(), access=principal)


@router.post(
    "/change-requests/{request_id}/approve",
    **_transition(
        "approveChangeRequest",
        "Approve (reviewer role on the entry's team; never the author)",
        "The author is recognised by token and by single-sign-on user, not by name: another token of the same "
        "person cannot approve either. `override_checks` with a `comment` lets the request be published although "
        "its pre-publish checks fail.",
        body=True,
    ),
)
def approve(reviews: ReviewsDep, request_id: RequestId, body: Approval, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.approve(
        request_id,
        actor=principal.actor(),
        access=principal,
        comment=body.comment,
        override_checks=body.override_checks,
    )


@router.post(
    "/change-requests/{request_id}/reject",
    **_transition("rejectChangeRequest", "Reject, saying why (reviewer role; not the author)", "", body=True),
)
def reject(reviews: ReviewsDep, request_id: RequestId, body: Rejection, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.reject(request_id, actor=principal.actor(), access=principal, comment=body.comment)


@router.post(
    "/change-requests/{request_id}/withdraw",
    **_transition("withdrawChangeRequest", "Withdraw an open request", "Its author (or an admin)."),
)
def withdraw(reviews: ReviewsDep, request_id: RequestId, principal: ViewerPrincipal) -> dict[str, Any]:
    return reviews.withdraw(request_id, actor=principal.actor(), access=principal)


@router.post(
    "/change-requests/{request_id}/publish",
    **_transition(
        "publishChangeRequest",
        "Publish: move the label (approved, checks pass or overridden, label not moved since)",
        "Agents are notified as for any label move. 409 when approvals are missing, checks fail without an override, "
        "or the label moved since the request was opened. An admin's `override_reason` publishes any open request "
        "at once (an emergency override, marked in the change log). The body may be left out.",
        body=True,
    ),
)
def publish(
    reviews: ReviewsDep,
    request_id: RequestId,
    principal: ViewerPrincipal,
    body: Annotated[Publication, Body()] = _NO_OVERRIDE,
) -> dict[str, Any]:
    return reviews.publish(request_id, actor=principal.actor(), access=principal, override_reason=body.override_reason)


# ------------------------------------------------------------------ on-demand checks


def checks(
    reviews: ReviewsDep,
    kind: KindDep,
    name: EntryName,
    principal: ViewerPrincipal,
    version: Annotated[
        int | None, Query(ge=1, le=models.INT32_MAX, description="the version to check (default: the newest)")
    ] = None,
    label: Annotated[
        str, Query(max_length=64, pattern=LABEL_PATTERN, description="the label it would move")
    ] = "production",
) -> dict[str, Any]:
    return reviews.checks(kind, name, version=version, label=label, access=principal).as_dict()


for _collection, _kind in KIND_BY_COLLECTION.items():
    _per_kind = kind_router(_collection, tags=[_collection])
    _per_kind.add_api_route(
        f"/{_collection}/{{name}}/checks",
        checks,
        methods=["GET"],
        summary=f"Pre-publish checks of a {_kind}: moving a label (default `production`) to a version",
        operation_id=f"check{_kind.capitalize()}",
        response_model=CheckReport,
        responses=documented(*ALWAYS, 404, 422),
    )
    router.include_router(_per_kind)
