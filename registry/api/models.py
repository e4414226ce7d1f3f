"""The admin API's request and response shapes, as named pydantic models.

These are the contract ``/openapi.json`` publishes (``registry/api/openapi.py`` assembles it):
every body has a named schema with examples. Responses are validated against them on the way out.

Entry bodies (``POST``/``PUT``/``PATCH`` of a prompt, resource or tool) are the catalog's own
definitions (``registry/catalog/specs.py``) plus the save's ``change_note`` and ``labels``. They
are published from the models below but parsed by the catalog service, which validates them with
the server's limits and reports each problem with its field and the limit it hit; the published
schema carries the same limits (filled in from the running server's settings).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, StrictBool, StrictFloat
from pydantic.json_schema import SkipJsonSchema

from registry.catalog.specs import (
    LABEL_PATTERN,
    NAME_PATTERN,
    TAG_PATTERN,
    PromptArgument,
    PromptMessage,
    PromptSpec,
    ResourceSpec,
    SampleSet,
    ToolSpec,
)
from registry.catalog.teams import TEAM_PATTERN

#: The largest value of a 32-bit signed column (version numbers) and of a 64-bit one (ids).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

EntryName = Annotated[
    str, Field(pattern=NAME_PATTERN, min_length=1, max_length=128, description="1-128 of [A-Za-z0-9_.-]")
]
LabelName = Annotated[
    str,
    Field(
        pattern=LABEL_PATTERN,
        min_length=1,
        max_length=64,
        description="1-64 of [a-z0-9_.-], starting with a letter or digit (`latest` moves by itself)",
    ),
]
#: A label a save or a move may set: any label but ``latest``, which moves by itself.
SettableLabel = Annotated[
    str,
    Field(
        pattern=LABEL_PATTERN,
        min_length=1,
        max_length=64,
        description="1-64 of [a-z0-9_.-], starting with a letter or digit; not `latest` (it moves by itself)",
        json_schema_extra={"not": {"const": "latest"}},
    ),
]
TeamName = Annotated[
    str,
    Field(
        pattern="^" + TEAM_PATTERN + "$",
        min_length=1,
        max_length=64,
        description="a team: 1-64 of [a-z0-9_.-], starting with a letter or digit",
    ),
]


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: a number without a fractional part (``2`` or ``2.0``), never ``true`` or
    ``"2"``, which a lax parser would take: what the schema says is what the parser accepts."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be an integer")
        return int(value)
    return value


VersionNumber = Annotated[
    int, Field(ge=1, le=INT32_MAX, description="a version number (1 is the first)"), BeforeValidator(_json_integer)
]
#: Tags as entries declare them.
TagName = Annotated[str, Field(pattern=TAG_PATTERN)]
Scope = Literal["admin", "reviewer", "editor", "viewer", "agent"]

_PROMPT_EXAMPLE: dict[str, Any] = {
    "name": "release-notes",
    "title": "Release notes",
    "description": "Draft release notes from a list of changes",
    "tags": ["writing"],
    "arguments": [{"name": "changes", "description": "one change per line", "required": True}],
    "template": "Write release notes for:\n{{ changes }}",
    "change_note": "first draft",
}
_RESOURCE_EXAMPLE: dict[str, Any] = {
    "name": "style-guide",
    "title": "Style guide",
    "kind": "static",
    "uri": "docs://style-guide",
    "mimeType": "text/markdown",
    "text": "# Style guide\nWrite short sentences.",
    "change_note": "first version",
}
_TOOL_EXAMPLE: dict[str, Any] = {
    "name": "shout",
    "description": "Repeats a message back",
    "inputSchema": {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "what to repeat"}},
        "required": ["message"],
    },
    "annotations": {"readOnlyHint": True, "idempotentHint": True},
    "webhook": {"url": "builtin://echo", "timeout_s": 10},
    "change_note": "first version",
}


#: What each kind of resource takes (the catalog service's rules, as JSON Schema).
_RESOURCE_KINDS: list[JsonValue] = [
    {
        "properties": {"kind": {"const": "static"}},
        "required": ["uri"],
        "oneOf": [{"required": ["text"]}, {"required": ["blob"]}],
        "not": {"anyOf": [{"required": ["uriTemplate"]}, {"required": ["url"]}, {"required": ["headers"]}]},
    },
    {
        "properties": {"kind": {"const": "template"}},
        "required": ["kind", "uriTemplate", "text"],
        "not": {
            "anyOf": [
                {"required": ["uri"]},
                {"required": ["blob"]},
                {"required": ["url"]},
                {"required": ["headers"]},
            ]
        },
    },
    {
        "properties": {"kind": {"const": "http"}},
        "required": ["kind", "uri", "url"],
        "not": {"anyOf": [{"required": ["uriTemplate"]}, {"required": ["text"]}, {"required": ["blob"]}]},
    },
]


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})


# ------------------------------------------------------------------ problems


class ProblemItem(BaseModel):
    """One problem with a request: where (``loc``, dotted) and what."""

    loc: str = Field(description="the field, dotted (`messages.0.content.text`), or the parameter")
    msg: str
    limit: str | None = Field(default=None, description="the setting whose bound was hit (`REGISTRY_LIMIT_...`)")


class Problem(BaseModel):
    """An RFC 9457 problem (``application/problem+json``): every error the admin API answers."""

    model_config = _examples(
        {
            "type": "about:blank",
            "title": "Precondition failed",
            "status": 412,
            "detail": "prompt 'release-notes' changed since you read it (now version 3); reload and re-apply your edit",
        },
        {
            "type": "about:blank",
            "title": "Invalid entry",
            "status": 422,
            "detail": "invalid prompt: title: title has 300 characters; at most 256 are allowed "
            "(limit REGISTRY_LIMIT_TITLE_CHARS)",
            "errors": [{"loc": "title", "msg": "...", "limit": "REGISTRY_LIMIT_TITLE_CHARS"}],
        },
    )

    type: str = Field(default="about:blank", description="always `about:blank`: the status says it all")
    title: str = Field(description="the status in words")
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="what went wrong, for people")
    errors: list[ProblemItem] | None = Field(default=None, description="each problem, for invalid requests")
    limit: str | None = Field(default=None, description="the setting a refused request exceeded")
    change_request_id: int | None = Field(
        default=None, description="409 because an open change request already asks this: its id"
    )
    change_request: str | None = Field(default=None, description="... and its URL (`/api/v1/change-requests/{id}`)")


# ------------------------------------------------------------------ entry bodies


class ChangeRequestAsk(BaseModel):
    """The change request a save opens for each protected label it holds (with ``request_review``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"title": "Friendlier greeting"}]})

    title: str | None = Field(
        default=None,
        max_length=256,
        pattern="^[^\\x00-\\x1f\\x7f]*$",
        description="one line; default: what moves where",
    )
    description: str | None = Field(default=None, max_length=8192, description="why, for the reviewers")
    publish_when_approved: StrictBool = Field(
        default=False, description="publish each request as soon as the approvals it needs are in"
    )


