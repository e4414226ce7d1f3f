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

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from registry.api.deps import CatalogDep, ProtectionDep, ReviewsDep
from registry.catalog.errors import CatalogError, Invalid, NotFound
from registry.catalog.protection import MAX_APPROVALS, OPEN_STATES, STATES, ProtectionPolicy
from registry.catalog.reviews import ChangeRequestService
from registry.catalog.service import CatalogService
from registry.catalog.specs import KIND_BY_COLLECTION
from registry.catalog.web_sessions import SignedIn
from registry.ui.auth import Admin, AdminForm, Viewer, is_https, require_form
from registry.ui.diffview import diff_specs
from registry.ui.templating import Pages, PagesDep, set_flash

#: Requests per queue page.
PAGE_SIZE = 50
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
COLLECTION_BY_KIND = {kind: collection for collection, kind in KIND_BY_COLLECTION.items()}
#: The queue's filter: requests waiting for the viewer's review, "all", or one state.
WAITING = "waiting"
STATE_CHOICES = (WAITING, "all", *STATES)

RequestId = Annotated[int, Path(ge=1, le=INT64_MAX)]
#: A signed-in session's form (any scope: the service checks the role on the entry's team).
SessionForm = Annotated[tuple[SignedIn, FormData], Depends(require_form("viewer"))]


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _approval_outcome(answer: dict[str, Any], done: str) -> str:
    """An approval's notice, plus what "publish when approved" did with it."""
    if answer.get("state") == "published":
        return f"{done[:-1]} and published (publish when approved): agents are served v{answer['to_version']} now."
    refused = answer.get("auto_publish_refused")
    return f"{done} Not published automatically: {refused}." if refused else done


router = APIRouter()


