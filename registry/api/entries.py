"""``/api/v1/{prompts,resources,tools}``: one set of handlers for the three kinds of entry.

Routes stay thin: the catalog service validates, writes and answers; this module maps HTTP onto
it (bodies, ``If-Match``, ``ETag``) and declares the contract (named models, bounds, problems).
Each kind's router adds the same handlers (``registry.api.kinds``); bodies are read as JSON objects
and published as the kind's named schemas by ``registry.api.openapi``.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from registry.api import models
from registry.api.auth import ViewerPrincipal
from registry.api.deps import CatalogDep, EventsDep, SettingsDep
from registry.api.kinds import EntryName, KindDep, kind_router
from registry.api.openapi import BODY_MODELS, KINDS
from registry.api.problems import ALWAYS, WITH_BODY, InvalidParameter, documented
from registry.catalog.errors import Invalid
from registry.catalog.preconditions import parse_if_match
from registry.catalog.protection import ReviewAsk
from registry.catalog.specs import KIND_BY_COLLECTION, LABEL_PATTERN, TAG_PATTERN
from registry.catalog.teams import GLOBAL_ONLY, TEAM_PATTERN
from registry.catalog.tool_calls import resolve_tool_test
from registry.catalog.tool_calls import run_tool_test as run_tool_test_call
from registry.catalog.values import EntryView, WriteResult
from registry.limits import LimitExceeded, env_name
from registry.tokens import Principal
from registry.webhooks import caller_key, parse_networks

_META_KEYS = ("change_note", "labels", "request_review", "change_request")
#: Longest ``If-Match`` accepted: a list of some 80 version tags.
IF_MATCH_CHARS = 1024
#: The ``If-Match`` grammar (RFC 9110: ``*`` or a list of entity tags), published in the schema; the
#: catalog service parses it (registry/catalog/preconditions.py) and answers 400 for anything else.
_ETAG = r'(W/)?"[!#-~\x80-\xff]*"'
IF_MATCH_PATTERN = rf"^[ \t]*\*[ \t]*$|^[ \t,]*{_ETAG}([ \t]*,[ \t,]*{_ETAG})*[ \t]*(,[ \t,]*)?$"

ENTRY_MODELS: dict[str, type[BaseModel]] = {
    "prompt": models.PromptEntry,
    "resource": models.ResourceEntry,
    "tool": models.ToolEntry,
}
PAGE_MODELS: dict[str, type[BaseModel]] = {
    "prompt": models.PromptPage,
    "resource": models.ResourcePage,
    "tool": models.ToolPage,
}

# Label names are checked by the service (its message says what a label may be); the schema says it too.
LabelPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="a label name: 1-64 of [a-z0-9_.-], starting with a letter or digit; not `latest`",
        json_schema_extra={"pattern": LABEL_PATTERN, "not": {"const": "latest"}},
        examples=["staging"],
    ),
]
VersionPath = Annotated[int, Path(ge=1, le=models.INT32_MAX, description="a version number")]
IfMatch = Annotated[
    str | None,
    Header(
        max_length=IF_MATCH_CHARS,
        json_schema_extra={"pattern": IF_MATCH_PATTERN, "minLength": 1},
        description='the ETag you read (`"v3"`; also `W/"v3"`, a comma-separated list, or `*`): the save is '
        "refused with 412 if the entry has a newer version since; a malformed value is a 400",
        examples=['"v1"'],
    ),
]

#: A restore without a body: the default change note.
_NO_NOTE = models.VersionRestore()

ETAG_HEADER = {"description": 'the newest version of the entry, as an ETag (`"v3"`)', "schema": {"type": "string"}}
ENTRY_HEADERS = {"ETag": ETAG_HEADER}
#: An entry body, read as a JSON object (the catalog service parses it) and published as the kind's
#: named schema (``PromptWrite``, ``ToolPatch``, ...) by ``registry.api.openapi``.
EntryBody = Annotated[dict[str, Any], Body()]
PatchBody = Annotated[dict[str, Any], Body(media_type="application/merge-patch+json")]


def _split_meta(body: dict[str, Any]) -> tuple[dict[str, Any], str | None, list[str] | None]:
    spec = {k: v for k, v in body.items() if k not in _META_KEYS}
    note = body.get("change_note")
    labels = body.get("labels")
    if note is not None and not isinstance(note, str):
        raise Invalid("change_note must be a string")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
        raise Invalid("labels must be a list of label names")
    return spec, note, labels


def _take_team(spec: dict[str, Any]) -> str | None:
    """A create body's ``team`` (taken out of the definition): who owns the new entry."""
    team = spec.pop("team", None)
    if team is not None and not isinstance(team, str):
        raise Invalid("team must be a team name or null")
    return team