_REQUEST_REVIEW = (
    "when a protected label (`production`, typically) is among the labels: open a change request to move it (a "
    "save never moves a protected label; see `held_labels` in the answer)"
)
_CHANGE_REQUEST = "title and description of the change requests `request_review` opens"


class _SaveMeta(BaseModel):
    """What a save carries besides the definition."""

    change_note: str | None = Field(default=None, description="why this version exists (shown in the history)")
    labels: list[SettableLabel] | None = Field(
        default=None,
        description="labels the new version gets (default: `production`, so agents are served it at once)",
    )
    team: TeamName | None = Field(
        default=None,
        description="create only: the team that owns the entry (you need the editor role in it); default: none, "
        "a global entry everyone sees. `PUT .../{name}/team` moves it later",
    )
    request_review: bool | None = Field(default=None, description=_REQUEST_REVIEW)
    change_request: ChangeRequestAsk | None = Field(default=None, description=_CHANGE_REQUEST)


class PromptWrite(PromptSpec, _SaveMeta):
    """A prompt as saved with ``POST /prompts`` or ``PUT /prompts/{name}``: a Jinja2 template (or
    several messages) over declared arguments."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [_PROMPT_EXAMPLE],
            "oneOf": [{"required": ["messages"]}, {"required": ["template"]}],
        }
    )

    messages: list[PromptMessage] = Field(
        default_factory=list, min_length=1, description="the messages (or give `template` instead)"
    )
    template: str | SkipJsonSchema[None] = Field(
        default=None, description="shorthand for one user message with this text (a Jinja2 template)"
    )


class ResourceWrite(ResourceSpec, _SaveMeta):
    """A resource as saved: ``static`` (``uri`` and ``text`` or ``blob``), ``template`` (an RFC 6570
    ``uriTemplate`` feeding a Jinja2 ``text``) or ``http`` (``uri``, content fetched from ``url``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                _RESOURCE_EXAMPLE,
                {
                    "name": "team-page",
                    "kind": "template",
                    "uriTemplate": "team://{team}/page",
                    "text": "Team {{ team }}",
                },
            ],
            "oneOf": _RESOURCE_KINDS,
        }
    )


