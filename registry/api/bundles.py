"""``/api/v1/bundles``: the catalog as code, for ``mcp-registry plan`` / ``push`` / ``pull`` in CI.

- ``POST /bundles/plan`` (viewer; one who sees every team's entries): what importing a bundle would
  do, per entry, with diffs.
- ``POST /bundles/apply`` (admin, as the web UI's import): import it in one transaction, all or
  nothing; protected labels stay where they are and a change request is opened for each.
- ``GET /bundles/export`` (viewer, as the web UI's download): the catalog as a bundle's files, those
  entries the caller sees (global ones and its teams'; every entry for an admin).
- ``GET /bundles/schema.json`` (viewer): the JSON Schema of an entry file (``registry.catalog.bundle_schema``),
  which ``mcp-registry pull`` writes beside the files for editors; a JSON Schema, not an API shape,
  so left out of ``/openapi.json``.

A bundle is a JSON document of files (``registry.api.bundle_models``); it is zipped here and planned,
applied and exported by ``ZipBundles``, the web UI's own path: one import path, one set of bounds
(``REGISTRY_LIMIT_BUNDLE_BYTES`` for the request, ``REGISTRY_LIMIT_BUNDLE_FILES``, and per file
``REGISTRY_LIMIT_BODY_BYTES``). The request guard (``registry/api/guard.py``) counts these bodies
against the bundle limit instead of the body limit (``BUNDLE_PATHS``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.bundle_models import BundleApplied, BundleApply, BundleExport, BundlePlan, BundleUpload
from registry.api.deps import RegistryDep, TeamsDep
from registry.api.problems import ALWAYS, WITH_BODY, documented
from registry.catalog.bundle_archive import ZipPlan, zip_of
from registry.catalog.bundle_schema import bundle_schema
from registry.catalog.bundles import ImportPlanItem
from registry.catalog.errors import Invalid
from registry.catalog.specs import LABEL_PATTERN

PREFIX = "/bundles"
#: The paths whose bodies are bundles (bounded by ``bundle_bytes``, not ``body_bytes``).
BUNDLE_PATHS = frozenset({f"/api/v1{PREFIX}/plan", f"/api/v1{PREFIX}/apply"})
#: Where the web UI shows a change request (``registry/ui/reviews.py``) and where the API has it.
UI_REVIEW_PATH = "/ui/reviews/{id}"
API_REVIEW_PATH = "/api/v1/change-requests/{id}"
#: What a bundle pushed through the API is called in change notes and change requests.
SOURCE = "the admin API (mcp-registry push)"

router = APIRouter(prefix=PREFIX, tags=["bundles"])


def bundle_path(path: str) -> bool:
    """For the request guard: whether ``path`` takes a bundle."""
    return path in BUNDLE_PATHS


def _zipped(files: dict[str, str]) -> bytes:
    if not files:
        raise Invalid("the bundle has no files: send its prompts/, resources/ and tools/ YAML files")
    return zip_of({path: text.encode("utf-8") for path, text in files.items()})


def _plan_body(plan: ZipPlan) -> dict[str, Any]:
    return {
        "fingerprint": plan.fingerprint,
        "summary": plan.summary(),
        "changes": plan.writes,
        "reviews": plan.reviews,
        "counts": plan.counts,
        "items": [
            {
                "kind": row.kind,
                "name": row.name,
                "action": row.action,
                "source": row.source,
                "live": list(row.live),
                "review": list(row.review),
                "diff": row.diff,
            }
            for row in plan.rows
        ],
    }


def _links(items: list[ImportPlanItem]) -> list[dict[str, Any]]:
    return [
        {
            "id": number,
            "kind": item.kind,
            "name": item.name,
            "url": UI_REVIEW_PATH.format(id=number),
            "api": API_REVIEW_PATH.format(id=number),
        }
        for item in items
        for number in item.change_requests
    ]


@router.post(
    "/plan",
    summary="Plan a bundle against the catalog: per entry the action, the labels that go live or to review, "
    "and a diff (writes nothing)",
    operation_id="planBundle",
    response_model=BundlePlan,
    responses=documented(*ALWAYS, *WITH_BODY, 409),
)
def plan_bundle(
    registry: RegistryDep, teams: TeamsDep, body: BundleUpload, principal: ViewerPrincipal
) -> dict[str, Any]:
    teams.check_sees_every_team(principal, "A bundle plan")
    return _plan_body(registry.zip_bundles.plan(_zipped(body.files)))


@router.post(
    "/apply",
    summary="Import a bundle in one transaction (all or nothing); protected labels get change requests",
    operation_id="applyBundle",
    response_model=BundleApplied,
    responses=documented(*ALWAYS, *WITH_BODY, 409),
)
def apply_bundle(registry: RegistryDep, body: BundleApply, principal: AdminPrincipal) -> dict[str, Any]:
    plan, items = registry.zip_bundles.apply_items(
        _zipped(body.files),
        fingerprint=body.fingerprint,
        # The whole actor (token, user): a change request the import opens is its author's.
        actor=principal.actor(),
        source=SOURCE,
    )
    return {**_plan_body(plan), "change_requests": _links(items)}


@router.get(
    "/export",
    summary="The catalog as a bundle's files: newest versions, a label's, or every version",
    operation_id="exportBundle",
    response_model=BundleExport,
    responses=documented(*ALWAYS, 422),
)
def export_bundle(
    registry: RegistryDep,
    teams: TeamsDep,
    principal: ViewerPrincipal,
    label: Annotated[
        str | None,
        Query(max_length=64, pattern=LABEL_PATTERN, description="the version this label serves (else the newest)"),
    ] = None,
    all_versions: Annotated[
        bool, Query(description="every version, the labels and archived entries (a history bundle)")
    ] = False,
) -> dict[str, Any]:
    if label is not None and all_versions:
        raise Invalid("label and all_versions exclude each other: a history export holds every label")
    entries, files = registry.zip_bundles.export_files(
        label=label, all_versions=all_versions, visible=principal.visible_teams
    )
    return {
        "entries": entries,
        "layout": "history" if all_versions else "entries",
        "complete": teams.sees_every_team(principal),
        "files": {path: content.decode("utf-8") for path, content in files.items()},
    }


@router.get("/schema.json", include_in_schema=False)
def schema(_principal: ViewerPrincipal) -> dict[str, Any]:
    return bundle_schema()