def _refuse_team(body: dict[str, Any], kind: str, name: str) -> None:
    """A save does not move an entry between teams: that is ``PUT .../{name}/team``."""
    if "team" in body:
        raise Invalid(
            f"a save does not change the entry's team: move it with PUT /api/v1/{kind}s/{name}/team",
            errors=[{"loc": "team", "msg": "not part of a save"}],
        )


def _writer(principal: ViewerPrincipal) -> Principal:
    """Admits whoever may save somewhere: the editor scope (global entries) or the editor role in
    a team. The catalog service then checks the role on the entry's own team."""
    if principal.has("editor") or any(principal.may("editor", team) for team, _role in principal.teams):
        return principal
    raise HTTPException(
        403,
        f"this token lacks the 'editor' scope (it has: {', '.join(sorted(principal.scopes))}) "
        "and the editor role in any team",
    )


#: A route parameter: a caller that may write entries somewhere (see ``_writer``).
WriterPrincipal = Annotated[Principal, Depends(_writer)]


def _check_patch(model: type[BaseModel], kind: str, body: dict[str, Any]) -> None:
    """A merge patch must be what its schema says (known members, right types) before it is
    applied: ``{"summary": null}`` would otherwise remove nothing and be taken as an edit."""
    try:
        model.model_validate(body)
    except ValidationError as exc:
        errors = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        summary = "; ".join(f"{e['loc'] or 'patch'}: {e['msg']}" for e in errors[:5])
        raise Invalid(f"invalid {kind} patch: {summary}", errors=errors) from None


def _entry_response(view: EntryView, response: Response) -> dict[str, Any]:
    response.headers["ETag"] = view.etag
    return view.as_dict()


def _review_ask(body: dict[str, Any]) -> ReviewAsk | None:
    """A save's ``request_review`` (and ``change_request`` title/description): the change
    requests to open for protected labels it holds; None when not asked."""
    asked = body.get("request_review")
    details = body.get("change_request")
    if asked is not None and not isinstance(asked, bool):
        raise Invalid("request_review must be true or false")
    if details is not None:
        try:
            ask = models.ChangeRequestAsk.model_validate(details)
        except ValidationError as exc:
            errors = [{"loc": "change_request." + ".".join(map(str, e["loc"])), "msg": e["msg"]} for e in exc.errors()]
            raise Invalid("invalid change_request: " + errors[0]["msg"], errors=errors) from None
        if not asked:
            raise Invalid("change_request is only used with request_review: true")
        return ReviewAsk(ask.title, ask.description, ask.publish_when_approved)
    return ReviewAsk() if asked else None


def _saved_response(result: WriteResult, response: Response) -> dict[str, Any]:
    """A save's answer: the entry, plus the protected labels it held and the requests it opened."""
    return {
        **_entry_response(result.view, response),
        "held_labels": result.held,
        "change_requests": result.change_requests,
    }


_PATCH_MODELS = {KIND_BY_COLLECTION[collection]: bodies[2] for collection, bodies in BODY_MODELS.items()}
_OVERRIDE_QUERY = Query(
    min_length=1,
    max_length=2000,
    description="admins only, for a protected label: remove it without a change request (an emergency "
    "override, recorded with this reason)",
)
_TEAM_QUERY = Query(
    pattern=f"^(-|{TEAM_PATTERN})$",
    max_length=64,
    description=f"only this team's entries; `{GLOBAL_ONLY}`: only global ones (by default: every entry "
    "the token sees, global ones and its teams')",
)
_Q_QUERY = Query(
    description="text search in name, title and description (case-insensitive substring; at most "
    "REGISTRY_LIMIT_SEARCH_CHARS characters)"
)