class ToolWrite(ToolSpec, _SaveMeta):
    """A tool as saved: a JSON Schema for its arguments and the webhook that runs it."""

    model_config = _examples(_TOOL_EXAMPLE)


def _unnamed(example: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in example.items() if key != "name"}


_REPLACE_NAME = Field(default=None, description="may be left out: the name in the URL (entries are not renamed)")


class PromptReplace(PromptWrite):
    """A prompt's new version, ``PUT /prompts/{name}``: the whole definition (what it leaves out is gone)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [_unnamed(_PROMPT_EXAMPLE)],
            "oneOf": [{"required": ["messages"]}, {"required": ["template"]}],
        }
    )

    name: EntryName | SkipJsonSchema[None] = _REPLACE_NAME  # type: ignore[assignment]
    team: SkipJsonSchema[None] = None  # moved with PUT .../team, not saved


class ResourceReplace(ResourceWrite):
    """A resource's new version, ``PUT /resources/{name}``: the whole definition."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "kind": "static",
                    "uri": "info://server-info",
                    "mimeType": "text/plain",
                    "text": "mcp-registry, the team's shared catalog",
                    "change_note": "shorter",
                }
            ],
            "oneOf": _RESOURCE_KINDS,
        }
    )

    name: EntryName | SkipJsonSchema[None] = _REPLACE_NAME  # type: ignore[assignment]
    team: SkipJsonSchema[None] = None  # moved with PUT .../team, not saved


class ToolReplace(ToolWrite):
    """A tool's new version, ``PUT /tools/{name}``: the whole definition."""

    model_config = _examples(_unnamed(_TOOL_EXAMPLE))

    name: EntryName | SkipJsonSchema[None] = _REPLACE_NAME  # type: ignore[assignment]
    team: SkipJsonSchema[None] = None  # moved with PUT .../team, not saved


