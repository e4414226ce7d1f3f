"""The resource editor's own fields and its live panel.

Every ``ResourceSpec`` field has a control, so a save never drops one: the kind (static, template,
http), ``uri`` or ``uriTemplate``, ``mimeType``, the static ``text`` or a file (``blob``), the http
``url``, ``cache_ttl_s`` and ``headers``, and ``annotations`` (JSON or YAML). What the panel shows
depends on the kind:

- **static**: the content as ``resources/read`` returns it for the resource's URI;
- **template**: "Try a URI": the content rendered for a URI typed in, exactly as
  ``resources/read`` returns it (``registry.catalog.drafts.preview_resource``);
- **http**: "Fetch now": the URL fetched once through the fetcher agents are served by
  (``registry.catalog.drafts.fetch_resource_draft``), only when that button is pressed.

**Files.** An uploaded file becomes the ``blob`` (base64); its MIME type fills ``mimeType``
unless the person typed one in the same post. Once read, the blob travels in a hidden field, so a
re-drawn form (a row button, a conflict, a refusal) keeps it. The form is bounded as a whole by
``REGISTRY_LIMIT_BODY_BYTES``, so a blob is accepted only if the form can carry it back, and never
over ``REGISTRY_LIMIT_BLOB_CHARS``. The live checks do not re-send it: ``editor.js`` leaves the
file and the hidden blob out of the htmx posts and sends their size (``blob_chars``), which only
the check honours (a save reads the blob itself, never a size). Without JavaScript, "Check and
preview" posts everything, which the body bound already covers.

**Headers** are write-only: a stored value shows as ``********``; sent back unchanged it means
"keep the stored value" (``CatalogService`` keeps it only while the URL keeps its origin).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import yaml
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from registry.api.deps import get_registry
from registry.boundedjson import JsonStructureError, loads
from registry.catalog.drafts import (
    DraftIssue,
    FetchedResource,
    draft_issues,
    fetch_resource_draft,
    preview_resource,
    resource_template_issues,
)
from registry.catalog.errors import CatalogError
from registry.catalog.service import CatalogService
from registry.limits import LimitExceeded, Limits
from registry.ui.editor import Draft, apply_row_op
from registry.ui.editor import session_access as _access
from registry.webhooks import parse_networks

KINDS = (
    ("static", "Static: text or a file"),
    ("template", "Template: a URI template and a text template"),
    ("http", "HTTP: fetched from a URL"),
)
_HEADER_ROW = re.compile(r"hdr-(\d{1,4})-(name|value)")
#: Room the editor's other fields and the multipart framing need besides a blob: a blob must
#: leave this much of ``body_bytes`` free, or the form could not carry it back.
FORM_ROOM_BYTES = 64 * 1024
#: Longest file name kept for display.
FILE_NAME_CHARS = 255
#: Blob characters the panel's JSON shows; beyond, it is shortened (and says so).
SHOWN_BLOB_CHARS = 120
#: How the panel names the fields problems are found in.
FIELD_NAMES = {
    "name": "Name",
    "title": "Title",
    "description": "Description",
    "tags": "Tags",
    "kind": "Kind",
    "uri": "URI",
    "uriTemplate": "URI template",
    "mimeType": "MIME type",
    "text": "Text",
    "blob": "File",
    "url": "URL",
    "cache_ttl_s": "Cache seconds",
    "headers": "Headers",
    "annotations": "Annotations",
    "resource": "Resource",
}


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without aliases: annotations never need them, and they are how a few bytes expand
    into an enormous document."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not accepted", self.peek_event().start_mark
            )
        return super().compose_node(parent, index)


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _header_rows(form: FormData) -> list[dict[str, str]]:
    found: dict[int, dict[str, str]] = {}
    for key in form:
        match = _HEADER_ROW.fullmatch(key)
        if match:
            found.setdefault(int(match.group(1)), {})[match.group(2)] = _text(form, key)
    return [{"name": found[i].get("name", "").strip(), "value": found[i].get("value", "")} for i in sorted(found)]


def _ttl_text(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    number = float(value)
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)


def _blob_room(limits: Limits) -> tuple[int, str]:
    """The most base64 characters a blob may have in this editor, and the limit that says so."""
    room = limits.body_bytes - FORM_ROOM_BYTES
    return (limits.blob_chars, "blob_chars") if limits.blob_chars <= room else (max(room, 0), "body_bytes")


def _empty_header() -> dict[str, str]:
    return {"name": "", "value": ""}


class ResourceForm:
    kind = "resource"
    fields_template = "_resource_fields.html"
    check_template = "_resource_check.html"
    #: The form carries a file input (``editor.html`` posts it as multipart/form-data).
    multipart = True
    #: Buttons that are checks: "Fetch now" (``registry.ui.editor`` runs the check for them).
    check_ops = frozenset({"fetch"})

    def state_from_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        annotations = spec.get("annotations")
        blob = spec.get("blob")
        return {
            "kind": spec.get("kind") or "static",
            "uri": spec.get("uri") or "",
            "uri_template": spec.get("uriTemplate") or "",
            "mime": spec.get("mimeType") or "",
            "text": spec.get("text") or "",
            "source": "file" if blob is not None else "text",
            "blob": blob or "",
            "has_blob": blob is not None,
            "blob_name": "",
            "url": spec.get("url") or "",
            "cache_ttl": _ttl_text(spec.get("cache_ttl_s")),
            "headers": [{"name": k, "value": v} for k, v in (spec.get("headers") or {}).items()],
            "annotations": json.dumps(annotations, indent=2, ensure_ascii=False) if annotations else "",
            "try_uri": "",
            "show_raw": False,
        }

    def read(self, form: FormData, limits: Limits) -> Draft:
        problems: list[DraftIssue] = []
        kind = _text(form, "kind") or "static"
        mime = _text(form, "mimeType").strip()
        state: dict[str, Any] = {
            "kind": kind,
            "uri": _text(form, "uri").strip(),
            "uri_template": _text(form, "uriTemplate").strip(),
            "mime": mime,
            "text": _text(form, "text").replace("\r\n", "\n"),
            "source": "file" if _text(form, "source") == "file" else "text",
            "blob": "".join(_text(form, "blob").split()),
            # The hidden field is there (an empty file is an empty blob), or a file came now.
            "has_blob": "blob" in form,
            "blob_name": _text(form, "blob_name")[:FILE_NAME_CHARS],
            "url": _text(form, "url").strip(),
            "cache_ttl": _text(form, "cache_ttl_s").strip(),
            "headers": _header_rows(form),
            "annotations": _text(form, "annotations").replace("\r\n", "\n"),
            "try_uri": _text(form, "try_uri").strip(),
            "show_raw": form.get("show_raw") == "1",
        }
        self._read_upload(form, state, limits, problems)

        spec: dict[str, Any] = {"kind": kind}
        if kind == "template":
            if state["uri_template"]:
                spec["uriTemplate"] = state["uri_template"]
            spec["text"] = state["text"]
        elif state["uri"]:
            spec["uri"] = state["uri"]
        if state["mime"]:
            spec["mimeType"] = state["mime"]
        if kind == "static":
            if state["source"] == "file":
                if state["has_blob"]:
                    spec["blob"] = state["blob"]
            else:
                spec["text"] = state["text"]
        if kind == "http":
            if state["url"]:
                spec["url"] = state["url"]
            ttl = self._read_ttl(state["cache_ttl"], problems)
            if ttl is not None:
                spec["cache_ttl_s"] = ttl
            headers = self._read_headers(state["headers"], limits, problems)
            if headers:
                spec["headers"] = headers
        annotations = self._read_annotations(state["annotations"], limits, problems)
        if annotations is not None:
            spec["annotations"] = annotations
        return Draft(state=state, spec=spec, problems=problems)

    # ------------------------------------------------------------------ reading, field by field
    @staticmethod
    def _read_upload(form: FormData, state: dict[str, Any], limits: Limits, problems: list[DraftIssue]) -> None:
        """A file sent with this post becomes the blob, if the form can carry it back."""
        upload = form.get("upload")
        if not isinstance(upload, UploadFile) or not upload.filename:
            return
        cap, limit = _blob_room(limits)
        most_bytes = cap // 4 * 3
        upload.file.seek(0)
        data = upload.file.read(most_bytes + 1)
        upload.file.close()  # a large one is a temporary file: gone now, not when collected
        name = upload.filename[:FILE_NAME_CHARS]
        if len(data) > most_bytes:
            size = upload.size if upload.size is not None else len(data)
            if limit == "blob_chars":
                message = (
                    f"the file {name!r} has {size} bytes; a blob may have {cap} base64 characters ({most_bytes} bytes)"
                )
            else:
                message = (
                    f"the file {name!r} has {size} bytes; the editor carries a file in its form, which may have "
                    f"{limits.body_bytes} bytes, so a file may have {most_bytes} (a blob itself at most "
                    f"{limits.blob_chars} base64 characters, REGISTRY_LIMIT_BLOB_CHARS)"
                )
            problems.append(DraftIssue("blob", str(LimitExceeded(limit, message))))
            return  # the previous blob (if any) stays
        state["blob"] = base64.b64encode(data).decode("ascii")
        state["blob_name"] = name
        state["has_blob"] = True
        state["source"] = "file"
        content_type = (upload.content_type or "").split(";", 1)[0].strip()
        # The file's type, unless the person typed another MIME type in this same post.
        if content_type and state["mime"] == _text(form, "mime_shown").strip():
            state["mime"] = content_type

    @staticmethod
    def _read_ttl(text: str, problems: list[DraftIssue]) -> float | None:
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            problems.append(DraftIssue("cache_ttl_s", f"{text[:40]!r} is not a number of seconds"))
            return None
        return value

    @staticmethod
    def _read_headers(rows: list[dict[str, str]], limits: Limits, problems: list[DraftIssue]) -> dict[str, str]:
        filled = [row for row in rows if row["name"] or row["value"]]
        if len(filled) > limits.webhook_headers:
            refusal = LimitExceeded("webhook_headers", f"{len(filled)} headers; at most {limits.webhook_headers}")
            problems.append(DraftIssue("headers", str(refusal)))
            return {}
        headers: dict[str, str] = {}
        for index, row in enumerate(rows, start=1):
            if not row["name"] and row["value"]:
                problems.append(DraftIssue("headers", f"header {index} has a value but no name"))
            elif row["name"] in headers:
                problems.append(DraftIssue("headers", f"header {row['name'][:64]!r} is given twice"))
            elif row["name"]:
                headers[row["name"]] = row["value"]
        return headers

    @staticmethod
    def _read_annotations(text: str, limits: Limits, problems: list[DraftIssue]) -> dict[str, Any] | None:
        """A JSON or YAML object, bounded like a schema (``schema_bytes``) and, as JSON, by the JSON
        structure limits."""
        if not text.strip():
            return None
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.schema_bytes:
            refusal = LimitExceeded("schema_bytes", f"annotations have {size} bytes; at most {limits.schema_bytes}")
            problems.append(DraftIssue("annotations", str(refusal)))
            return None
        try:
            if text.lstrip().startswith(("{", "[")):
                value = loads(text, limits)
            else:
                value = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
        except JsonStructureError as exc:
            problems.append(DraftIssue("annotations", str(exc)))
            return None
        except (ValueError, yaml.YAMLError, RecursionError) as exc:
            problems.append(DraftIssue("annotations", f"not JSON or YAML: {_first_line(exc)}"))
            return None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            problems.append(DraftIssue("annotations", "must be an object (for example audience, priority)"))
            return None
        try:
            json.dumps(value)
        except (TypeError, ValueError):  # a YAML date or the like: not JSON
            problems.append(DraftIssue("annotations", "must hold only JSON values (quote dates and times)"))
            return None
        return value

    # ------------------------------------------------------------------ row buttons
    def apply_op(self, state: dict[str, Any], op: str) -> bool:
        if op == "remove-file":
            state.update(blob="", blob_name="", has_blob=False, source="text")
            return True
        return apply_row_op(state, op, {"header": _empty_header})

    # ------------------------------------------------------------------ the live panel
    def check(self, request: Request, draft: Draft, form: FormData, issues: list[DraftIssue]) -> dict[str, Any]:
        catalog: CatalogService = get_registry(request).catalog
        state, spec = draft.state, draft.spec
        kind = state["kind"]
        issues = list(issues)
        # A JavaScript check leaves the file out and sends its size: checked as a placeholder.
        pending_chars = self._pending_blob(form, draft)
        if pending_chars is not None:
            issues = draft_issues(catalog, "resource", {**spec, "blob": ""})
            cap, limit = _blob_room(catalog.limits)  # what a save of it will allow
            if pending_chars > cap:
                message = f"the file is {pending_chars} base64 characters; this editor takes at most {cap}"
                issues.append(DraftIssue("blob", str(LimitExceeded(limit, message))))
        if not draft.problems:
            issues += [i for i in resource_template_issues(catalog, spec) if i not in issues]
        values: dict[str, Any] = {
            "issues": [_issue_view(issue, state) for issue in issues],
            "kind": kind,
            "contents": None,
            "raw": "",
            "preview_error": None,
            "pending": None,
            "fetched": None,
            "fetch_asked": kind == "http" and _text(form, "op") == "fetch",
        }
        if issues:
            return values
        try:
            if kind == "template" and state["try_uri"]:
                values["contents"] = preview_resource(catalog, spec, state["try_uri"])
            elif kind == "static" and pending_chars is not None:
                values["pending"] = {
                    "chars": pending_chars,
                    "bytes": pending_chars // 4 * 3,
                    "mime": self._pending_mime(form, state),
                }
            elif kind == "static":
                values["contents"] = preview_resource(catalog, spec, spec.get("uri", ""))
            elif values["fetch_asked"]:
                allowed = parse_networks(get_registry(request).settings.webhook_allowed_networks)
                fetched = fetch_resource_draft(
                    catalog,
                    spec,
                    editing=_text(form, "editing").strip() or None,
                    allowed_networks=allowed,
                    access=_access(request),
                )
                values["fetched"] = _fetched_view(fetched)
                values["contents"] = fetched.contents
        except CatalogError as exc:
            values["preview_error"] = exc.detail
        if values["contents"] is not None:
            values["raw"] = json.dumps({"contents": _shown(values["contents"])}, indent=2, ensure_ascii=False)
        return values

    @staticmethod
    def _pending_mime(form: FormData, state: Mapping[str, Any]) -> str:
        """The MIME type a save would give a file chosen but not sent yet (as ``_read_upload``)."""
        chosen = _text(form, "upload_type").split(";", 1)[0].strip()[:255]
        if chosen and state["mime"] == _text(form, "mime_shown").strip():
            return chosen
        return str(state["mime"])

    @staticmethod
    def _pending_blob(form: FormData, draft: Draft) -> int | None:
        """The size a JavaScript check sent instead of the file (None when it sent the file, or no
        size: then the draft is checked as it is)."""
        sent = _text(form, "blob_chars")
        state = draft.state
        if draft.problems or state["kind"] != "static" or state["source"] != "file" or "blob" in draft.spec:
            return None
        if not sent.isdigit() or len(sent) > 12:
            return None
        return int(sent)


def _issue_view(issue: DraftIssue, state: Mapping[str, Any]) -> dict[str, Any]:
    """An issue as the panel names it: the field's label, and the form's words where the spec's
    would puzzle (a URI template problem is reported by the template check, under ``text``)."""
    where, message = issue.where, issue.message
    if where == "text" and message.startswith("uriTemplate: "):
        where, message = "uriTemplate", message.removeprefix("uriTemplate: ")
    elif "exactly one of 'text' or 'blob'" in message and state.get("source") == "file":
        where, message = "blob", "choose a file to upload (or choose Text)"
    return {"where": FIELD_NAMES.get(where, where), "line": issue.line, "message": message}


def _shown(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contents for display: a long blob shortened (the panel says so)."""
    shown = []
    for item in contents:
        blob = item.get("blob")
        if isinstance(blob, str) and len(blob) > SHOWN_BLOB_CHARS:
            item = {**item, "blob": f"{blob[:SHOWN_BLOB_CHARS]}… ({len(blob)} characters)"}
        shown.append(item)
    return shown


def _fetched_view(fetched: FetchedResource) -> dict[str, Any]:
    return {"status": fetched.status, "error": fetched.error, "ms": round(fetched.seconds * 1000)}


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
