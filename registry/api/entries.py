"""``/api/v1/{prompts,resources,tools}``: one router shape for the three kinds of entry."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response
from pydantic import BaseModel, Field

from registry.api.auth import EditorPrincipal, ViewerPrincipal
from registry.catalog.errors import Invalid
from registry.catalog.service import CatalogService, EntryView

_META_KEYS = ("change_note", "labels")

ENTRY_BODY = Body(
    ...,
    description=(
        "The entry's definition (see the README for each kind's fields), plus optional `change_note` (string) "
        "and `labels` (list of label names the new version gets; default: `production`)."
    ),
)


class LabelMove(BaseModel):
    version: int = Field(ge=1)


class RenderRequest(BaseModel):
    arguments: dict[str, Any] = Field(default_factory=dict)
    version: int | None = Field(default=None, ge=1)
    label: str | None = None


def _catalog(request: Request) -> CatalogService:
    catalog: CatalogService = request.app.state.registry.catalog
    return catalog


def _split_meta(body: dict[str, Any]) -> tuple[dict[str, Any], str | None, list[str] | None]:
    spec = {k: v for k, v in body.items() if k not in _META_KEYS}
    note = body.get("change_note")
    labels = body.get("labels")
    if note is not None and not isinstance(note, str):
        raise Invalid("change_note must be a string")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
        raise Invalid("labels must be a list of label names")
    return spec, note, labels


def _entry_response(view: EntryView, response: Response) -> dict[str, Any]:
    response.headers["ETag"] = view.etag
    return view.as_dict()


def entry_router(collection: str, kind: str) -> APIRouter:
    router = APIRouter(prefix=f"/{collection}", tags=[collection])

    @router.get("", summary=f"List {collection}")
    def list_entries(
        request: Request,
        _p: ViewerPrincipal,
        tag: str | None = None,
        q: Annotated[str | None, Query(description="text search in name, title and description")] = None,
        archived: Annotated[bool, Query(description="list archived entries instead")] = False,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> dict[str, Any]:
        page = _catalog(request).list_entries(kind, tag=tag, q=q, archived=archived, limit=limit, offset=offset)
        return {"items": page.items, "total": page.total, "limit": page.limit, "offset": page.offset}

    @router.post("", status_code=201, summary=f"Create a {kind}")
    def create_entry(
        request: Request,
        response: Response,
        principal: EditorPrincipal,
        body: Annotated[dict[str, Any], ENTRY_BODY],
    ) -> dict[str, Any]:
        spec, note, labels = _split_meta(body)
        result = _catalog(request).create(kind, spec, actor=principal.name, note=note, labels=labels)
        response.headers["Location"] = f"{request.url.path.rstrip('/')}/{result.view.name}"
        return _entry_response(result.view, response)

    @router.get("/{name}", summary=f"Get a {kind} (its newest version and labels)")
    def get_entry(request: Request, response: Response, name: str, _p: ViewerPrincipal) -> dict[str, Any]:
        return _entry_response(_catalog(request).get(kind, name), response)

    @router.put("/{name}", summary=f"Save a new version of a {kind}")
    def update_entry(
        request: Request,
        response: Response,
        name: str,
        principal: EditorPrincipal,
        body: Annotated[dict[str, Any], ENTRY_BODY],
        if_match: Annotated[str | None, Header(description="the ETag you read; 412 if stale")] = None,
    ) -> dict[str, Any]:
        spec, note, labels = _split_meta(body)
        result = _catalog(request).update(
            kind, name, spec, actor=principal.name, if_match=if_match, note=note, labels=labels
        )
        return _entry_response(result.view, response)

    @router.delete("/{name}", summary=f"Archive a {kind} (hidden from agents, history kept)")
    def archive_entry(request: Request, response: Response, name: str, principal: EditorPrincipal) -> dict[str, Any]:
        return _entry_response(_catalog(request).set_archived(kind, name, True, actor=principal.name).view, response)

    @router.post("/{name}/restore", summary=f"Restore an archived {kind}")
    def restore_entry(request: Request, response: Response, name: str, principal: EditorPrincipal) -> dict[str, Any]:
        return _entry_response(_catalog(request).set_archived(kind, name, False, actor=principal.name).view, response)

    @router.get("/{name}/versions", summary="List versions, newest first")
    def list_versions(request: Request, name: str, _p: ViewerPrincipal) -> dict[str, Any]:
        return {"items": _catalog(request).versions(kind, name)}

    @router.get("/{name}/versions/{number}", summary="Get one version")
    def get_version(request: Request, name: str, number: int, _p: ViewerPrincipal) -> dict[str, Any]:
        return _catalog(request).get(kind, name, version=number).as_dict()

    @router.get("/{name}/diff", summary="Unified diff between two versions")
    def diff_versions(
        request: Request,
        name: str,
        _p: ViewerPrincipal,
        from_: Annotated[int, Query(alias="from", ge=1)],
        to: Annotated[int, Query(ge=1)],
    ) -> dict[str, Any]:
        return _catalog(request).diff(kind, name, from_, to)

    @router.put("/{name}/labels/{label}", summary="Point a label at a version (rollback = move it back)")
    def move_label(
        request: Request,
        response: Response,
        name: str,
        label: str,
        move: LabelMove,
        principal: EditorPrincipal,
    ) -> dict[str, Any]:
        view = _catalog(request).set_label(kind, name, label, move.version, actor=principal.name).view
        return _entry_response(view, response)

    @router.delete("/{name}/labels/{label}", summary="Remove a label")
    def delete_label(
        request: Request, response: Response, name: str, label: str, principal: EditorPrincipal
    ) -> dict[str, Any]:
        return _entry_response(_catalog(request).delete_label(kind, name, label, actor=principal.name).view, response)

    if kind == "prompt":

        @router.post("/{name}/render", summary="Preview a prompt as agents would receive it")
        def render_prompt(request: Request, name: str, body: RenderRequest, _p: ViewerPrincipal) -> dict[str, Any]:
            return _catalog(request).render_prompt(name, body.arguments, version=body.version, label=body.label)

    return router