class _Patch(BaseModel):
    """Every member of a merge patch may be ``null`` (remove it); whether the patched entry is valid
    is checked like a full save."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = None
    description: str | None = None
    tags: list[TagName] | None = None
    change_note: str | None = Field(default=None, description="why this version exists")
    labels: list[SettableLabel] | None = Field(default=None, description="labels the new version gets")
    request_review: bool | None = Field(default=None, description=_REQUEST_REVIEW)
    change_request: ChangeRequestAsk | None = Field(default=None, description=_CHANGE_REQUEST)


class PromptPatch(_Patch):
    """A JSON Merge Patch (RFC 7396) of a prompt: members given replace the prompt's, ``null``
    removes one, nested objects merge, arrays replace whole. ``template`` replaces ``messages``."""

    model_config = _examples({"description": "Short release notes", "change_note": "tone"})

    arguments: list[PromptArgument] | None = None
    messages: list[PromptMessage] | None = Field(default=None, min_length=1)
    template: str | None = Field(default=None, description="replaces the messages with one user message")
    samples: list[SampleSet] | None = Field(
        default=None, description="argument sets the pre-publish checks render the prompt with (replaced whole)"
    )


class ResourcePatch(_Patch):
    """A JSON Merge Patch (RFC 7396) of a resource (see ``ResourceWrite`` for the fields)."""

    model_config = _examples({"text": "# Style guide\nBe brief."})

    kind: Literal["static", "template", "http"] | None = None
    uri: str | None = None
    uriTemplate: str | None = None
    mimeType: str | None = None
    text: str | None = None
    blob: str | None = None
    url: str | None = None
    cache_ttl_s: float | None = Field(default=None, ge=0)
    headers: dict[str, str | None] | None = Field(
        default=None, description="header values are write-only (`********` keeps one); `null` removes a header"
    )
    annotations: dict[str, Any] | None = Field(default=None, description="MCP resource annotations (any JSON object)")


class WebhookPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    method: Literal["POST", "PUT"] | None = None
    headers: dict[str, str | None] | None = Field(
        default=None, description="header values are write-only (`********` keeps one); `null` removes a header"
    )
    timeout_s: float | None = Field(default=None, gt=0, le=600)
    secret: str | None = None


class ToolAnnotationsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = None
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class ToolPatch(_Patch):
    """A JSON Merge Patch (RFC 7396) of a tool; ``inputSchema`` and ``outputSchema`` are merged too
    (give the whole schema to replace one)."""

    model_config = _examples({"webhook": {"timeout_s": 20}, "change_note": "slower backend"})

    inputSchema: dict[str, Any] | None = Field(
        default=None, description="a JSON Schema 2020-12 for the arguments (`type: object`)"
    )
    outputSchema: dict[str, Any] | None = Field(default=None, description="a JSON Schema 2020-12 for the result")
    annotations: ToolAnnotationsPatch | None = None
    webhook: WebhookPatch | None = None


# ------------------------------------------------------------------ entries


def _entry_example(kind: str, spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """An entry as the API shows it, for the OpenAPI examples: by default version 1 of ``spec``,
    saved by ``ci-editor`` and served as ``latest`` and ``production``."""
    example = {
        "kind": kind,
        "name": spec["name"],
        "version": 1,
        "latest_version": 1,
        "labels": {"latest": 1, "production": 1},
        "archived": False,
        "author": "ci-editor",
        "change_note": None,
        "created_at": "2025-06-01T09:00:00+00:00",
        "updated_at": "2025-06-01T09:00:00+00:00",
        "spec": spec,
    }
    return {**example, **changes}


class _EntryOut(BaseModel):
    name: EntryName
    version: int = Field(ge=1, description="the version shown")
    latest_version: int = Field(ge=1, description="the newest version (the ETag names it)")
    labels: dict[str, int] = Field(description="label name -> the version it points at (`latest` included)")
    archived: bool = Field(description="archived entries are hidden from agents; restore brings them back")
    team: str | None = Field(
        default=None, description="the team that owns the entry (its members and admins see it); null: global"
    )
    author: str = Field(description="who saved the version shown")
    change_note: str | None
    created_at: datetime
    updated_at: datetime
    held_labels: list[str] | None = Field(
        default=None,
        description="saves only: protected labels the save did not move (a change request moves them)",
    )
    change_requests: list[int] | None = Field(
        default=None, description="saves only: ids of the change requests the save opened (`request_review`)"
    )


class PromptEntry(_EntryOut):
    """One version of a prompt, with the entry's labels (write-only values masked)."""

    model_config = _examples(
        _entry_example(
            "prompt",
            {
                "name": "release-notes",
                "tags": [],
                "arguments": [{"name": "changes", "required": True}],
                "messages": [{"role": "user", "content": {"type": "text", "text": "Short notes for {{ changes }}"}}],
            },
            version=2,
            latest_version=2,
            labels={"latest": 2, "production": 2},
            change_note="shorter",
            updated_at="2025-06-02T10:30:00+00:00",
        )
    )

    kind: Literal["prompt"]
    spec: PromptSpec


class ResourceEntry(_EntryOut):
    """One version of a resource, with the entry's labels (header values masked)."""

    model_config = _examples(
        _entry_example(
            "resource",
            {"name": "style-guide", "tags": [], "kind": "static", "uri": "docs://style-guide", "text": "..."},
        )
    )

    kind: Literal["resource"]
    spec: ResourceSpec


class ToolEntry(_EntryOut):
    """One version of a tool, with the entry's labels (header values and secret masked: ``********``)."""

    model_config = _examples(
        _entry_example(
            "tool",
            {
                "name": "shout",
                "tags": [],
                "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
                "webhook": {"url": "https://hooks.example.com/shout", "method": "POST", "headers": {}, "timeout_s": 30},
            },
        )
    )

    kind: Literal["tool"]
    spec: ToolSpec


