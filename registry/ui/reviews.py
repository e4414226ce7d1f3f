"""``/ui/reviews`` (change requests) and ``/ui/labels`` (protected labels, admins).

The review queue lists change requests (in review by default); a request's page shows what it
asks (the diff from the version the label serves to the proposed one), its pre-publish checks
and reviews, and the forms that move it on: approve or reject with a comment, approve overriding
failing checks with a reason, publish, an admin's emergency publication with a reason, withdraw,
submit a draft. The change request service decides who may do what (``registry.catalog.reviews``:
reviewers other than the author, editors to publish, admins to override); these pages only offer
the forms that can work for the signed-in person, and show a refusal on the page when one comes.
Every POST carries the session's CSRF token; everything works without JavaScript.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import Response

from registry.api.deps import CatalogDep, ProtectionDep, ReviewsDep
from registry.catalog.errors import CatalogError, Invalid, NotFound
from registry.catalog.protection import MAX_APPROVALS, OPEN_STATES, STATES
from registry.catalog.web_sessions import SignedIn
from registry.ui.auth import Admin, AdminForm, Viewer, form_field, require_form
from registry.ui.collections import COLLECTION_OF_KIND
from registry.ui.diffview import diff_specs
from registry.ui.views import View

#: Requests per queue page.
PAGE_SIZE = 50
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
#: The queue's filter: requests waiting for the viewer's review, "all", or one state.
WAITING = "waiting"
STATE_CHOICES = (WAITING, "all", *STATES)

RequestId = Annotated[int, Path(ge=1, le=INT64_MAX)]
#: A signed-in session's form (any scope: the service checks the role on the entry's team).
SessionForm = Annotated[tuple[SignedIn, FormData], Depends(require_form("viewer"))]


def _approval_outcome(answer: dict[str, Any], done: str) -> str:
    """An approval's notice, plus what "publish when approved" did with it."""
    if answer.get("state") == "published":
        return f"{done[:-1]} and published (publish when approved): agents are served v{answer['to_version']} now."
    refused = answer.get("auto_publish_refused")
    return f"{done} Not published automatically: {refused}." if refused else done


