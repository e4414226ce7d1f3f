"""``/ui/bundles``: download the catalog as a zipped bundle (viewer), upload one, see its import
plan and apply it (admin).

The same service layer as ``mcp-registry import`` / ``export`` (``registry.catalog.bundles`` via
``registry.catalog.bundle_archive``). The flow:

1. ``POST /ui/bundles`` (a zip, at most ``REGISTRY_LIMIT_BUNDLE_BYTES``): unpacked and planned; a
   bad zip, a limit or any invalid file is shown on the page and nothing is kept. A valid upload
   is held server-side (``registry.catalog.uploads``: in the database, for this UI session, 30 minutes)
   and the browser is sent to its plan.
2. ``GET /ui/bundles/plan/{id}``: the plan (per kind, what would be created, updated, left
   unchanged; a diff per update; per entry the labels that go live and the protected ones that go
   to review), with an "Apply" button carrying the plan's fingerprint.
3. ``POST /ui/bundles/plan/{id}/apply``: the held bundle is planned again; if that plan is not
   the one shown (the catalog changed meanwhile) nothing is written and the new plan is shown
   with a notice, else it is written in one transaction (all or nothing) and the upload dropped.
   Protected labels are not moved: the same transaction opens a change request per entry and label.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.responses import RedirectResponse, Response, StreamingResponse

from registry.api.deps import RegistryDep
from registry.catalog.bundle_archive import PlanChanged, ZipPlan
from registry.catalog.errors import CatalogError
from registry.catalog.specs import LABEL_PATTERN
from registry.catalog.uploads import TTL, Upload
from registry.catalog.web_sessions import SignedIn
from registry.limits import LimitExceeded
from registry.ui.auth import Admin, AdminForm, AdminUpload, Viewer
from registry.ui.views import View

#: Where the upload form posts (within the UI app; ``UiGuard`` lets its body be bundle-sized).
UPLOAD_PATH = "/bundles"
#: The upload form's file field.
FILE_FIELD = "bundle"
#: Bytes per chunk of the export download.
EXPORT_CHUNK = 64 * 1024
#: Plan rows listed (entries that would change first); the counts cover them all.
ROWS_SHOWN = 1000
UploadId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
_LABEL = re.compile(LABEL_PATTERN)
_ACTION_ORDER = {"conflict": 0, "create": 1, "restore": 1, "update": 2, "skip-archived": 3, "kept": 4, "unchanged": 5}


def _plan_context(plan: ZipPlan) -> dict[str, Any]:
    rows = sorted(plan.rows, key=lambda r: (_ACTION_ORDER.get(r.action, 9), r.kind, r.name))
    actions = sorted({a for per_kind in plan.counts.values() for a in per_kind}, key=lambda a: _ACTION_ORDER.get(a, 9))
    return {
        "plan": plan,
        "rows": rows[:ROWS_SHOWN],
        "rows_hidden": max(0, len(rows) - ROWS_SHOWN),
        "actions": actions,
    }


@dataclass
class BundlePages(View):
    """The bundle pages; ``registry`` for its settings, catalog, protection and held uploads."""

    registry: RegistryDep

    def bundles_page(
        self, *, error: str | None = None, details: list[str] | None = None, status: int = 200, refusal: bool = True
    ) -> Response:
        registry = self.registry
        limits = registry.settings.limits
        context = {
            "title": "Bundles",
            "nav": "bundles",
            "error": error,
            "details": details or [],
            "refusal": refusal,
            "labels": registry.settings.agent_selectable_labels,
            "protected_labels": sorted(registry.protection.names_hint()),
            "bundle_mib": limits.bundle_bytes / (1024 * 1024),
            "bundle_files": limits.bundle_files,
        }
        return self.render("bundles.html", context, status=status)

    def plan_page(
        self, upload: Upload, plan: ZipPlan, *, notice: str | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        context = {
            "title": f"Import plan: {upload.filename}",
            "nav": "bundles",
            "upload": upload,
            "notice": notice,
            "error": error,
            "ttl_minutes": int(TTL.total_seconds() // 60),
            **_plan_context(plan),
        }
        return self.render("bundles_plan.html", context, status=status)

    def gone_page(self) -> Response:
        return self.bundles_page(
            error="This upload is no longer held: it was applied or discarded, replaced by a newer upload, or is "
            f"older than {int(TTL.total_seconds() // 60)} minutes. Upload the bundle again.",
            status=404,
            refusal=False,
        )

    def refused(self, exc: CatalogError) -> Response:
        lines = [line.strip() for line in exc.detail.splitlines() if line.strip()]
        status = 413 if "REGISTRY_LIMIT_BUNDLE_BYTES" in exc.detail else exc.status
        return self.bundles_page(error=lines[0] if lines else exc.detail, details=lines[1:], status=status)

    def refused_apply(self, ui: SignedIn, held: Upload, exc: CatalogError) -> Response:
        """The write was refused as a whole: the plan as it is now, with the reason."""
        try:
            plan = self.registry.zip_bundles.plan(held.content)
        except CatalogError as again:
            self.registry.uploads.discard(ui, held.id)
            return self.refused(again)
        return self.plan_page(held, plan, error=exc.detail, status=exc.status)


BundlePagesDep = Annotated[BundlePages, Depends()]
router = APIRouter(prefix=UPLOAD_PATH)


@router.get("")
def bundles(ui: Viewer, pages: BundlePagesDep) -> Response:
    return pages.bundles_page()


@router.get("/export.zip")
def export(ui: Viewer, pages: BundlePagesDep, label: Annotated[str, Query(max_length=64)] = "") -> Response:
    label = label.strip()
    if label and not _LABEL.match(label):
        return pages.bundles_page(error=f"{label!r} is not a label name.", status=400)
    # An unnamed temporary file (gone from the disk already): nothing is left behind, however
    # the download ends; the zip never sits in memory whole.
    sink = tempfile.TemporaryFile(prefix="mcpr-export-")  # noqa: SIM115 - closed when the download ends
    try:
        # What this person sees, never another team's entries (docs/security.md).
        pages.registry.zip_bundles.export(sink, label=label or None, visible=ui.principal.visible_teams)
        size = sink.tell()
        sink.seek(0)
    except BaseException:
        sink.close()
        raise

    def chunks() -> Iterator[bytes]:
        try:
            while block := sink.read(EXPORT_CHUNK):
                yield block
        finally:
            sink.close()

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M")
    filename = f"mcp-registry-{label or 'latest'}-{stamp}.zip"
    headers = {
        "Content-Disposition": f'attachment; filename="{filename}"',
        "Content-Length": str(size),
        "Cache-Control": "no-store",
    }
    return StreamingResponse(chunks(), media_type="application/zip", headers=headers)


@router.post("")
async def upload(form: AdminUpload, pages: BundlePagesDep) -> Response:
    ui, fields = form
    sent = fields.get(FILE_FIELD)
    if not isinstance(sent, UploadFile) or not (sent.filename or "").strip():
        return await run_in_threadpool(
            lambda: pages.bundles_page(error="Choose a bundle (.zip) to upload.", status=422)
        )
    limit = pages.registry.settings.limits.bundle_bytes
    content = await sent.read(limit + 1)
    if len(content) > limit:
        too_large = LimitExceeded("bundle_bytes", f"the upload is larger than {limit} bytes")
        return await run_in_threadpool(lambda: pages.bundles_page(error=str(too_large), status=413))
    if not content:
        return await run_in_threadpool(lambda: pages.bundles_page(error="The file is empty.", status=422))
    try:
        await run_in_threadpool(pages.registry.zip_bundles.plan, content)
    except CatalogError as exc:
        error = exc
        return await run_in_threadpool(lambda: pages.refused(error))
    upload_id = await run_in_threadpool(pages.registry.uploads.put, ui, sent.filename or "", content)
    return RedirectResponse(f"/ui/bundles/plan/{upload_id}", status_code=303)


@router.get("/plan/{upload_id}")
def show_plan(ui: Admin, pages: BundlePagesDep, upload_id: UploadId) -> Response:
    held = pages.registry.uploads.get(ui, upload_id)
    if held is None:
        return pages.gone_page()
    try:
        plan = pages.registry.zip_bundles.plan(held.content)
    except CatalogError as exc:  # the catalog changed since the upload (a URI taken, say)
        pages.registry.uploads.discard(ui, upload_id)
        return pages.refused(exc)
    return pages.plan_page(held, plan)


@router.post("/plan/{upload_id}/apply")
def apply(form: AdminForm, pages: BundlePagesDep, upload_id: UploadId) -> Response:
    ui, fields = form
    fingerprint = fields.get("fingerprint")
    held = pages.registry.uploads.get(ui, upload_id)
    if held is None:
        return pages.gone_page()
    try:
        plan, opened = pages.registry.zip_bundles.apply(
            held.content,
            fingerprint=fingerprint if isinstance(fingerprint, str) else "",
            # The whole actor (token, user): a change request the import opens is its author's,
            # who may then not approve it.
            actor=ui.principal.actor(),
            source=f"{held.filename} (web UI)",
        )
    except PlanChanged as changed:
        return pages.plan_page(held, changed.plan, notice=changed.detail, status=409)
    except CatalogError as exc:  # refused as a whole (a history conflict, a concurrent edit)
        return pages.refused_apply(ui, held, exc)
    pages.registry.uploads.discard(ui, upload_id)
    message = f"Imported {held.filename}: {plan.summary()}."
    if opened:
        shown = ", ".join(f"#{number}" for number in opened[:10]) + (" …" if len(opened) > 10 else "")
        labels = ", ".join(plan.review_labels)
        message += (
            f" {labels} is protected: {len(opened)} change request{'s' if len(opened) != 1 else ''} "
            f"({shown}) wait for review under Reviews."
        )
    return pages.redirect("/ui/bundles", message)


@router.post("/plan/{upload_id}/discard")
def discard(form: AdminForm, pages: BundlePagesDep, upload_id: UploadId) -> Response:
    ui, _fields = form
    pages.registry.uploads.discard(ui, upload_id)
    return pages.redirect("/ui/bundles", "The upload was discarded; nothing was imported.")