def list_entries(
    catalog: CatalogDep,
    kind: KindDep,
    principal: ViewerPrincipal,
    tag: Annotated[
        str | None, Query(pattern=TAG_PATTERN, max_length=64, description="only entries with this tag")
    ] = None,
    q: Annotated[str | None, _Q_QUERY] = None,
    archived: Annotated[bool, Query(description="list archived entries instead")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=models.INT32_MAX)] = 0,
    team: Annotated[str | None, _TEAM_QUERY] = None,
) -> dict[str, Any]:
    cap = catalog.limits.search_chars
    if q is not None and len(q) > cap:
        refusal = LimitExceeded("search_chars", f"q has {len(q)} characters; at most {cap} are allowed")
        raise InvalidParameter(
            str(refusal), errors=[{"loc": "query.q", "msg": str(refusal), "limit": env_name(refusal.limit)}]
        )
    page = catalog.list_entries(
        kind, tag=tag, q=q, archived=archived, limit=limit, offset=offset, team=team, access=principal
    )
    return {
        "items": page.items,
        "total": page.total,
        "total_exact": page.total_exact,
        "limit": page.limit,
        "offset": page.offset,
    }


def create_entry(
    request: Request,
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    principal: WriterPrincipal,
    body: EntryBody,
) -> dict[str, Any]:
    spec, note, labels = _split_meta(body)
    team = _take_team(spec)
    result = catalog.create(kind, spec, principal.writes(note=note, labels=labels, review=_review_ask(body)), team=team)
    response.headers["Location"] = f"{request.url.path.rstrip('/')}/{result.view.name}"
    return _saved_response(result, response)


def get_entry(
    response: Response, catalog: CatalogDep, kind: KindDep, name: EntryName, principal: ViewerPrincipal
) -> dict[str, Any]:
    return _entry_response(catalog.get(kind, name, access=principal), response)


def update_entry(
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    principal: WriterPrincipal,
    body: EntryBody,
    if_match: IfMatch = None,
) -> dict[str, Any]:
    _refuse_team(body, kind, name)
    spec, note, labels = _split_meta(body)
    result = catalog.update(
        kind, name, spec, principal.writes(if_match=if_match, note=note, labels=labels, review=_review_ask(body))
    )
    return _saved_response(result, response)


def patch_entry(
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    principal: WriterPrincipal,
    body: PatchBody,
    if_match: IfMatch = None,
) -> dict[str, Any]:
    if if_match is not None:
        parse_if_match(if_match)  # a malformed header is a 400 whatever the body
    _refuse_team(body, kind, name)
    _check_patch(_PATCH_MODELS[kind], kind, body)
    patch, note, labels = _split_meta(body)
    result = catalog.patch(
        kind, name, patch, principal.writes(if_match=if_match, note=note, labels=labels, review=_review_ask(body))
    )
    return _saved_response(result, response)


def archive_entry(
    response: Response, catalog: CatalogDep, kind: KindDep, name: EntryName, principal: WriterPrincipal
) -> dict[str, Any]:
    result = catalog.set_archived(kind, name, True, principal.writes())
    return _entry_response(result.view, response)


def restore_entry(
    response: Response, catalog: CatalogDep, kind: KindDep, name: EntryName, principal: WriterPrincipal
) -> dict[str, Any]:
    result = catalog.set_archived(kind, name, False, principal.writes())
    return _entry_response(result.view, response)


def list_versions(catalog: CatalogDep, kind: KindDep, name: EntryName, principal: ViewerPrincipal) -> dict[str, Any]:
    return {"items": catalog.versions(kind, name, access=principal)}


def get_version(
    catalog: CatalogDep, kind: KindDep, name: EntryName, number: VersionPath, principal: ViewerPrincipal
) -> dict[str, Any]:
    return catalog.get(kind, name, version=number, access=principal).as_dict()


def restore_version(
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    number: VersionPath,
    principal: WriterPrincipal,
    body: Annotated[models.VersionRestore, Body()] = _NO_NOTE,
    if_match: IfMatch = None,
) -> dict[str, Any]:
    result = catalog.restore_version(kind, name, number, principal.writes(if_match=if_match, note=body.change_note))
    return _saved_response(result, response)