class _Summary(BaseModel):
    name: EntryName
    title: str | None
    description: str | None
    tags: list[str]
    latest_version: int = Field(ge=1)
    labels: dict[str, int] = Field(description="label name -> version")
    archived: bool
    team: str | None = Field(default=None, description="the owning team; null: global")
    updated_at: datetime


class PromptSummary(_Summary):
    """A prompt in a listing."""


class ResourceSummary(_Summary):
    """A resource in a listing, with the URI (or URI template) agents read it by."""

    uri: str | None = Field(description="the URI, or the URI template of a template resource")


class ToolSummary(_Summary):
    """A tool in a listing."""


class _Page(BaseModel):
    total: int = Field(ge=0, description="how many entries match, in all (see `total_exact`)")
    total_exact: bool = Field(
        default=True, description="false when a search matched so many entries that counting stopped at `total`"
    )
    limit: int = Field(ge=1, le=500)
    offset: int = Field(ge=0)


def _page_example(item: dict[str, Any]) -> dict[str, Any]:
    """A first page of one entry, for the OpenAPI examples."""
    return {"items": [item], "total": 1, "total_exact": True, "limit": 50, "offset": 0}


class PromptPage(_Page):
    """A page of prompts, by name."""

    model_config = _examples(
        _page_example(
            {
                "name": "release-notes",
                "title": "Release notes",
                "description": "Draft release notes",
                "tags": ["writing"],
                "latest_version": 2,
                "labels": {"latest": 2, "production": 2},
                "archived": False,
                "updated_at": "2025-06-02T10:30:00+00:00",
            }
        )
    )
    items: list[PromptSummary]


class ResourcePage(_Page):
    """A page of resources, by name."""

    model_config = _examples(
        _page_example(
            {
                "name": "style-guide",
                "title": "Style guide",
                "description": None,
                "tags": [],
                "uri": "docs://style-guide",
                "latest_version": 1,
                "labels": {"latest": 1, "production": 1},
                "archived": False,
                "updated_at": "2025-06-01T09:00:00+00:00",
            }
        )
    )

    items: list[ResourceSummary]


class ToolPage(_Page):
    """A page of tools, by name."""

    model_config = _examples(
        _page_example(
            {
                "name": "shout",
                "title": None,
                "description": "Repeats a message back",
                "tags": ["demo"],
                "latest_version": 3,
                "labels": {"latest": 3, "production": 2, "staging": 3},
                "archived": False,
                "updated_at": "2025-06-03T11:00:00+00:00",
            }
        )
    )

    items: list[ToolSummary]


class VersionInfo(BaseModel):
    version: int = Field(ge=1)
    author: str
    change_note: str | None
    created_at: datetime
    labels: list[str] = Field(description="the labels pointing at this version")


class VersionList(BaseModel):
    """An entry's versions, newest first."""

    model_config = _examples(
        {
            "items": [
                {
                    "version": 2,
                    "author": "ci-editor",
                    "change_note": "shorter",
                    "created_at": "2025-06-02T10:30:00+00:00",
                    "labels": ["latest", "production"],
                },
                {
                    "version": 1,
                    "author": "ci-editor",
                    "change_note": "first draft",
                    "created_at": "2025-06-01T09:00:00+00:00",
                    "labels": [],
                },
            ]
        }
    )

    items: list[VersionInfo]


class Diff(BaseModel):
    """What changed between two versions: a unified diff of the whole definition (YAML), and one
    per changed field (text as itself, objects as YAML)."""

    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "kind": "prompt",
                    "name": "release-notes",
                    "from": 1,
                    "to": 2,
                    "changed": ["description"],
                    "fields": {
                        "description": "--- v1/description\n+++ v2/description\n@@ -1 +1 @@\n-Draft release notes\n"
                        "+Short release notes\n"
                    },
                    "diff": "--- release-notes@v1\n+++ release-notes@v2\n@@ -1,2 +1,2 @@\n name: release-notes\n"
                    "-description: Draft release notes\n+description: Short release notes\n",
                }
            ]
        },
    )

    kind: Literal["prompt", "resource", "tool"]
    name: EntryName
    from_: int = Field(alias="from", ge=1)
    to: int = Field(ge=1)
    changed: list[str] = Field(description="the fields that differ")
    fields: dict[str, str] = Field(description="field -> its unified diff")
    diff: str = Field(description="the unified diff of the whole definition, as YAML")