@dataclass
class ReviewPages(View):
    """The change requests' pages, and the protected labels'."""

    reviews: ReviewsDep
    catalog: CatalogDep
    protection: ProtectionDep

    def request_page(self, ui: SignedIn, request_id: int, *, error: str | None = None, status: int = 200) -> Response:
        detail = self.reviews.get(request_id, access=ui.principal, viewer=ui.principal.actor())
        kind, name = detail["kind"], detail["name"]
        new = self.catalog.get(kind, name, version=detail["to_version"], access=ui.principal)
        old_spec: dict[str, Any] = {}
        if detail["from_version"] is not None:
            old_spec = self.catalog.get(kind, name, version=detail["from_version"], access=ui.principal).spec
        changed, same = diff_specs(old_spec, new.spec)
        team = new.team
        state = detail["state"]
        mine = detail["authored_by_you"]
        may_review = ui.principal.may("reviewer", team) and not mine
        yours = detail["your_verdict"]
        # Verdicts are taken while a request is in review or approved; on a rejected one only the
        # reviewers who rejected it may think again (approve). A verdict given is not offered twice.
        judging = may_review and (state in ("in_review", "approved") or (state == "rejected" and yours == "reject"))
        context = {
            "title": f"Change request #{request_id}",
            "nav": "reviews",
            "cr": detail,
            "entry_url": f"/ui/{COLLECTION_OF_KIND[kind]}/{name}",
            "changed": changed,
            "same": same,
            "from_label": f"v{detail['from_version']}" if detail["from_version"] is not None else "unset",
            "can": {
                "review": judging,
                "approve": judging and yours != "approve",
                "reject": judging and yours != "reject",
                "override": judging and detail["checks"]["failed"] and not detail["checks_overridden"],
                "publish": ui.principal.may("editor", team) and state == "approved",
                # A rejected request is not published, not even in an emergency: its author withdraws it.
                "emergency": ui.principal.may("admin", team) and state in ("draft", "in_review", "approved"),
                "withdraw": (mine or ui.principal.may("admin", team)) and state in OPEN_STATES,
                "submit": (mine or ui.principal.may("admin", team)) and state == "draft",
            },
            "mine": mine,
            "error": error,
        }
        return self.render("review.html", context, status=status)

    async def act(
        self,
        ui: SignedIn,
        request_id: int,
        step: Any,
        done: str,
        *,
        outcome: Callable[[dict[str, Any], str], str] = lambda _answer, said: said,
    ) -> Response:
        """Run one transition; back to the request with a notice (``outcome`` may add to it what
        the answer says happened besides), or its page with the refusal."""
        try:
            answer = await run_in_threadpool(step)
        except NotFound:
            raise
        except CatalogError as exc:
            detail, status = exc.detail, exc.status
            return await run_in_threadpool(lambda: self.request_page(ui, request_id, error=detail, status=status))
        # A second click (or a retry) changed nothing: say so rather than "Approved." again.
        notice = answer.get("notice") if isinstance(answer, dict) else None
        said = notice[:1].upper() + notice[1:] + "." if notice else outcome(answer, done)
        return self.redirect(f"/ui/reviews/{request_id}", said)

    def labels_page(
        self, *, values: dict[str, str] | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        context = {
            "title": "Protected labels",
            "nav": "reviews",
            "labels": self.protection.list_labels(),
            # Named by this process's REGISTRY_PROTECTED_LABELS: not unprotected here (the variable only adds).
            "pinned": sorted(self.protection.settings_labels),
            "values": values or {"name": "", "approvals": ""},
            "error": error,
            "max_approvals": MAX_APPROVALS,
            "default_approvals": self.protection.default_approvals,
        }
        return self.render("labels.html", context, status=status)


ReviewPagesDep = Annotated[ReviewPages, Depends()]
router = APIRouter()


# ------------------------------------------------------------------ the queue
@router.get("/reviews")
def queue(
    ui: Viewer,
    pages: ReviewPagesDep,
    state: Annotated[str, Query(max_length=16)] = "in_review",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> Response:
    error = None
    if state not in STATE_CHOICES:
        error, state = f"{state!r} is not a state; showing requests in review", "in_review"
    found = pages.reviews.list_requests(
        access=ui.principal,
        state=None if state in ("all", WAITING) else state,
        waiting_for=ui.principal.actor() if state == WAITING else None,
        limit=PAGE_SIZE,
        offset=(page - 1) * PAGE_SIZE,
    )
    context = {
        "title": "Reviews",
        "nav": "reviews",
        "items": found["items"],
        "total": found["total"],
        "page": page,
        "pages_total": max(1, -(-found["total"] // PAGE_SIZE)),
        "state": state,
        "states": STATE_CHOICES,
        "error": error,
        "collections_by_kind": COLLECTION_OF_KIND,
    }
    return pages.render("reviews.html", context, status=400 if error else 200)


# ------------------------------------------------------------------ opening one (a label move's page)
@router.post("/reviews/open")
async def open_request(posted: SessionForm, pages: ReviewPagesDep) -> Response:
    ui, fields = posted
    version = form_field(fields, "version")
    kind, name, label = form_field(fields, "kind"), form_field(fields, "name"), form_field(fields, "label")
    title, description = form_field(fields, "title"), form_field(fields, "description")
    when_approved = form_field(fields, "publish_when_approved") == "1"

    def step() -> dict[str, Any]:
        if not version.isdigit() or not 1 <= int(version) <= INT32_MAX:
            raise Invalid(f"the version must be a whole number from 1 (got {version[:20]!r})")
        return pages.reviews.open(
            kind,
            name,
            actor=ui.principal.actor(),
            access=ui.principal,
            label=label,
            to_version=int(version),
            title=title or None,
            description=description or None,
            publish_when_approved=when_approved,
        )

    opened = await run_in_threadpool(step)
    then = " It is published as soon as they approve it." if when_approved else ""
    return pages.redirect(
        f"/ui/reviews/{opened['id']}", f"Change request #{opened['id']} opened: reviewers are asked.{then}"
    )


# ------------------------------------------------------------------ one request
@router.get("/reviews/{request_id}")
def show(ui: Viewer, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    return pages.request_page(ui, request_id)


@router.post("/reviews/{request_id}/approve")
async def approve(posted: SessionForm, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    ui, fields = posted
    override = form_field(fields, "override_checks") == "1"
    comment = form_field(fields, "comment")

    step = functools.partial(
        pages.reviews.approve,
        request_id,
        actor=ui.principal.actor(),
        access=ui.principal,
        comment=comment or None,
        override_checks=override,
    )
    done = "Approved, overriding the failing checks." if override else "Approved."
    return await pages.act(ui, request_id, step, done, outcome=_approval_outcome)


@router.post("/reviews/{request_id}/reject")
async def reject(posted: SessionForm, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    ui, fields = posted
    comment = form_field(fields, "comment")

    step = functools.partial(
        pages.reviews.reject, request_id, actor=ui.principal.actor(), access=ui.principal, comment=comment
    )
    return await pages.act(ui, request_id, step, "Rejected.")


@router.post("/reviews/{request_id}/publish")
async def publish(posted: SessionForm, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    ui, fields = posted
    reason = form_field(fields, "override_reason")
    emergency = form_field(fields, "emergency") == "1"

    step = functools.partial(
        pages.reviews.publish,
        request_id,
        actor=ui.principal.actor(),
        access=ui.principal,
        # An emergency form with an empty reason is refused as such, not taken as a plain publish.
        override_reason=reason if emergency else None,
    )
    done = "Published as an emergency override." if emergency else "Published: agents are served it now."
    return await pages.act(ui, request_id, step, done)


@router.post("/reviews/{request_id}/withdraw")
async def withdraw(posted: SessionForm, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    ui, _fields = posted
    step = functools.partial(pages.reviews.withdraw, request_id, actor=ui.principal.actor(), access=ui.principal)
    return await pages.act(ui, request_id, step, "Withdrawn.")


@router.post("/reviews/{request_id}/submit")
async def submit(posted: SessionForm, pages: ReviewPagesDep, request_id: RequestId) -> Response:
    ui, _fields = posted
    step = functools.partial(pages.reviews.submit, request_id, actor=ui.principal.actor(), access=ui.principal)
    return await pages.act(ui, request_id, step, "Submitted for review.")


# ------------------------------------------------------------------ protected labels (admins)
@router.get("/labels")
def labels(ui: Admin, pages: ReviewPagesDep) -> Response:
    return pages.labels_page()


@router.post("/labels")
async def protect(posted: AdminForm, pages: ReviewPagesDep) -> Response:
    ui, fields = posted
    name, approvals = form_field(fields, "name"), form_field(fields, "approvals")
    values = {"name": name, "approvals": approvals}
    try:
        count = int(approvals) if approvals else None
    except ValueError:
        count = -1  # refused below, with the bound in the message
    try:
        await run_in_threadpool(pages.protection.protect, name, count, actor=ui.principal.actor(), access=ui.principal)
    except CatalogError as exc:
        detail = exc.detail
        return await run_in_threadpool(lambda: pages.labels_page(values=values, error=detail, status=422))
    return pages.redirect("/ui/labels", f"{name} is protected: saves no longer move it.")


@router.post("/labels/{label}/unprotect")
async def unprotect(
    posted: AdminForm, pages: ReviewPagesDep, label: Annotated[str, Path(min_length=1, max_length=64)]
) -> Response:
    ui, _fields = posted
    try:
        await run_in_threadpool(pages.protection.unprotect, label, actor=ui.principal.actor(), access=ui.principal)
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        return await run_in_threadpool(lambda: pages.labels_page(error=detail, status=status))
    return pages.redirect("/ui/labels", f"{label} is no longer protected.")