# ------------------------------------------------------------------ the queue
@router.get("/reviews")
def queue(
    request: Request,
    ui: Viewer,
    pages: PagesDep,
    reviews: ReviewsDep,
    state: Annotated[str, Query(max_length=16)] = "in_review",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> Response:
    error = None
    if state not in STATE_CHOICES:
        error, state = f"{state!r} is not a state; showing requests in review", "in_review"
    found = reviews.list_requests(
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
        "collections_by_kind": COLLECTION_BY_KIND,
    }
    return pages.render(request, "reviews.html", context, status=400 if error else 200)


# ------------------------------------------------------------------ opening one (a label move's page)
@router.post("/reviews/open")
async def open_request(request: Request, posted: SessionForm, reviews: ReviewsDep) -> Response:
    ui, fields = posted
    version = _field(fields, "version")
    kind, name, label = _field(fields, "kind"), _field(fields, "name"), _field(fields, "label")
    title, description = _field(fields, "title"), _field(fields, "description")
    when_approved = _field(fields, "publish_when_approved") == "1"

    def step() -> dict[str, Any]:
        if not version.isdigit() or not 1 <= int(version) <= INT32_MAX:
            raise Invalid(f"the version must be a whole number from 1 (got {version[:20]!r})")
        return reviews.open(
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
    response = RedirectResponse(f"/ui/reviews/{opened['id']}", status_code=303)
    then = " It is published as soon as they approve it." if when_approved else ""
    set_flash(response, f"Change request #{opened['id']} opened: reviewers are asked.{then}", secure=is_https(request))
    return response


# ------------------------------------------------------------------ one request
def request_page(
    pages: Pages,
    reviews: ChangeRequestService,
    catalog: CatalogService,
    request: Request,
    ui: SignedIn,
    request_id: int,
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    detail = reviews.get(request_id, access=ui.principal, viewer=ui.principal.actor())
    kind, name = detail["kind"], detail["name"]
    new = catalog.get(kind, name, version=detail["to_version"], access=ui.principal)
    old_spec: dict[str, Any] = {}
    if detail["from_version"] is not None:
        old_spec = catalog.get(kind, name, version=detail["from_version"], access=ui.principal).spec
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
        "entry_url": f"/ui/{COLLECTION_BY_KIND[kind]}/{name}",
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
    return pages.render(request, "review.html", context, status=status)


@router.get("/reviews/{request_id}")
def show(
    request: Request, ui: Viewer, pages: PagesDep, reviews: ReviewsDep, catalog: CatalogDep, request_id: RequestId
) -> Response:
    return request_page(pages, reviews, catalog, request, ui, request_id)


async def act(
    pages: Pages,
    reviews: ChangeRequestService,
    catalog: CatalogService,
    request: Request,
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
        return await run_in_threadpool(
            lambda: request_page(pages, reviews, catalog, request, ui, request_id, error=detail, status=status)
        )
    response = RedirectResponse(f"/ui/reviews/{request_id}", status_code=303)
    # A second click (or a retry) changed nothing: say so rather than "Approved." again.
    notice = answer.get("notice") if isinstance(answer, dict) else None
    said = notice[:1].upper() + notice[1:] + "." if notice else outcome(answer, done)
    set_flash(response, said, secure=is_https(request))
    return response


@router.post("/reviews/{request_id}/approve")
async def approve(
    request: Request,
    posted: SessionForm,
    pages: PagesDep,
    reviews: ReviewsDep,
    catalog: CatalogDep,
    request_id: RequestId,
) -> Response:
    ui, fields = posted
    override = _field(fields, "override_checks") == "1"
    comment = _field(fields, "comment")

    def step() -> dict[str, Any]:
        return reviews.approve(
            request_id,
            actor=ui.principal.actor(),
            access=ui.principal,
            comment=comment or None,
            override_checks=override,
        )

    done = "Approved, overriding the failing checks." if override else "Approved."
    return await act(pages, reviews, catalog, request, ui, request_id, step, done, outcome=_approval_outcome)


@router.post("/reviews/{request_id}/reject")
async def reject(
    request: Request,
    posted: SessionForm,
    pages: PagesDep,
    reviews: ReviewsDep,
    catalog: CatalogDep,
    request_id: RequestId,
) -> Response:
    ui, fields = posted
    comment = _field(fields, "comment")

    def step() -> dict[str, Any]:
        return reviews.reject(request_id, actor=ui.principal.actor(), access=ui.principal, comment=comment)

    return await act(pages, reviews, catalog, request, ui, request_id, step, "Rejected.")


@router.post("/reviews/{request_id}/publish")
async def publish(
    request: Request,
    posted: SessionForm,
    pages: PagesDep,
    reviews: ReviewsDep,
    catalog: CatalogDep,
    request_id: RequestId,
) -> Response:
    ui, fields = posted
    reason = _field(fields, "override_reason")
    emergency = _field(fields, "emergency") == "1"

    def step() -> dict[str, Any]:
        return reviews.publish(
            request_id,
            actor=ui.principal.actor(),
            access=ui.principal,
            # An emergency form with an empty reason is refused as such, not taken as a plain publish.
            override_reason=reason if emergency else None,
        )

    done = "Published as an emergency override." if emergency else "Published: agents are served it now."
    return await act(pages, reviews, catalog, request, ui, request_id, step, done)


@router.post("/reviews/{request_id}/withdraw")
async def withdraw(
    request: Request,
    posted: SessionForm,
    pages: PagesDep,
    reviews: ReviewsDep,
    catalog: CatalogDep,
    request_id: RequestId,
) -> Response:
    ui, _fields = posted

    def step() -> dict[str, Any]:
        return reviews.withdraw(request_id, actor=ui.principal.actor(), access=ui.principal)

    return await act(pages, reviews, catalog, request, ui, request_id, step, "Withdrawn.")


@router.post("/reviews/{request_id}/submit")
async def submit(
    request: Request,
    posted: SessionForm,
    pages: PagesDep,
    reviews: ReviewsDep,
    catalog: CatalogDep,
    request_id: RequestId,
) -> Response:
    ui, _fields = posted

    def step() -> dict[str, Any]:
        return reviews.submit(request_id, actor=ui.principal.actor(), access=ui.principal)

    return await act(pages, reviews, catalog, request, ui, request_id, step, "Submitted for review.")


# ------------------------------------------------------------------ protected labels (admins)
def labels_page(
    pages: Pages,
    protection: ProtectionPolicy,
    request: Request,
    *,
    values: dict[str, str] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    context = {
        "title": "Protected labels",
        "nav": "reviews",
        "labels": protection.list_labels(),
        # Named by this process's REGISTRY_PROTECTED_LABELS: not unprotected here (the variable only adds).
        "pinned": sorted(protection.settings_labels),
        "values": values or {"name": "", "approvals": ""},
        "error": error,
        "max_approvals": MAX_APPROVALS,
        "default_approvals": protection.default_approvals,
    }
    return pages.render(request, "labels.html", context, status=status)


@router.get("/labels")
def labels(request: Request, ui: Admin, pages: PagesDep, protection: ProtectionDep) -> Response:
    return labels_page(pages, protection, request)


@router.post("/labels")
async def protect(request: Request, posted: AdminForm, pages: PagesDep, protection: ProtectionDep) -> Response:
    ui, fields = posted
    name, approvals = _field(fields, "name"), _field(fields, "approvals")
    values = {"name": name, "approvals": approvals}
    try:
        count = int(approvals) if approvals else None
    except ValueError:
        count = -1  # refused below, with the bound in the message
    try:
        await run_in_threadpool(protection.protect, name, count, actor=ui.principal.actor(), access=ui.principal)
    except CatalogError as exc:
        detail = exc.detail
        return await run_in_threadpool(
            lambda: labels_page(pages, protection, request, values=values, error=detail, status=422)
        )
    response = RedirectResponse("/ui/labels", status_code=303)
    set_flash(response, f"{name} is protected: saves no longer move it.", secure=is_https(request))
    return response


@router.post("/labels/{label}/unprotect")
async def unprotect(
    request: Request,
    posted: AdminForm,
    pages: PagesDep,
    protection: ProtectionDep,
    label: Annotated[str, Path(min_length=1, max_length=64)],
) -> Response:
    ui, _fields = posted
    try:
        await run_in_threadpool(protection.unprotect, label, actor=ui.principal.actor(), access=ui.principal)
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        return await run_in_threadpool(lambda: labels_page(pages, protection, request, error=detail, status=status))
    response = RedirectResponse("/ui/labels", status_code=303)
    set_flash(response, f"{label} is no longer protected.", secure=is_https(request))
    return response