class LabelMove(BaseModel):
    """Point a label at a version (promote, or roll back by moving it back)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"version": 2}]})

    version: VersionNumber
    override_reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="admins only, for a protected label: move it without a change request (an emergency "
        "override, recorded with this reason)",
    )


class VersionRestore(BaseModel):
    """What a restore says about itself (the body is optional)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"change_note": "Back to v2"}]})

    change_note: str | None = Field(
        default=None,
        description="why (shown in the history; default `Restore vN`; at most REGISTRY_LIMIT_CHANGE_NOTE_CHARS)",
    )


# ------------------------------------------------------------------ previews and test calls


class RenderRequest(BaseModel):
    """What to preview: arguments, and which version (default: the ``production`` label's, what agents get)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"arguments": {"changes": "- faster start-up"}}, {"label": "staging"}]},
    )

    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="argument name -> value (strings; declared arguments only)",
        json_schema_extra={"additionalProperties": {"type": "string"}},
    )
    version: VersionNumber | None = Field(default=None, description="render this version")
    label: LabelName | None = Field(
        default=None, description="render the version this label points at (default `production`)"
    )


class EmbeddedResource(BaseModel):
    uri: str
    mimeType: str | None = None
    text: str | None = None
    blob: str | None = Field(default=None, description="base64")


class RenderedText(BaseModel):
    type: Literal["text"]
    text: str


class RenderedMedia(BaseModel):
    type: Literal["image", "audio"]
    data: str = Field(description="base64")
    mimeType: str


class RenderedResource(BaseModel):
    type: Literal["resource"]
    resource: EmbeddedResource


class RenderedMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: Annotated[RenderedText | RenderedMedia | RenderedResource, Field(discriminator="type")]


class RenderResult(BaseModel):
    """The MCP ``GetPromptResult`` agents would get, and which version produced it."""

    model_config = _examples(
        {
            "messages": [{"role": "user", "content": {"type": "text", "text": "Write release notes for:\n- faster"}}],
            "description": "Draft release notes",
            "version": 2,
            "label": "production",
        }
    )

    messages: list[RenderedMessage]
    description: str | None = None
    version: int = Field(ge=1, description="the version rendered")
    label: str | None = Field(description="the label that picked it (null: picked by `version`)")


class ToolTestRequest(BaseModel):
    """A test call: the arguments an agent would send, and which version to run (default: the
    ``production`` label's, what agents call)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"arguments": {"message": "hello"}}, {"arguments": {"message": "hi"}, "label": "staging"}]
        },
    )

    arguments: dict[str, Any] = Field(
        default_factory=dict, description="the tool's arguments (any JSON object; checked against its inputSchema)"
    )
    version: VersionNumber | None = Field(default=None, description="run this version")
    label: LabelName | None = Field(
        default=None, description="run the version this label points at (default `production`)"
    )


class ContentBlock(BaseModel):
    """A ``CallToolResult`` content item, passed on as the tool returned it (``text``, ``image``,
    ``audio``, ``resource``, ``resource_link``, ...)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    data: str | None = Field(default=None, description="base64 (image, audio)")
    mimeType: str | None = None
    uri: str | None = None


class CallToolResult(BaseModel):
    """An MCP ``CallToolResult``; a failing tool is a result with ``isError: true``, not an error status."""

    content: list[ContentBlock]
    structuredContent: dict[str, Any] | None = Field(
        default=None, description="the tool's structured result (any JSON object, per its outputSchema)"
    )
    isError: bool


class ProgressParams(BaseModel):
    progressToken: str | int
    progress: float
    total: float | None = None
    message: str | None = None


class ProgressNotification(BaseModel):
    """``notifications/progress`` as the tool's caller would receive it."""

    method: Literal["notifications/progress"]
    params: ProgressParams


class LogParams(BaseModel):
    level: Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
    logger: str = Field(description="the tool's name")
    data: Any = Field(description="what the tool logged (any JSON value)")


class LogNotification(BaseModel):
    """``notifications/message`` (a log message) as the tool's caller would receive it."""

    method: Literal["notifications/message"]
    params: LogParams


