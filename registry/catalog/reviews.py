"""Change requests: moving a protected label by review.

A request asks to point one protected label of one entry at a version. It is opened by an
editor of the entry's team (or by a save that held the label, ``CatalogService`` with
``review``), reviewed by others, and published, which moves the label:

    draft --submit--> in_review --approvals--> approved --publish--> published
                          |   ^                    |
                          v   |  (a reviewer       v
                       rejected  changes verdict)  withdrawn (author or admin, any open state)

* **Reviewers** hold the ``reviewer`` role on the entry's team and are never the author: the
  author is compared by ``Actor.key`` (the token, or the single-sign-on user behind any of their
  tokens), not by name. Each reviewer's latest verdict counts once. A request is approved while
  it has ``approvals_required`` approvals from distinct reviewers and no standing rejection.
* **Checks** (``registry.catalog.checks``) are run fresh whenever a request is shown, approved or
  published. Failing checks block publication unless a reviewer approved with
  ``override_checks`` and a reason.
* **Publication** moves the label in one transaction with the request's state change and its
  change-log rows (``label_moved``, noted "change request #N"; agents are notified through the
  normal change feed), and only while the label still points where it did when the request was
  opened (else 409: the request is stale). An admin may publish in an emergency with a reason,
  skipping approvals and checks; the change row is marked ``override`` with that reason.
* **Publish when approved** (``publish_when_approved``, the author's choice when opening): the
  approving review that makes the request approved also publishes it, in its own transaction,
  under exactly the rules above (fresh checks or a reviewer's override, the label not moved
  since); the ``cr_published`` event names the reviewer whose approval did it. Refused by one of
  those rules, the approval stands, the request stays approved and says why
  (``auto_publish_refused``) until someone publishes it by hand.
* **Waiting for a reviewer** (``waiting_terms``): in review, not their own, of a team they review,
  no verdict of theirs yet; counted with one indexed query on every page's navigation.

Every transition is a ``change_request`` event in the hash-chained change log. Concurrency: a
request's row is locked (PostgreSQL ``FOR UPDATE``; SQLite serialises writers) and its state
changes by compare-and-swap, so two approvals or publications at once cannot double-publish.

**Retries are safe.** A reviewer approving again (a second click, a retry whose first answer was
lost) and a publication of a published request change nothing and answer success with a
``notice`` saying it was already done. Each review names the same reviewer's previous one
(``after_review_id``, unique per request and reviewer), so the database itself refuses a twin that
two replicas write at once. And a transition builds its answer inside its transaction: nothing is
read after the commit, so a database lost just then cannot turn a committed approval or
publication into a 503 (whose retry would then be told "already done" anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from registry.catalog.access import Access, check_may, check_sees
from registry.catalog.checks import CheckReport, run_checks
from registry.catalog.errors import Conflict, Forbidden, Invalid, NotFound, RequestPending, Subject
from registry.catalog.protection import (
    OPEN_STATES,
    STATES,
    ProtectionPolicy,
    check_reason,
    check_request_text,
    open_request,
    pending_request,
    request_digest,
)
from registry.catalog.repository import EntryRepository
from registry.catalog.service import CatalogService
from registry.catalog.specs import KINDS, is_label
from registry.catalog.validation import PRODUCTION
from registry.db.audit import Actor, as_actor, request_ref
from registry.db.changelog import append_event
from registry.db.models import ChangeRequest, ChangeRequestReview, Entry, EntryVersion, utcnow

#: Most requests one list page shows.
MAX_PAGE = 100
#: Most waiting requests counted: more show as "99+" (the count stays cheap however long the queue).
WAITING_COUNTED = 99
#: States a reviewer's verdict may still change.
REVIEWABLE = ("in_review", "approved", "rejected")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _v(version: int | None) -> str:
    return f"v{version}" if version is not None else "(unset)"


def standing(request: ChangeRequest) -> tuple[list[ChangeRequestReview], list[ChangeRequestReview]]:
    """(approvals, rejections) that count: each reviewer's latest verdict, the author's never."""
    latest: dict[str, ChangeRequestReview] = {}
    for review in sorted(request.reviews, key=lambda r: r.id):
        if review.verdict in ("approve", "reject") and review.reviewer_key != request.author_key:
            latest[review.reviewer_key] = review
    approvals = [r for r in latest.values() if r.verdict == "approve"]
    rejections = [r for r in latest.values() if r.verdict == "reject"]
    return approvals, rejections


def checks_override(request: ChangeRequest) -> ChangeRequestReview | None:
    """A standing approval that overrides failing checks (it carries the reason), if any."""
    approvals, _rejections = standing(request)
    return next((r for r in approvals if r.override_checks and (r.comment or "").strip()), None)


def derived_state(request: ChangeRequest) -> str:
    """The state the verdicts put an in-review request in."""
    approvals, rejections = standing(request)
    if rejections:
        return "rejected"
    if len(approvals) >= request.approvals_required:
        return "approved"
    return "in_review"


class ChangeRequestService:
    """Opens, lists, reviews and publishes change requests (see the module docstring)."""

    def __init__(self, catalog: CatalogService, protection: ProtectionPolicy) -> None:
        self.catalog = catalog
        self.db = catalog.db
        self.protection = protection
        self.limits = catalog.limits

    # ------------------------------------------------------------------ reading
    def _load(
        self, session: Session, request_id: int, access: Access | None, *, lock: bool = False
    ) -> tuple[ChangeRequest, str | None]:
        """The request and its entry's team now; hidden ones answer like missing ones."""
        stmt = select(ChangeRequest).where(ChangeRequest.id == request_id).options(selectinload(ChangeRequest.reviews))
        if lock:
            stmt = stmt.with_for_update()
        request = session.scalar(stmt)
        # A hidden one answers as a missing one does: the same words, pointing the same way.
        missing = Subject(request_id=request_id, missing="request")
        if request is None:
            raise NotFound(f"change request #{request_id} does not exist", about=missing)
        team = session.scalar(select(Entry.team).where(Entry.kind == request.kind, Entry.name == request.name))
        team = team if team is not None else request.team
        check_sees(access, request.team, f"change request #{request_id}", about=missing)
        check_sees(access, team, f"change request #{request_id}", about=missing)
        return request, team

    def summary(self, request: ChangeRequest) -> dict[str, Any]:
        approvals, rejections = standing(request)
        stored = request.checks if isinstance(request.checks, Mapping) else None
        return {
            "id": request.id,
            "kind": request.kind,
            "name": request.name,
            "team": request.team,
            "label": request.label,
            "from_version": request.from_version,
            "to_version": request.to_version,
            "state": request.state,
            "title": request.title or "",
            "description": request.description,
            "author": request.author,
            "approvals_required": request.approvals_required,
            "approvals": len(approvals),
            "rejections": len(rejections),
            "checks_failed": bool(stored.get("failed")) if stored is not None else None,
            "created_at": _iso(request.created_at),
            "updated_at": _iso(request.updated_at),
            "published_at": _iso(request.published_at),
            "published_by": request.published_by,
            "publish_when_approved": bool(request.publish_when_approved),
        }

    def list_requests(
        self,
        *,
        access: Access | None = None,
        state: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        team: str | None = None,
        label: str | None = None,
        waiting_for: Actor | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Requests ``access`` may see, newest first, filtered; ``waiting_for``: only those waiting
        for that reviewer (``waiting_terms``; ``access`` is theirs)."""
        if state is not None and state not in STATES:
            raise Invalid(f"unknown state {state!r}: one of {', '.join(STATES)}")
        if kind is not None and kind not in KINDS:
            raise Invalid(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        limit = max(1, min(limit, MAX_PAGE))
        offset = max(0, offset)
        terms = []
        teams = access.visible_teams if access is not None else None
        if teams is not None:
            terms.append(
                or_(ChangeRequest.team.is_(None), ChangeRequest.team.in_(sorted(teams)))
                if teams
                else ChangeRequest.team.is_(None)
            )
        if waiting_for is not None:
            waiting = waiting_terms(access, waiting_for.key) if access is not None else None
            if waiting is None:
                return {"items": [], "total": 0, "limit": limit, "offset": offset}
            terms.extend(waiting)
        for column, value in (
            (ChangeRequest.state, state),
            (ChangeRequest.kind, kind),
            (ChangeRequest.name, name),
            (ChangeRequest.team, team),
            (ChangeRequest.label, label),
        ):
            if value is not None:
                terms.append(column == value)
        with self.db.session() as session:
            total = session.scalar(select(func.count()).select_from(ChangeRequest).where(*terms)) or 0
            rows = session.scalars(
                select(ChangeRequest)
                .where(*terms)
                .options(selectinload(ChangeRequest.reviews))
                .order_by(ChangeRequest.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
            items = [self.summary(row) for row in rows]
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    def waiting_count(self, access: Access, viewer: Actor) -> int | None:
        """How many requests wait for ``viewer``'s review (``waiting_terms``), up to
        ``WAITING_COUNTED + 1`` (meaning "more than WAITING_COUNTED"): one indexed COUNT over at
        most that many rows, cheap enough for every page's navigation even when an import left
        thousands in review. None, without a query, when they review nothing."""
        terms = waiting_terms(access, viewer.key)
        if terms is None:
            return None
        found = select(ChangeRequest.id).where(*terms).limit(WAITING_COUNTED + 1).subquery()
        with self.db.session() as session:
            return session.scalar(select(func.count()).select_from(found)) or 0

    def for_entry(self, kind: str, name: str, *, access: Access | None = None) -> list[dict[str, Any]]:
        """The open requests of one entry (its page lists them)."""
        self.catalog.get(kind, name, access=access)  # 404 when hidden
        with self.db.session() as session:
            rows = session.scalars(
                select(ChangeRequest)
                .where(
                    ChangeRequest.kind == kind,
                    ChangeRequest.name == name,
                    ChangeRequest.state.in_(OPEN_STATES),
                )
                .options(selectinload(ChangeRequest.reviews))
                .order_by(ChangeRequest.id.desc())
                .limit(MAX_PAGE)
            ).all()
            return [self.summary(row) for row in rows]

    def get(
        self,
        request_id: int,
        *,
        access: Access | None = None,
        viewer: Actor | None = None,
        report: CheckReport | None = None,
    ) -> dict[str, Any]:
        """A request with its reviews, the diff it asks for, fresh checks and what may happen next.
        ``viewer``: who is looking (``authored_by_you``)."""
        with self.db.session() as session:
            request, _team = self._load(session, request_id, access)
            partial = self._detail_in(session, request, viewer)
        diff, report = self._context(partial, access, report)
        return self._finish(partial, diff, report)

    def _detail_in(self, session: Session, request: ChangeRequest, viewer: Actor | None) -> dict[str, Any]:
        """What ``get`` shows of a request, read in ``session`` (a transition builds its answer
        here, before its commit: nothing is read back afterwards, when the database may be gone)."""
        detail = self.summary(request)
        override = checks_override(request)
        current = session.scalar(select(Entry).where(Entry.kind == request.kind, Entry.name == request.name))
        label_now = next((lb.version for lb in current.labels if lb.name == request.label), None) if current else None
        proposed = (
            session.execute(
                select(EntryVersion.author, EntryVersion.change_note, EntryVersion.created_at).where(
                    EntryVersion.entry_id == current.id, EntryVersion.number == request.to_version
                )
            ).first()
            if current is not None
            else None
        )
        yours = _latest_of(request, viewer.key) if viewer is not None else None
        return {
            **detail,
            "current_version": label_now,
            # What reviewers read first: the proposed version's own change note, by whom and when.
            "proposed": {
                "version": request.to_version,
                "author": proposed.author if proposed is not None else None,
                "change_note": proposed.change_note if proposed is not None else None,
                "created_at": _iso(proposed.created_at) if proposed is not None else None,
            },
            # The viewer's own standing verdict (a page offers no second "Approve" after one).
            "your_verdict": yours.verdict if yours is not None and yours.verdict in ("approve", "reject") else None,
            "reviews": [
                {
                    "id": review.id,
                    "verdict": review.verdict,
                    "reviewer": review.reviewer,
                    "comment": review.comment,
                    "override_checks": review.override_checks,
                    "created_at": _iso(review.created_at),
                }
                for review in request.reviews
            ],
            "checks_override_reason": override.comment if override is not None else None,
            "checks_overridden": override is not None,
            "authored_by_you": viewer is not None and viewer.key == request.author_key,
        }

    def _context(
        self, partial: Mapping[str, Any], access: Access | None, report: CheckReport | None = None
    ) -> tuple[dict[str, Any] | None, CheckReport]:
        """The diff a request asks for and its checks (read from the catalog; versions never change,
        so a transition reads them before its transaction)."""
        kind, name, from_version = partial["kind"], partial["name"], partial["from_version"]
        diff = (
            self.catalog.diff(kind, name, from_version, partial["to_version"], access=access)
            if from_version is not None
            else None
        )
        if report is None:
            report = self._checks_of(partial, access)
        return diff, report

    @staticmethod
    def _finish(partial: Mapping[str, Any], diff: dict[str, Any] | None, report: CheckReport) -> dict[str, Any]:
        stale = partial["current_version"] != partial["from_version"]
        is_open = partial["state"] in OPEN_STATES
        checks_ok = not report.failed or partial["checks_overridden"]
        publishable = partial["state"] == "approved" and checks_ok and not stale
        held = None
        if partial["publish_when_approved"] and partial["state"] == "approved" and not publishable:
            # Approved, to be published at once, and not published: say what stopped it.
            held = (
                _stale_reason(partial["label"], partial["from_version"], partial["current_version"])
                if stale
                else _checks_reason(partial["id"], report)
            )
        return {
            **partial,
            "stale": stale and is_open,
            "diff": diff,
            "checks": report.as_dict(),
            "publishable": publishable,
            "auto_publish_refused": held,
            "notice": partial.get("notice"),
        }

    # ------------------------------------------------------------------ checks
    def checks(
        self,
        kind: str,
        name: str,
        *,
        version: int | None = None,
        label: str = PRODUCTION,
        against: int | str | None = "current",
        access: Access | None = None,
    ) -> CheckReport:
        """Pre-publish checks of moving ``label`` to ``version`` (default: the newest) of an entry:
        against the version the label serves now (``against="current"``) or a given one (None:
        the label is unset, nothing to compare with)."""
        if not is_label(label):
            raise Invalid(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
        new = self.catalog.get(kind, name, version=version, access=access)
        old_version = new.labels.get(label) if against == "current" else against
        old = (
            self.catalog.get(kind, name, version=old_version, access=access).spec
            if isinstance(old_version, int)
            else None
        )
        embedding: list[str] = []
        if kind == "resource":
            embedding = self.catalog.prompts_embedding([s for s in (old, new.spec) if s], label=label, access=access)

        def resolve(uri: str) -> list[dict[str, Any]] | None:
            return self.catalog.read_resource(uri, label=label, access=access)

        return run_checks(kind, new.spec, old, label=label, resolve=resolve, embedding=embedding, limits=self.limits)

    def _checks_of(self, request: Mapping[str, Any], access: Access | None) -> CheckReport:
        return self.checks(
            request["kind"],
            request["name"],
            version=request["to_version"],
            label=request["label"],
            against=request["from_version"],
            access=access,
        )

    # ------------------------------------------------------------------ opening
    def open(
        self,
        kind: str,
        name: str,
        *,
        actor: Actor | str,
        access: Access | None = None,
        label: str = PRODUCTION,
        to_version: int | None = None,
        title: str | None = None,
        description: str | None = None,
        draft: bool = False,
        publish_when_approved: bool = False,
    ) -> dict[str, Any]:
        """Ask to point protected ``label`` of an entry at ``to_version`` (default: its newest).
        The caller needs editor on the entry's team; the label must be protected and not already
        there; a pending request asking the same move is a 409 naming it.
        ``publish_when_approved``: the approval that completes it publishes it (``_review``)."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        if not is_label(label):
            raise Invalid(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
        title, description = check_request_text(title, description, self.limits)
        with self.db.session() as session:
            repo = EntryRepository(session, self.limits)
            entry = repo.require(kind, name, lock=True, access=access)
            check_may(access, "editor", entry.team, f"{kind} {name!r}")
            protected = self.protection.protected_in(session, [label])
            if label not in protected:
                raise Conflict(
                    f"label {label!r} is not protected: move it directly (PUT /api/v1/{kind}s/{name}/labels/{label})",
                    about=Subject(kind=kind, name=name, label=label),
                )
            number = to_version if to_version is not None else entry.latest_version
            repo.version(entry, number)  # 404 for a version it does not have
            current = next((lb.version for lb in entry.labels if lb.name == label), None)
            if current == number:
                raise Conflict(
                    f"{label} already serves v{number} of {kind} {name!r}",
                    about=Subject(kind=kind, name=name, version=number, label=label),
                )
            pending = pending_request(session, kind, name, label, number)
            if pending is not None:
                raise RequestPending(
                    f"change request #{pending} already asks to move {label} of {kind} {name!r} to v{number}: "
                    "review or withdraw it there",
                    request_id=pending,
                    about=Subject(kind=kind, name=name, version=number, label=label, request_id=pending),
                )
            request = open_request(
                session,
                kind=kind,
                name=name,
                team=entry.team,
                label=label,
                from_version=current,
                to_version=number,
                actor=actor,
                approvals_required=protected[label],
                title=title,
                description=description,
                state="draft" if draft else "in_review",
                publish_when_approved=publish_when_approved,
            )
            request_id = request.id
        return self.get(request_id, access=access, viewer=as_actor(actor))

    # ------------------------------------------------------------------ transitions
    def _prepare(
        self,
        request_id: int,
        *,
        access: Access | None,
        viewer: Actor,
        authorize: Callable[[ChangeRequest, str | None], None],
    ) -> tuple[dict[str, Any], dict[str, Any] | None, CheckReport]:
        """Authorise, then read what the answer needs besides the request itself (the diff and the
        checks: the possibly slow part) before the write transaction; a failure here changed nothing."""
        with self.db.session() as session:
            request, team = self._load(session, request_id, access)
            authorize(request, team)
            partial = self._detail_in(session, request, viewer)
        diff, report = self._context(partial, access)
        return partial, diff, report

    def _transition(
        self,
        request_id: int,
        *,
        access: Access | None,
        actor: Actor,
        viewer: Actor,
        allowed: tuple[str, ...],
        action: str,
        note: str,
        authorize: Callable[[ChangeRequest, str | None], None],
        change: Callable[[Session, ChangeRequest], dict[str, Any]],
        done: Callable[[ChangeRequest], str | None] = lambda _request: None,
        report: CheckReport | None = None,
        after: Callable[[Session, ChangeRequest, str | None], None] | None = None,
    ) -> dict[str, Any]:
        """Lock the request, check it may move on, apply ``change`` (the new column values), swap
        the state only if it is still the one read (compare-and-swap), and append the event.

        ``done`` says (as a notice) that what is asked was already done (a retry, a double click):
        then nothing is written. The answer (``_detail_in``) is built inside the transaction: after
        the commit nothing is read, so a database lost at that moment cannot turn a committed
        transition into an error (that a retry would then repeat). ``after`` runs last, in the same
        transaction, on the request as it now stands (an approval's automatic publication)."""
        with self.db.session() as session:
            request, team = self._load(session, request_id, access, lock=True)
            authorize(request, team)
            notice = done(request)
            if notice is not None:
                return {**self._detail_in(session, request, viewer), "notice": notice}
            if request.state not in allowed:
                raise Conflict(
                    f"change request #{request_id} is {request.state}; this needs it {' or '.join(allowed)}",
                    about=Subject(request_id=request_id),
                )
            seen = request.state
            values = change(session, request)
            values.setdefault("updated_at", utcnow())
            if report is not None:
                values["checks"] = report.as_dict()
            swapped = session.execute(
                update(ChangeRequest)
                .where(ChangeRequest.id == request_id, ChangeRequest.state == seen)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if swapped.rowcount != 1:  # type: ignore[attr-defined]
                raise Conflict(
                    f"change request #{request_id} changed concurrently; reload it",
                    about=Subject(request_id=request_id),
                )
            state = values.get("state", seen)
            append_event(
                session,
                kind="change_request",
                name=f"{request.kind}/{request.name}"[:128],
                action=action,
                actor=actor,
                team=team,
                version=request.to_version,
                note=f"change request #{request_id} ({request.kind} {request.name}: {request.label} "
                f"{_v(request.from_version)} -> v{request.to_version}): {note}; now {state}",
                digest=request_digest(session, request_id),
                ref=request_ref(request_id),
            )
            session.flush()
            session.expire(request)  # the swap bypassed the loaded object: read the new row, still uncommitted
            if after is not None:
                after(session, request, team)
            return self._detail_in(session, request, viewer)

    def submit(self, request_id: int, *, actor: Actor | str, access: Access | None = None) -> dict[str, Any]:
        """A draft goes to review (its author, or an admin)."""
        return self._by_author(
            request_id, actor, access, "submits", ("draft",), "cr_submitted", "submitted for review", "in_review"
        )

    def _by_author(
        self,
        request_id: int,
        actor: Actor | str,
        access: Access | None,
        verb: str,
        allowed: tuple[str, ...],
        action: str,
        note: str,
        state: str,
    ) -> dict[str, Any]:
        """A step only the request's author (or an admin) takes: from an ``allowed`` state to ``state``."""
        who = as_actor(actor)

        def authorize(request: ChangeRequest, team: str | None) -> None:
            if who.key != request.author_key and not _admin(access, team):
                raise Forbidden(f"change request #{request_id}: only its author (or an admin) {verb} it")

        _partial, diff, report = self._prepare(request_id, access=access, viewer=who, authorize=authorize)
        detail = self._transition(
            request_id,
            access=access,
            actor=who,
            viewer=who,
            allowed=allowed,
            action=action,
            note=note,
            authorize=authorize,
            change=lambda _s, _r: {"state": state},
        )
        return self._finish(detail, diff, report)

    def _review(
        self,
        request_id: int,
        verdict: str,
        *,
        actor: Actor | str,
        access: Access | None,
        comment: str | None,
        override_checks: bool = False,
    ) -> dict[str, Any]:
        who = as_actor(actor)
        if override_checks:
            comment = check_reason(comment, "overriding failing checks", self.limits)
        elif verdict == "reject":
            comment = check_reason(comment, "a rejection", self.limits)
        else:
            comment = (comment or "").strip() or None
            if comment is not None and len(comment) > self.limits.change_note_chars:
                check_reason(comment, "a comment", self.limits)  # raises with the limit's name

        def authorize(request: ChangeRequest, team: str | None) -> None:
            check_may(access, "reviewer", team, f"change request #{request_id}")
            if who.key == request.author_key:
                raise Forbidden(
                    f"you opened change request #{request_id}: its author cannot {verdict} it; "
                    "another reviewer must (withdraw it instead to drop it)"
                    if verdict == "reject"
                    else f"you opened change request #{request_id}: its author cannot approve it; another reviewer must"
                )

        def done(request: ChangeRequest) -> str | None:
            """This reviewer's standing verdict is already this one (a second click, a retry)."""
            latest = _latest_of(request, who.key)
            if latest is None or latest.verdict != verdict:
                return None
            if verdict == "approve" and override_checks and not latest.override_checks:
                return None  # an approval that now overrides the checks says something new
            if verdict == "reject" and (latest.comment or "") != (comment or ""):
                return None  # a new reason
            past = "approved" if verdict == "approve" else "rejected"
            return f"you already {past} change request #{request_id}; nothing changed"

        def checked(request: ChangeRequest, team: str | None) -> None:
            authorize(request, team)
            if done(request) is None and request.state not in REVIEWABLE:
                raise Conflict(
                    f"change request #{request_id} is {request.state}; only requests in review take verdicts"
                    + (" (submit it first)" if request.state == "draft" else ""),
                    about=Subject(request_id=request_id),
                )

        # Authorise before the (possibly slow) checks; then run them outside the write transaction.
        _partial, diff, report = self._prepare(request_id, access=access, viewer=who, authorize=checked)

        def change(session: Session, request: ChangeRequest) -> dict[str, Any]:
            latest = _latest_of(request, who.key)
            review = ChangeRequestReview(
                verdict=verdict,
                reviewer=who.name[:128],
                reviewer_key=who.key[:300],
                comment=comment,
                override_checks=override_checks,
                created_at=utcnow(),
                after_review_id=latest.id if latest is not None else 0,
            )
            request.reviews.append(review)
            session.flush()  # the unique (request, reviewer, after_review_id) refuses a racing twin here
            return {"state": derived_state(request)}

        action = "cr_approved" if verdict == "approve" else "cr_rejected"
        note = (
            "approved" + (" overriding failing checks" if override_checks else "")
            if verdict == "approve"
            else "rejected"
        )
        auto: dict[str, Any] = {}

        def after(session: Session, request: ChangeRequest, team: str | None) -> None:
            if verdict == "approve":
                self._publish_when_approved(session, request, team, who=who, report=report, auto=auto)

        for attempt in (1, 2):
            try:
                detail = self._transition(
                    request_id,
                    access=access,
                    actor=who.with_reason(comment, override=override_checks) if comment else who,
                    viewer=who,
                    allowed=REVIEWABLE,
                    action=action,
                    note=note,
                    authorize=authorize,
                    change=change,
                    done=done,
                    report=report,
                    after=after,
                )
                break
            except IntegrityError:
                # The same reviewer's twin (another replica, a retry) committed first: once more,
                # now reading its row, answers "already" (or records a verdict that differs).
                if attempt == 2:
                    raise Conflict(
                        f"change request #{request_id} changed concurrently; reload it",
                        about=Subject(request_id=request_id),
                    ) from None
        self.catalog.committed(auto.get("change"))
        return self._finish(detail, diff, report)

    def approve(
        self,
        request_id: int,
        *,
        actor: Actor | str,
        access: Access | None = None,
        comment: str | None = None,
        override_checks: bool = False,
    ) -> dict[str, Any]:
        """A reviewer (not the author) approves; ``override_checks`` (with ``comment`` as the
        reason) lets the request be published although its checks fail. Approving again (a second
        click, a retry) changes nothing and says so (``notice``): one approval per reviewer."""
        return self._review(
            request_id, "approve", actor=actor, access=access, comment=comment, override_checks=override_checks
        )

    def reject(
        self, request_id: int, *, actor: Actor | str, access: Access | None = None, comment: str | None = None
    ) -> dict[str, Any]:
        """A reviewer (not the author) rejects, saying why; it stands until they approve."""
        return self._review(request_id, "reject", actor=actor, access=access, comment=comment)

    def withdraw(self, request_id: int, *, actor: Actor | str, access: Access | None = None) -> dict[str, Any]:
        """The author (or an admin) drops an open request."""
        return self._by_author(
            request_id, actor, access, "withdraws", OPEN_STATES, "cr_withdrawn", "withdrawn", "withdrawn"
        )

    def _move_in(
        self, session: Session, request: ChangeRequest, mover: Actor, note: str
    ) -> tuple[int | None, str | None]:
        """Point the request's label at its version under the entry's lock: (the change id, None);
        or (None, why not) when the label moved since the request was opened (nothing written)."""
        repo = EntryRepository(session, self.limits)
        entry = repo.require(request.kind, request.name, lock=True)
        current = next((lb.version for lb in entry.labels if lb.name == request.label), None)
        if current != request.from_version:
            return None, _stale_reason(request.label, request.from_version, current)
        target = repo.version(entry, request.to_version)
        return repo.move_label(entry, request.label, target, actor=mover, note=note), None

    def _publish_when_approved(
        self,
        session: Session,
        request: ChangeRequest,
        team: str | None,
        *,
        who: Actor,
        report: CheckReport,
        auto: dict[str, Any],
    ) -> None:
        """The author chose "publish when approved" and ``who``'s approval made the request
        approved: publish it here, in the approval's transaction, exactly as ``publish`` would
        (approvals, fresh checks or a reviewer's override, the label not moved since), audited as a
        ``cr_published`` event that says it was automatic and on whose approval. Refused by one of
        those, nothing more is written: the request stays approved and ``auto["refused"]`` says why
        (the request's page says it too: ``auto_publish_refused``)."""
        if request.state != "approved" or not request.publish_when_approved:
            return
        refusal = _publish_refusal(request, report)
        change_id = None
        if refusal is None:
            note = f"change request #{request.id}, published when approved"
            change_id, refusal = self._move_in(session, request, who, note)
        if refusal is not None:
            auto["refused"] = refusal
            return
        now = utcnow()
        swapped = session.execute(
            update(ChangeRequest)
            .where(ChangeRequest.id == request.id, ChangeRequest.state == "approved")
            .values(state="published", published_at=now, published_by=who.name[:128], updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if swapped.rowcount != 1:  # type: ignore[attr-defined]
            raise Conflict(
                f"change request #{request.id} changed concurrently; reload it", about=Subject(request_id=request.id)
            )
        append_event(
            session,
            kind="change_request",
            name=f"{request.kind}/{request.name}"[:128],
            action="cr_published",
            actor=who,
            team=team,
            version=request.to_version,
            note=f"change request #{request.id} ({request.kind} {request.name}: {request.label} "
            f"{_v(request.from_version)} -> v{request.to_version}): published automatically on the approval of "
            f"{who.name} (publish when approved, chosen by its author {request.author}); now published",
            digest=request_digest(session, request.id),
            ref=request_ref(request.id),
        )
        session.flush()
        session.expire(request)
        auto["change"] = change_id

    def publish(
        self,
        request_id: int,
        *,
        actor: Actor | str,
        access: Access | None = None,
        override_reason: str | None = None,
    ) -> dict[str, Any]:
        """Move the label: an approved request whose checks pass (or were overridden by a
        reviewer), while the label still points at ``from_version``. With ``override_reason`` an
        admin publishes any open request at once (an emergency), skipping approvals and checks.
        Publishing a published request (a retry whose first answer was lost) changes nothing and
        says so (``notice``)."""
        who = as_actor(actor)
        emergency = override_reason is not None
        if emergency:
            reason = check_reason(override_reason, "an emergency publication", self.limits)
            mover = who.with_reason(reason, override=True)
        else:
            mover = who

        def authorize(request: ChangeRequest, team: str | None) -> None:
            check_may(access, "editor", team, f"change request #{request_id}")
            if emergency and not _admin(access, team):
                raise Forbidden(
                    f"change request #{request_id}: an emergency publication (override_reason) needs an admin"
                )

        def done(request: ChangeRequest) -> str | None:
            if request.state != "published":
                return None
            when = f" at {_iso(request.published_at)}" if request.published_at is not None else ""
            return (
                f"change request #{request_id} was already published (by {request.published_by or 'someone'}{when}); "
                "nothing changed"
            )

        _partial, diff, report = self._prepare(request_id, access=access, viewer=who, authorize=authorize)
        published: dict[str, int | None] = {}

        def change(session: Session, request: ChangeRequest) -> dict[str, Any]:
            refusal = None if emergency else _publish_refusal(request, report)
            if refusal is not None:
                raise Conflict(refusal, about=Subject(request_id=request_id))
            published["change"], stale = self._move_in(session, request, mover, f"change request #{request_id}")
            if stale is not None:
                about = Subject(kind=request.kind, name=request.name, label=request.label, request_id=request_id)
                raise Conflict(stale, about=about)
            now = utcnow()
            return {"state": "published", "published_at": now, "published_by": who.name[:128], "updated_at": now}

        detail = self._transition(
            request_id,
            access=access,
            actor=mover,
            viewer=who,
            allowed=OPEN_STATES if emergency else ("approved",),
            action="cr_published",
            note="published as an emergency override" if emergency else "published",
            authorize=authorize,
            change=change,
            done=done,
            report=None if emergency else report,
        )
        self.catalog.committed(published.get("change"))
        return self._finish(detail, diff, report)


def waiting_terms(access: Access, reviewer_key: str) -> list[ColumnElement[bool]] | None:
    """What makes a request wait for this reviewer: in review, not theirs (``author_key``), of a
    team they review (or global, when they review global entries; admins review every team), and
    no verdict of theirs yet. None when they may review nothing. Served by the ``(state, id)``
    index (the in-review requests) and the reviews' ``(request_id, reviewer_key, ...)`` one."""
    key = reviewer_key[:300]
    teams = access.visible_teams  # None: every team (an admin)
    scope: ColumnElement[bool] | None = None
    if teams is not None:
        reviewed_teams = sorted(team for team in teams if access.may("reviewer", team))
        parts = [ChangeRequest.team.in_(reviewed_teams)] if reviewed_teams else []
        if access.may("reviewer", None):
            parts.append(ChangeRequest.team.is_(None))
        if not parts:
            return None
        scope = or_(*parts)
    elif not access.may("reviewer", None):
        return None
    verdict_given = exists().where(
        ChangeRequestReview.request_id == ChangeRequest.id,
        ChangeRequestReview.reviewer_key == key,
        ChangeRequestReview.verdict.in_(("approve", "reject")),
    )
    terms = [ChangeRequest.state == "in_review", ChangeRequest.author_key != key, ~verdict_given]
    if scope is not None:
        terms.append(scope)
    return terms


def _stale_reason(label: str, from_version: int | None, current: int | None) -> str:
    return (
        f"{label} moved since this request was opened (from {_v(from_version)} to {_v(current)}); "
        "open a new change request"
    )


def _checks_reason(request_id: int, report: CheckReport) -> str:
    failing = "; ".join(item.title for item in report.items if item.status == "fail")
    return (
        f"change request #{request_id}: pre-publish checks fail ({failing}); a reviewer must approve "
        "with override_checks and a reason to publish it anyway"
    )


def _publish_refusal(request: ChangeRequest, report: CheckReport) -> str | None:
    """Why ``request`` may not be published by its approvals now (a rejection stands, approvals
    are missing, the checks fail without a reviewer's override); None: it may."""
    approvals, rejections = standing(request)
    if rejections:
        return f"change request #{request.id} has a standing rejection; it cannot be published"
    if len(approvals) < request.approvals_required:
        return (
            f"change request #{request.id} needs {request.approvals_required} approval(s) from reviewers "
            f"other than its author; it has {len(approvals)}"
        )
    if report.failed and checks_override(request) is None:
        return _checks_reason(request.id, report)
    return None


def _latest_of(request: ChangeRequest, reviewer_key: str) -> ChangeRequestReview | None:
    """This reviewer's newest review of ``request`` (any verdict), if any."""
    mine = [review for review in request.reviews if review.reviewer_key == reviewer_key[:300]]
    return max(mine, key=lambda review: review.id) if mine else None


def _admin(access: Access | None, team: str | None) -> bool:
    return access is None or access.may("admin", team)
