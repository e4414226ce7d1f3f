"""The prompt editor's own fields: the arguments table, the messages, and the live panel
(problems with their template lines, and the preview: the messages exactly as ``prompts/get``
returns them for the sample values typed in, with the raw JSON-RPC result a toggle away).

Rows are numbered fields (``arg-0-name``, ``msg-1-text``, ...). The buttons that add or remove a
row post the form back (see ``registry.ui.editor``), so the numbering is always dense when the
page is drawn; when reading, rows are taken in the order of their numbers, whatever they are.

The preview's inputs are typed from the arguments (``preview_fields``): a choice among the allowed
values, the default filled in, required ones marked. The template fields carry ``data-where`` (the
checker's name for them), and the problems their line (``data-line``), which the code editor
(``admin_ui/static/code_editor.js``) marks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request

from registry.api.deps import get_registry
from registry.boundedjson import JsonStructureError, loads
from registry.catalog.drafts import DraftIssue
from registry.catalog.errors import CatalogError
from registry.limits import Limits
from registry.ui.editor import Draft, apply_row_op, read_rows
from registry.ui.editor import session_access as _access

#: Sample values for the preview: ``sample-<argument name>``.
SAMPLE_PREFIX = "sample-"
#: The hidden field saying what the page's preview inputs were drawn for (``fields_shape``).
PREVIEW_SHAPE = "preview-shape"
#: The JSON-RPC id shown in the raw result (any would do: the preview is not a real request).
PREVIEW_ID = 1


def _argument_state(argument: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": argument.get("name", ""),
        "title": argument.get("title") or "",
        "description": argument.get("description") or "",
        "required": bool(argument.get("required")),
        "enum": ", ".join(argument.get("enum") or []),
        "default": argument.get("default") if argument.get("default") is not None else "",
    }


def _message_state(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content") or {}
    return {
        "role": message.get("role", "user"),
        "type": content.get("type", "text"),
        "text": content.get("text", ""),
        "uri": content.get("uri", ""),
        "mime": content.get("mimeType", ""),
        "data": content.get("data", ""),
    }


def _empty_argument() -> dict[str, Any]:
    return _argument_state({})


def _empty_message() -> dict[str, Any]:
    return _message_state({"role": "user", "content": {"type": "text", "text": ""}})


class PromptForm:
    kind = "prompt"
    fields_template = "_prompt_fields.html"
    check_template = "_prompt_check.html"
    #: The templates are edited in the code editor (admin_ui/static/code_editor.js).
    code_editor = True

    def state_from_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        messages = [_message_state(m) for m in spec.get("messages") or []] or [_empty_message()]
        arguments = [_argument_state(a) for a in spec.get("arguments") or []]
        stored = spec.get("samples")
        return {
            "arguments": arguments,
            "messages": messages,
            "samples": {},
            "show_raw": False,
            # The argument sets the pre-publish checks render (kept as JSON text, so a save keeps them).
            "stored_samples": json.dumps(stored, ensure_ascii=False) if stored else "",
        }

    def read(self, form: FormData, limits: Limits) -> Draft:
        problems: list[DraftIssue] = []
        arguments_state = [
            {
                "name": row.get("name", "").strip(),
                "title": row.get("title", ""),
                "description": row.get("description", ""),
                "required": row.get("required") == "1",
                "enum": row.get("enum", ""),
                "default": row.get("default", ""),
            }
            for row in read_rows(form, "arg", ("name", "title", "description", "required", "enum", "default"))
        ]
        messages_state = [
            {
                "role": row.get("role", "user"),
                "type": row.get("type", "text"),
                "text": row.get("text", "").replace("\r\n", "\n"),
                "uri": row.get("uri", "").strip(),
                "mime": row.get("mime", "").strip(),
                "data": "".join(row.get("data", "").split()),
            }
            for row in read_rows(form, "msg", ("role", "type", "text", "uri", "mime", "data"))
        ]
        for what, rows, cap in (
            ("arguments", arguments_state, limits.prompt_arguments),
            ("messages", messages_state, limits.prompt_messages),
        ):
            if len(rows) > cap:
                problems.append(
                    DraftIssue(what, f"{len(rows)} {what}; at most {cap} (REGISTRY_LIMIT_PROMPT_{what.upper()})")
                )
        arguments = [_argument_spec(a) for a in arguments_state if any(_filled(v) for v in a.values())]
        messages = [_message_spec(m) for m in messages_state]
        samples = {
            key.removeprefix(SAMPLE_PREFIX): value
            for key, value in form.multi_items()
            if key.startswith(SAMPLE_PREFIX) and isinstance(value, str)
        }
        stored_text = form.get("stored_samples")
        stored_text = stored_text.strip() if isinstance(stored_text, str) else ""
        state = {
            "arguments": arguments_state,
            "messages": messages_state,
            "samples": samples,
            "show_raw": form.get("show_raw") == "1",
            "stored_samples": stored_text,
        }
        spec: dict[str, Any] = {"arguments": arguments, "messages": messages}
        if stored_text:
            try:
                # The bounded loader: a deeply nested or huge text is a problem on the form, never a
                # RecursionError (a 500) or a parse that costs more than the form is worth.
                spec["samples"] = loads(stored_text, limits)
            except JsonStructureError as exc:
                problems.append(DraftIssue("samples", f"sample argument sets: {exc}"))
            except ValueError as exc:
                problems.append(DraftIssue("samples", f"sample argument sets are not JSON: {exc}"))
        return Draft(state=state, spec=spec, problems=problems)

    def apply_op(self, state: dict[str, Any], op: str) -> bool:
        return apply_row_op(state, op, {"argument": _empty_argument, "message": _empty_message})

    def panel_context(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The preview's inputs on a full page (a check sends its own, ``check.fields``)."""
        named = [_argument_spec(a) for a in state.get("arguments") or [] if a.get("name")]
        fields = preview_fields(named)
        return {"preview_fields": fields, "preview_shape": fields_shape(fields)}

    def check(self, request: Request, draft: Draft, form: FormData, issues: list[DraftIssue]) -> dict[str, Any]:
        drafts = get_registry(request).drafts
        declared = [a["name"] for a in draft.spec["arguments"] if isinstance(a.get("name"), str)]
        fields = preview_fields(draft.spec["arguments"])
        samples = {name: draft.state["samples"].get(name, "") for name in declared}
        result: dict[str, Any] | None = None
        preview_error = None
        if not issues:
            # An empty sample is "not given": the argument's default applies, or it is missing.
            given = {name: value for name, value in samples.items() if value != ""}
            try:
                result = drafts.preview_prompt(draft.spec, given, access=_access(request))
            except CatalogError as exc:
                preview_error = exc.detail
        raw = json.dumps({"jsonrpc": "2.0", "id": PREVIEW_ID, "result": result}, indent=2, ensure_ascii=False)
        return {
            "issues": issues,
            "declared": declared,
            "fields": fields,
            "shape": fields_shape(fields),
            "samples": samples,
            "result": result,
            "raw": raw if result is not None else "",
            "preview_error": preview_error,
            # The page's sample fields are for other arguments (or other allowed values, defaults,
            # requirements): send new ones along.
            "samples_changed": form.get(PREVIEW_SHAPE) != fields_shape(fields),
        }