class ToolTestResult(BaseModel):
    """What ``tools/call`` would have answered, the notifications it would have sent on the way,
    and which version ran."""

    model_config = _examples(
        {
            "result": {"content": [{"type": "text", "text": "hello"}], "isError": False},
            "notifications": [
                {
                    "method": "notifications/progress",
                    "params": {"progressToken": "test", "progress": 1, "total": 1, "message": "done"},
                }
            ],
            "version": 1,
            "label": "production",
        }
    )

    result: CallToolResult
    notifications: list[Annotated[ProgressNotification | LogNotification, Field(discriminator="method")]]
    version: int = Field(ge=1, description="the version that ran")
    label: str | None = Field(description="the label that picked it (null: picked by `version`)")


# ------------------------------------------------------------------ tokens and changes


class TokenRequest(BaseModel):
    """A new token. Its value is shown once, in the answer."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"name": "ci-agent", "scopes": ["agent"], "label": "staging", "expires_in_days": 90},
                {"name": "release-bot", "scopes": ["editor"]},
            ]
        },
    )

    name: str = Field(min_length=1, max_length=128, description="who or what uses it (shown as the author of saves)")
    scopes: list[str] = Field(
        min_length=1,
        max_length=4,
        description="admin (everything) > reviewer (approve change requests) > editor (write entries) > viewer "
        "(read); agent: MCP only, so it cannot be given with another scope (422)",
        json_schema_extra={"items": {"enum": ["admin", "reviewer", "editor", "viewer", "agent"]}},
    )
    label: str | None = Field(
        default=None,
        description="agent tokens: the label this agent is served",
        json_schema_extra={"pattern": LABEL_PATTERN, "maxLength": 64},
    )
    expires_at: datetime | None = Field(
        default=None, description="when the token stops working (ISO 8601; without a zone, UTC; in the future)"
    )
    expires_in_days: StrictFloat | None = Field(
        default=None, gt=0, le=36_500, description="or: how many days from now the token stops working"
    )
    teams: dict[str, Literal["viewer", "editor", "reviewer", "admin"]] | None = Field(
        default=None,
        max_length=256,
        description="team memberships: team name -> role in it (the teams must exist). Members see their "
        "teams' entries besides global ones; scopes apply to global entries, a team role to that team's",
        json_schema_extra={"propertyNames": {"pattern": "^" + TEAM_PATTERN + "$", "maxLength": 64}},
    )


class TokenTeams(BaseModel):
    """A token's team memberships, replacing the ones it has."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"teams": {"payments": "editor", "support": "viewer"}}]}
    )

    teams: dict[str, Literal["viewer", "editor", "reviewer", "admin"]] = Field(
        max_length=256,
        description="team name -> role in it (the teams must exist); {} leaves every team",
        json_schema_extra={"propertyNames": {"pattern": "^" + TEAM_PATTERN + "$", "maxLength": 64}},
    )


_TOKEN_EXAMPLE: dict[str, Any] = {
    "id": 7,
    "name": "ci-agent",
    "scopes": ["agent"],
    "label": "staging",
    "created_by": "admin",
    "created_at": "2025-06-01T09:00:00+00:00",
    "last_used_at": None,
    "revoked": False,
    "expires_at": "2025-08-30T09:00:00+00:00",
    "expired": False,
    "teams": {"payments": "viewer"},
}


class TokenInfo(BaseModel):
    """A token as listed (never its value)."""

    model_config = _examples(_TOKEN_EXAMPLE)

    id: int = Field(ge=1, le=INT64_MAX)
    name: str
    scopes: list[Scope]
    label: str | None
    created_by: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked: bool
    expires_at: datetime | None
    expired: bool
    teams: dict[str, Literal["viewer", "editor", "reviewer", "admin"]] = Field(
        default_factory=dict, description="team memberships: team name -> role"
    )


class TokenCreated(TokenInfo):
    """A new token: ``token`` is its value, shown only here."""

    model_config = _examples({**_TOKEN_EXAMPLE, "token": "mcpr_3q9V1f0bS0m3R4nd0mV4lu3"})

    token: str = Field(description="the bearer token (`Authorization: Bearer <token>`); shown only once")