def diff_versions(
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    principal: ViewerPrincipal,
    from_: Annotated[int, Query(alias="from", ge=1, le=models.INT32_MAX, description="the older version")],
    to: Annotated[int, Query(ge=1, le=models.INT32_MAX, description="the newer version")],
) -> dict[str, Any]:
    return catalog.diff(kind, name, from_, to, access=principal)


def move_label(
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    label: LabelPath,
    move: models.LabelMove,
    principal: WriterPrincipal,
) -> dict[str, Any]:
    result = catalog.set_label(kind, name, label, move.version, principal.writes(override_reason=move.override_reason))
    return _entry_response(result.view, response)


def delete_label(
    response: Response,
    catalog: CatalogDep,
    kind: KindDep,
    name: EntryName,
    label: LabelPath,
    principal: WriterPrincipal,
    override_reason: Annotated[str | None, _OVERRIDE_QUERY] = None,
) -> dict[str, Any]:
    result = catalog.delete_label(kind, name, label, principal.writes(override_reason=override_reason))
    return _entry_response(result.view, response)


def render_prompt(
    catalog: CatalogDep, name: EntryName, body: models.RenderRequest, principal: ViewerPrincipal
) -> dict[str, Any]:
    return catalog.render_prompt(name, body.arguments, version=body.version, label=body.label, access=principal)


async def test_tool(
    catalog: CatalogDep,
    settings: SettingsDep,
    name: EntryName,
    body: models.ToolTestRequest,
    principal: WriterPrincipal,
    events: EventsDep,
) -> dict[str, Any]:
    """One tools/call through the shared test-call runner (registry/catalog/tool_calls.py, which
    the web UI's test page uses too), its notifications collected instead of streamed."""
    test = await run_in_threadpool(
        resolve_tool_test, catalog, name, version=body.version, label=body.label, access=principal
    )
    notifications: list[dict[str, Any]] = []

    async def collect(notification: dict[str, Any]) -> None:
        notifications.append(notification)

    allowed = parse_networks(settings.webhook_allowed_networks)
    # The outbound caps count a test call as its token's (or single-sign-on user's), as its MCP calls.
    result = await run_tool_test_call(
        test,
        body.arguments,
        allowed_networks=allowed,
        limits=catalog.limits,
        on_notification=collect,
        caller=caller_key(principal.token_id, principal.user),
        on_failed=functools.partial(events.tool_test_failed, name, test.version, actor=principal.actor()),
    )
    return {"result": result, "notifications": notifications, "version": test.version, "label": test.label}