def preview_fields(arguments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One preview input per declared argument (``arguments`` as the spec has them): a choice
    among its allowed values when it has some, pre-filled with its default, marked when required."""
    fields = []
    for argument in arguments:
        name = argument.get("name")
        if not isinstance(name, str) or not name:
            continue
        values = argument.get("enum")
        default = argument.get("default")
        fields.append(
            {
                "name": name,
                "allowed": [v for v in values if isinstance(v, str)] if isinstance(values, list) else [],
                "default": default if isinstance(default, str) else "",
                "required": argument.get("required") is True,
            }
        )
    return fields


def fields_shape(fields: list[dict[str, Any]]) -> str:
    """What the page's preview inputs were drawn for (a hidden field): a check redraws them when
    the arguments' shape differs."""
    return json.dumps([[f["name"], f["allowed"], f["default"], f["required"]] for f in fields], ensure_ascii=False)


def _filled(value: Any) -> bool:
    return bool(value.strip()) if isinstance(value, str) else bool(value)


def _argument_spec(row: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": row["name"]}
    for key in ("title", "description"):
        if row[key].strip():
            spec[key] = row[key].strip()
    if row["required"]:
        spec["required"] = True
    values = [v.strip() for v in row["enum"].split(",") if v.strip()]
    if values:
        spec["enum"] = values
    if row["default"] != "":
        spec["default"] = row["default"]
    return spec


def _message_spec(row: Mapping[str, Any]) -> dict[str, Any]:
    kind = row["type"]
    content: dict[str, Any]
    if kind == "resource":
        content = {"type": "resource", "uri": row["uri"]}
    elif kind in ("image", "audio"):
        content = {"type": kind, "mimeType": row["mime"], "data": row["data"]}
    else:
        content = {"type": kind, "text": row["text"]}
    return {"role": row["role"], "content": content}