class TokenList(BaseModel):
    """Every token (revoked and expired ones included), never their values."""

    model_config = _examples({"items": [_TOKEN_EXAMPLE]})

    items: list[TokenInfo]


class ChangeInfo(BaseModel):
    """One committed change: the audit trail, and what MCP notifications are made from."""

    id: int = Field(ge=1, le=INT64_MAX, description="increasing; stream event ids are these")
    created_at: datetime
    kind: Literal["prompt", "resource", "tool"]
    name: str
    action: str = Field(
        description="created, updated, archived, restored, label_moved, label_deleted or team_moved",
        examples=["updated"],
    )
    version: int | None
    labels: list[str] = Field(description="the labels whose view changed")
    uris: list[str] = Field(description="resource URIs (or URI templates) affected")
    actor: str
    note: str | None
    team: str | None = Field(default=None, description="the entry's team after the change; null: global")
    audience: list[str] | None = Field(
        default=None,
        description="whose view it changed: team names, `*` for everyone (a move between teams names both); "
        "null: everyone (changes from before teams)",
    )
    override: bool = Field(
        default=False, description="an admin's emergency override (a protected label moved without review)"
    )
    reason: str | None = Field(default=None, description="why, as the actor said (required for an override)")


class ChangePage(BaseModel):
    """Changes after ``after``, oldest first; ask again with ``after=next_after`` for more."""

    model_config = _examples(
        {
            "items": [
                {
                    "id": 41,
                    "created_at": "2025-06-02T10:30:00+00:00",
                    "kind": "prompt",
                    "name": "release-notes",
                    "action": "updated",
                    "version": 2,
                    "labels": ["latest", "production"],
                    "uris": [],
                    "actor": "ci-editor",
                    "note": "shorter",
                }
            ],
            "next_after": 41,
        }
    )

    items: list[ChangeInfo]
    next_after: int = Field(ge=0, le=INT64_MAX, description="pass as `after` to continue")


# ------------------------------------------------------------------ connected agents

_AGENT_EXAMPLE: dict[str, Any] = {
    "id_prefix": "q3V1f0",
    "client_name": "claude-code",
    "client_version": "2.1.0",
    "protocol_version": "2025-11-25",
    "transport": "streamable-http",
    "label": "production",
    "principal": "ci-agent",
    "since": "2025-06-02T09:12:00+00:00",
    "last_seen": "2025-06-02T10:30:00+00:00",
}


class AgentSession(BaseModel):
    """One MCP session open now (Streamable HTTP or HTTP+SSE; stdio sessions are not shared)."""

    id_prefix: str = Field(description="the first characters of the session id (never the whole id)")
    client_name: str | None = Field(description="`clientInfo.name` the client sent (null: none)")
    client_version: str | None = Field(description="`clientInfo.version` the client sent (null: none)")
    protocol_version: str = Field(description="the MCP protocol version negotiated")
    transport: Literal["streamable-http", "sse", "unknown"] = Field(
        description="streamable-http, sse (HTTP+SSE), or unknown (a session older than the server's recording it)"
    )
    label: str = Field(description="the label the session is served")
    principal: str = Field(description="the name of the token that opened it, or `anonymous`")
    since: datetime = Field(description="when the session was initialized")
    last_seen: datetime = Field(description="its last activity (written at most once a minute)")


class AgentList(BaseModel):
    """The MCP sessions open now on every replica, most recently active first."""

    model_config = _examples({"items": [_AGENT_EXAMPLE], "total": 1, "limit": 100, "idle_timeout_s": 3600.0})

    items: list[AgentSession]
    total: int = Field(ge=0, description="every open session, also those past `limit`")
    limit: int = Field(ge=0, description="most sessions listed")
    idle_timeout_s: float = Field(description="sessions idle this long expire (REGISTRY_SESSION_IDLE_TIMEOUT_S)")


# ------------------------------------------------------------------ health


class Health(BaseModel):
    """The process is up."""

    model_config = _examples({"status": "ok", "version": "0.1.0"})

    status: Literal["ok"]
    version: str


class Readiness(BaseModel):
    """Whether this replica can serve: its database answers and is migrated."""

    model_config = _examples(
        {"status": "ok", "detail": "ok"}, {"status": "unavailable", "detail": "database unreachable"}
    )

    status: Literal["ok", "unavailable"]
    detail: str