@functools.cache
def entry_router(collection: str, kind: str) -> APIRouter:
    """``/{collection}``: the handlers above for one kind, with its models, operation ids and summaries. Built
    once per process (a router holds no app's state): FastAPI's analysis of 47 routes costs ~0.15 s per build."""
    router = kind_router(collection, prefix=f"/{collection}", tags=[collection])
    title = KINDS[collection]
    entry: dict[str, Any] = {"response_model": ENTRY_MODELS[kind], "response_model_exclude_unset": True}
    shown = {**documented(*ALWAYS, 404, 422), 200: {"headers": ENTRY_HEADERS}}
    saved = {
        **documented(*ALWAYS, *WITH_BODY, 404, 409, 412),
        200: {
            "description": "The newest version: the one just saved, or the current one when the save changed "
            "nothing (then nothing was written)",
            "headers": ENTRY_HEADERS,
        },
    }
    created = {
        "description": f"The {kind} as saved: version 1",
        "headers": {
            **ENTRY_HEADERS,
            "Location": {"description": "where the entry lives", "schema": {"type": "string"}},
        },
    }
    add = router.add_api_route
    add("", list_entries, methods=["GET"], summary=f"List {collection}", operation_id=f"list{title}s",
        response_model=PAGE_MODELS[kind], responses=documented(*ALWAYS, 422))  # fmt: skip
    add("", create_entry, methods=["POST"], status_code=201, operation_id=f"create{title}",
        summary=f"Create a {kind} (published to `production` unless `labels` say otherwise)",
        responses={**documented(*ALWAYS, *WITH_BODY, 404, 409), 201: created}, **entry)  # fmt: skip
    add("/{name}", get_entry, methods=["GET"], summary=f"Get a {kind} (its newest version and labels)",
        operation_id=f"get{title}", responses=shown, **entry)  # fmt: skip
    add("/{name}", update_entry, methods=["PUT"], operation_id=f"update{title}", responses=saved, **entry,
        summary=f"Save a new version of a {kind} (replaces the whole definition)",
        description="An unchanged definition writes nothing and answers the current version. Labels named in "
        "`labels` are pointed at the saved version (at the current one for an unchanged save).")  # fmt: skip
    add("/{name}", patch_entry, methods=["PATCH"], operation_id=f"patch{title}", responses=saved, **entry,
        summary=f"Edit part of a {kind} (JSON Merge Patch, RFC 7396)",
        description="The patch applies to the newest version as `GET` shows it (write-only values stay "
        "`********` and keep their stored values). The result is saved like a PUT: an unchanged result writes "
        "nothing. Content-Type `application/merge-patch+json` (or `application/json`).")  # fmt: skip
    add("/{name}", archive_entry, methods=["DELETE"], operation_id=f"archive{title}", responses=shown, **entry,
        summary=f"Archive a {kind} (hidden from agents, history kept; restore brings it back)")  # fmt: skip
    add("/{name}/restore", restore_entry, methods=["POST"], summary=f"Restore an archived {kind}",
        operation_id=f"restore{title}", responses=shown, **entry)  # fmt: skip
    add("/{name}/versions", list_versions, methods=["GET"], summary="List versions, newest first",
        operation_id=f"list{title}Versions", response_model=models.VersionList,
        responses=documented(*ALWAYS, 404, 422))  # fmt: skip
    add("/{name}/versions/{number}", get_version, methods=["GET"], summary="Get one version",
        operation_id=f"get{title}Version", responses=documented(*ALWAYS, 404, 422), **entry)  # fmt: skip
    add("/{name}/versions/{number}/restore", restore_version, methods=["POST"], operation_id=f"restore{title}Version",
        summary=f"Save an old version of a {kind} again, as its new version", responses=saved, **entry,
        description="The new version is a copy of version `number` (write-only values as that version stored them), "
        "with `change_note` (default `Restore vN`). Only `latest` moves to it: publish it by moving a label "
        "(a change request, for a protected one). The body may be left out. Checked like any save (an old "
        "version may fail today's checks: 422); `If-Match` as for `PUT`; restoring what the newest version already "
        "says writes nothing.")  # fmt: skip
    add("/{name}/diff", diff_versions, methods=["GET"], operation_id=f"diff{title}Versions",
        summary="Unified diff between two versions (whole definition, and per field)",
        response_model=models.Diff, responses=documented(*ALWAYS, 404, 422))  # fmt: skip
    add("/{name}/labels/{label}", move_label, methods=["PUT"], operation_id=f"move{title}Label",
        summary="Point a label at a version (promote; roll back by moving it back)",
        responses={**documented(*ALWAYS, *WITH_BODY, 404), 200: {"headers": ENTRY_HEADERS}}, **entry)  # fmt: skip
    add("/{name}/labels/{label}", delete_label, methods=["DELETE"], operation_id=f"delete{title}Label",
        summary="Remove a label (agents served it no longer see the entry)", responses=shown, **entry)  # fmt: skip
    if kind == "prompt":
        add("/{name}/render", render_prompt, methods=["POST"], operation_id="renderPrompt",
            summary="Preview a prompt as agents receive it (by default the `production` label's version)",
            response_model=models.RenderResult, response_model_exclude_unset=True,
            responses=documented(*ALWAYS, *WITH_BODY, 404))  # fmt: skip
    if kind == "tool":
        add("/{name}/test", test_tool, methods=["POST"], operation_id="testTool",
            summary="Run a tool exactly as an agent's tools/call would (by default the `production` version)",
            description="Arguments are validated against the tool's inputSchema, its webhook is called (signed, "
            "under the SSRF guard, within its timeout) and its answer checked against its outputSchema. A failing "
            "tool is a result with `isError: true`, as agents see it. The progress and log notifications the call "
            "produced come back in `notifications`.",
            response_model=models.ToolTestResult, response_model_exclude_unset=True,
            responses=documented(*ALWAYS, *WITH_BODY, 404))  # fmt: skip
    return router
