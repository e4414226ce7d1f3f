"""The tool editor's own fields: the input and output JSON Schemas (JSON text), the annotations,
the webhook (URL, method, timeout, header rows, signing secret), and the live panel (problems,
and the item ``tools/list`` would show).

**Schemas are JSON text.** What is typed is parsed here, within ``json_depth``/``json_elements``
and a size bound derived from ``REGISTRY_LIMIT_SCHEMA_BYTES``; a syntax error is a problem with its
line and column. The parsed value then meets the save's own validation (``DraftService.issues``: the
JSON Schema 2020-12 meta-schema, the RE2 pattern check, the compact size limit), which names the
JSON path of a meta-schema violation. YAML is not accepted: its aliases can expand a small text
into a very large value, and a schema typed as JSON is what the API and the page show anyway.

**Write-only values never come back into the page.** Header values and the signing secret are
stored encrypted and read back masked (``********``). A stored header's value field is an empty
password field: left empty it sends the mask, which a save takes as "keep the stored value" (while
the URL keeps its origin: ``CatalogService.seal``). The secret has explicit choices (keep, replace,
remove); a new secret typed in is put in the definition but never in the form's state, so a page
drawn again (a row button, an error, a conflict) asks for it again instead of echoing it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request

from registry.api.deps import get_registry
from registry.boundedjson import JsonStructureError, loads
from registry.catalog.drafts import DraftIssue
from registry.catalog.errors import CatalogError
from registry.catalog.secrets import MASK
from registry.limits import Limits, env_name
from registry.ui.editor import Draft, apply_row_op, read_rows
from registry.ui.editor import session_access as _access

#: The annotation hints, each "not said" / yes / no (``None`` is not ``False``: both are kept).
HINTS = (
    ("readOnlyHint", "Read-only", "It does not change anything."),
    ("destructiveHint", "Destructive", "It may delete or overwrite things (meaningful when not read-only)."),
    ("idempotentHint", "Idempotent", "Calling it twice with the same arguments does nothing more."),
    ("openWorldHint", "Open world", "It reaches outside systems (the web, other services)."),
)
#: Secret choices: with a stored secret, and without one.
SECRET_STORED_CHOICES = (
    ("keep", "Keep the secret"),
    ("replace", "Replace the secret"),
    ("remove", "Remove the secret"),
)
SECRET_NEW_CHOICES = (("none", "No secret"), ("replace", "Set a secret"))
#: Schema text is read up to this many times ``REGISTRY_LIMIT_SCHEMA_BYTES`` (indentation and line
#: breaks); the schema itself, as compact JSON, must still fit the limit (the save's own check).
SCHEMA_TEXT_FACTOR = 4
#: Longest timeout text read as a number.
NUMBER_CHARS = 32
DEFAULT_INPUT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
#: The form's schema fields: (form field, spec key, what people call it).
SCHEMA_FIELDS = (("input_schema", "inputSchema", "Input schema"), ("output_schema", "outputSchema", "Output schema"))
#: How the live panel names the parts of a tool.
WHERE_LABELS = {
    "name": "Name",
    "title": "Title",
    "description": "Description",
    "tags": "Tags",
    "inputSchema": "Input schema",
    "outputSchema": "Output schema",
    "annotations": "Annotations",
    "annotations.title": "Annotations, title",
    **{f"annotations.{key}": f"Annotations, {label.lower()}" for key, label, _help in HINTS},
    "webhook": "Webhook",
    "webhook.url": "Webhook URL",
    "webhook.method": "Method",
    "webhook.timeout_s": "Timeout",
    "webhook.headers": "Headers",
    "webhook.secret": "Signing secret",
    "tool": "Tool",
}


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _schema_text(schema: Any) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False)


def _number_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _hint_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else ""


def _empty_header() -> dict[str, str]:
    return {"name": "", "value": "", "stored": ""}


def parse_schema_text(text: str, where: str, label: str, limits: Limits) -> tuple[Any, DraftIssue | None]:
    """(the value, None), or (None, the problem): too long, too deep, or not JSON (with the line
    and column of a syntax error). Empty text is (None, None): the field is left out."""
    if not text.strip():
        return None, None
    size = len(text.encode("utf-8", "surrogatepass"))
    cap = limits.schema_bytes * SCHEMA_TEXT_FACTOR
    if size > cap:
        message = (
            f"{label} text is {size:,} bytes; at most {cap:,} are read ({SCHEMA_TEXT_FACTOR} times "
            f"{env_name('schema_bytes')}; the schema itself, as compact JSON, must fit in {limits.schema_bytes:,})"
        )
        return None, DraftIssue(where, message)
    try:
        value = loads(text, limits)
        json.dumps(value, allow_nan=False)  # NaN and Infinity: Python's json takes them, JSON does not
    except JsonStructureError as exc:
        return None, DraftIssue(where, f"{label}: {exc}")
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        return None, DraftIssue(where, message, exc.lineno)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).removeprefix("invalid JSON: ")
        if "Out of range float" in detail:
            detail = "NaN and Infinity are not JSON numbers"
        return None, DraftIssue(where, f"not valid JSON: {detail}")
    return value, None


class ToolForm:
    kind = "tool"
    fields_template = "_tool_fields.html"
    check_template = "_tool_check.html"

    def state_from_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The form of a stored (masked) definition, or of a conflict's re-applied one, whose
        secret may be one typed in this form: it is never put in the state (only that one was)."""
        output = spec.get("outputSchema")
        annotations = spec.get("annotations")
        hook = spec.get("webhook") or {}
        headers = [
            {"name": name, "value": "", "stored": name}
            if value == MASK
            else {"name": name, "value": value, "stored": ""}
            for name, value in (hook.get("headers") or {}).items()
        ]
        secret = hook.get("secret")
        if secret == MASK:
            secret_state = {"secret_stored": True, "secret_action": "keep"}
        elif secret:
            secret_state = {"secret_stored": False, "secret_action": "replace"}
        else:
            secret_state = {"secret_stored": False, "secret_action": "none"}
        return {
            "input_schema": _schema_text(spec.get("inputSchema", DEFAULT_INPUT_SCHEMA)),
            "output_schema": _schema_text(output) if output is not None else "",
            # Only an empty annotations object needs saying: the hints cannot show it.
            "annotations_given": annotations is not None and not annotations,
            "annotations": {
                "title": (annotations or {}).get("title") or "",
                **{key: _hint_text((annotations or {}).get(key)) for key, _label, _help in HINTS},
            },
            "webhook_url": hook.get("url", ""),
            "webhook_method": hook.get("method", "POST"),
            "webhook_timeout": _number_text(hook.get("timeout_s")),
            "headers": headers,
            **secret_state,
            # A secret typed before this page was drawn: the page asks for it again.
            "secret_typed": bool(secret) and secret != MASK,
        }

    def read(self, form: FormData, limits: Limits) -> Draft:
        problems: list[DraftIssue] = []
        spec: dict[str, Any] = {}
        state: dict[str, Any] = {}
        for field, key, label in SCHEMA_FIELDS:
            text = _text(form, field).replace("\r\n", "\n")
            state[field] = text
            value, problem = parse_schema_text(text, key, label, limits)
            if problem is not None:
                problems.append(problem)
            elif value is not None:
                spec[key] = value

        annotations_state = {"title": _text(form, "ann-title")}
        annotations: dict[str, Any] = {}
        if annotations_state["title"].strip():
            annotations["title"] = annotations_state["title"].strip()
        for key, label, _help in HINTS:
            chosen = _text(form, f"ann-{key}")
            annotations_state[key] = chosen
            if chosen in ("true", "false"):
                annotations[key] = chosen == "true"
            elif chosen:
                problems.append(DraftIssue(f"annotations.{key}", f"{label}: choose yes, no or not said"))
        given = _text(form, "annotations_given") == "1"
        if annotations or given:
            spec["annotations"] = annotations
        state["annotations"] = annotations_state
        state["annotations_given"] = given

        hook, hook_state = self._read_webhook(form, limits, problems)
        spec["webhook"] = hook
        state.update(hook_state)
        return Draft(state=state, spec=spec, problems=problems)

    def _read_webhook(
        self, form: FormData, limits: Limits, problems: list[DraftIssue]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        url = _text(form, "webhook_url").strip()
        method = _text(form, "webhook_method") or "POST"
        timeout_text = _text(form, "webhook_timeout").strip()
        hook: dict[str, Any] = {"url": url, "method": method}
        if timeout_text:
            timeout = _parse_number(timeout_text)
            if timeout is None:
                problems.append(
                    DraftIssue("webhook.timeout_s", f"{timeout_text[:NUMBER_CHARS]!r} is not a number of seconds")
                )
            else:
                hook["timeout_s"] = timeout

        rows = [{**_empty_header(), **row} for row in read_rows(form, "hdr", ("name", "value", "stored"))]
        if len(rows) > limits.webhook_headers:
            problems.append(
                DraftIssue(
                    "webhook.headers",
                    f"{len(rows)} header rows; at most {limits.webhook_headers} ({env_name('webhook_headers')})",
                )
            )
        headers: dict[str, str] = {}
        seen: dict[str, str] = {}
        for number, row in enumerate(rows, start=1):
            name, value, stored = row["name"].strip(), row["value"], row["stored"]
            if not name and not value and not stored:
                continue  # an empty row (just added)
            if not name:
                problems.append(DraftIssue("webhook.headers", f"header row {number}: give the header a name"))
                continue
            if name.lower() in seen:
                problems.append(
                    DraftIssue("webhook.headers", f"header {name!r} is given twice (as {seen[name.lower()]!r})")
                )
                continue
            seen[name.lower()] = name
            if stored and value == "":
                if name != stored:
                    problems.append(
                        DraftIssue(
                            "webhook.headers",
                            f"header {stored!r} was renamed to {name!r}: type its value again "
                            "(a stored value is kept only under its own name)",
                        )
                    )
                    continue
                headers[name] = MASK
            else:
                headers[name] = value.strip()
        hook["headers"] = headers

        stored_secret = _text(form, "secret_stored") == "1"
        choices = dict(SECRET_STORED_CHOICES if stored_secret else SECRET_NEW_CHOICES)
        action = _text(form, "secret_action") or ("keep" if stored_secret else "none")
        new_secret = _text(form, "secret_new")
        if action not in choices:
            problems.append(DraftIssue("webhook.secret", f"choose one of: {', '.join(choices.values())}"))
        elif action == "keep":
            hook["secret"] = MASK
        elif action == "replace":
            if new_secret:
                hook["secret"] = new_secret
            else:
                problems.append(
                    DraftIssue(
                        "webhook.secret",
                        "type the new secret (a secret typed before is never sent back into the page: type it again)",
                    )
                )
        state = {
            "webhook_url": url,
            "webhook_method": method,
            "webhook_timeout": timeout_text,
            "headers": rows,
            "secret_stored": stored_secret,
            "secret_action": action,
            # Only whether one was typed: the value itself never goes into the state (nor the page).
            "secret_typed": bool(new_secret),
        }
        return hook, state

    def apply_op(self, state: dict[str, Any], op: str) -> bool:
        return apply_row_op(state, op, {"header": _empty_header})

    def check(self, request: Request, draft: Draft, form: FormData, issues: list[DraftIssue]) -> dict[str, Any]:
        drafts = get_registry(request).drafts
        issues = [_placed(issue) for issue in issues]
        listing: dict[str, Any] | None = None
        if not draft.problems:
            editing = _text(form, "editing").strip() or None
            kept = drafts.kept_value_issues("tool", draft.spec, editing, _access(request))
            issues.extend(i for i in kept if i not in issues)
            try:
                listing = drafts.preview_tool(draft.spec)
            except CatalogError:
                listing = None
        return {
            "issues": issues,
            "where_labels": WHERE_LABELS,
            "listing": listing,
            "listing_json": json.dumps(listing, indent=2, ensure_ascii=False) if listing is not None else "",
            "properties": _properties(listing["inputSchema"]) if listing is not None else [],
        }


def _parse_number(text: str) -> float | None:
    if len(text) > NUMBER_CHARS:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _placed(issue: DraftIssue) -> DraftIssue:
    """An issue where people look for it: the outbound-URL guard's refusal (from a save's whole-tool
    check) is the URL's; a schema's message need not repeat the field's name."""
    if issue.where == "tool" and issue.message.startswith("refused outbound URL"):
        return DraftIssue("webhook.url", issue.message)
    if issue.where in ("inputSchema", "outputSchema"):  # "inputSchema is not ..." under "Input schema"
        message = issue.message.removeprefix(f"{issue.where} is ").removeprefix(f"{issue.where} ")
        return DraftIssue(issue.where, message, issue.line)
    return issue


def _properties(schema: Any) -> list[dict[str, Any]]:
    """The input schema's top-level properties, for the summary: name, type, required."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return []
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    rows = []
    for name, sub in list(schema["properties"].items())[:50]:
        kind = sub.get("type") if isinstance(sub, Mapping) else None
        rows.append(
            {
                "name": name,
                "type": " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind or "any"),
                "required": name in required,
            }
        )
    return rows
