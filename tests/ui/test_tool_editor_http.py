"""The tool editor at the HTTP level (a real server, a real loopback webhook, no browser).

Forms are submitted the way a browser would: the edit page is fetched, its form's fields read
back (``form_fields``), a few changed, and the whole form posted. Whether write-only values
survive an edit is proven end to end: the webhook records each call's headers, and the signature
is checked with ``registry.webhooks.signing.verify`` against the secret it should have been made with.
"""

from __future__ import annotations

import html
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from registry.webhooks.signing import SIGNATURE_HEADER, verify
from tests.http import TLS
from tests.interop.mcp_wire import list_all
from tests.thread_server import port_of, serving_in_thread
from tests.ui.conftest import CSRF, UiServer, sign_in

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Where"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}
OUTPUT: dict[str, Any] = {"type": "object", "properties": {"forecast": {"type": "string"}}}
FIRST_SECRET = "first-secret-" + secrets.token_hex(8)
HEADER_VALUE = "Bearer keep-me-" + secrets.token_hex(8)


# ------------------------------------------------------------------ a webhook that records calls


@dataclass
class Recorded:
    headers: dict[str, str]
    body: bytes


@dataclass
class Hook:
    port: int
    calls: list[Recorded] = field(default_factory=list)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    """A webhook on 127.0.0.1 (the UI test server allows loopback webhooks) recording each call."""
    calls: list[Recorded] = []

    async def record(request: Request) -> Response:
        calls.append(Recorded({k.lower(): v for k, v in request.headers.items()}, await request.body()))
        result = {"content": [{"type": "text", "text": "recorded"}], "structuredContent": {"forecast": "fair"}}
        return JSONResponse(result)

    app = Starlette(routes=[Route("/{path:path}", record, methods=["POST", "PUT"])])
    with serving_in_thread(app, name="the loopback webhook") as server:
        yield Hook(port_of(server), calls)


# ------------------------------------------------------------------ helpers


class _FormReader(HTMLParser):
    """The fields a browser would submit from ``<form id="editor">`` (no button)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.inside = False
        self.fields: list[tuple[str, str]] = []
        self._textarea: str | None = None
        self._text: list[str] = []
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id") == "editor":
            self.inside = True
        if not self.inside:
            return
        kind = a.get("type", "text")
        if tag == "input" and a.get("name") and kind not in ("submit", "button", "file"):
            if kind in ("radio", "checkbox"):
                if "checked" in a:
                    self.fields.append((a["name"], a.get("value", "on")))
            else:
                self.fields.append((a["name"], a.get("value", "")))
        elif tag == "textarea" and a.get("name"):
            self._textarea, self._text = a["name"], []
        elif tag == "select" and a.get("name"):
            self._select, self._options = a["name"], []
        elif tag == "option" and self._select is not None:
            self._options.append((a.get("value", ""), "selected" in a))

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea" and self._textarea is not None:
            self.fields.append((self._textarea, "".join(self._text)))
            self._textarea = None
        elif tag == "select" and self._select is not None:
            chosen = [v for v, selected in self._options if selected] or [v for v, _ in self._options[:1]]
            self.fields.append((self._select, chosen[0] if chosen else ""))
            self._select = None


def form_fields(page: str) -> dict[str, str]:
    reader = _FormReader()
    reader.feed(page)
    return dict(reader.fields)


def edit_form(http: httpx.Client, name: str) -> tuple[str, dict[str, str]]:
    page = http.get(f"/ui/tools/{name}/edit")
    assert page.status_code == 200, page.text[:2000]
    return page.text, form_fields(page.text)


def new_tool_form(csrf: str, name: str, url: str, **fields: str) -> dict[str, str]:
    form = {
        "csrf_token": csrf,
        "name": name,
        "title": "Weather",
        "description": "Tells the weather",
        "tags": "ui-test, weather",
        "input_schema": json.dumps(SCHEMA, indent=2),
        "output_schema": "",
        "ann-title": "",
        "ann-readOnlyHint": "",
        "ann-destructiveHint": "",
        "ann-idempotentHint": "",
        "ann-openWorldHint": "",
        "webhook_url": url,
        "webhook_method": "POST",
        "webhook_timeout": "",
        "secret_stored": "",
        "secret_action": "none",
        "secret_new": "",
        "publish": "production",
        "op": "save",
    }
    form.update(fields)
    return form


def stored(server: UiServer, name: str) -> dict[str, Any] | None:
    with server.admin() as admin:
        answer = admin.get(f"/api/v1/tools/{name}")
        if answer.status_code == 404:
            return None
        assert answer.status_code == 200, answer.text
        entry: dict[str, Any] = answer.json()
        return entry


def make_tool(server: UiServer, url: str, **extra: Any) -> str:
    """A tool (v1) with two write-only headers and a signing secret."""
    name = f"ui-tool-edit-{secrets.token_hex(4)}"
    body = {
        "name": name,
        "title": "Weather",
        "description": "Tells the weather",
        "tags": ["ui-test"],
        "inputSchema": SCHEMA,
        "outputSchema": OUTPUT,
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "webhook": {
            "url": url,
            "method": "POST",
            "timeout_s": 12.5,
            "headers": {"Authorization": HEADER_VALUE, "X-Team": "payments"},
            "secret": FIRST_SECRET,
        },
        **extra,
    }
    with server.admin() as admin:
        created = admin.post("/api/v1/tools", json=body)
        assert created.status_code == 201, created.text
    return name


def listed_tool(server: UiServer, name: str) -> dict[str, Any] | None:
    """The tool's item in what ``tools/list`` serves now (every page of it)."""
    client = server.mcp()
    try:
        return next((t for t in list_all(client, "tools/list", "tools") if t["name"] == name), None)
    finally:
        client.http.close()


def call_tool(server: UiServer, hook: Hook, name: str) -> Recorded:
    """``tools/call`` as an agent makes it; the webhook's record of it."""
    before = len(hook.calls)
    client = server.mcp()
    try:
        answer = client.request("tools/call", {"name": name, "arguments": {"city": "Oslo"}})
    finally:
        client.http.close()
    assert answer.get("result", {}).get("isError") is False, answer
    assert len(hook.calls) == before + 1
    return hook.calls[-1]


def issues_of(page: str) -> str:
    match = re.search(r'<ul class="issues" aria-label="Problems">(.*?)</ul>', page, re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1))) if match else ""


# ------------------------------------------------------------------ tests


def test_a_tool_created_through_the_form_is_listed_and_called(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    name = f"form-tool-{secrets.token_hex(4)}"
    page = editor.get("/ui/tools/-/new")
    assert page.status_code == 200 and 'name="input_schema"' in page.text
    csrf = CSRF.search(page.text).group(1)  # type: ignore[union-attr]
    secret = "form-secret-" + secrets.token_hex(8)
    form = new_tool_form(
        csrf,
        name,
        hook.url("/weather"),
        output_schema=json.dumps(OUTPUT),
        **{"ann-readOnlyHint": "true", "ann-idempotentHint": "false", "ann-title": "Weather now"},
        webhook_method="PUT",
        webhook_timeout="7.5",
        **{"hdr-0-name": "X-Team", "hdr-0-value": "payments", "hdr-0-stored": ""},
        secret_action="replace",
        secret_new=secret,
        change_note="made in the form",
    )
    created = editor.post("/ui/tools/-/new", data=form)
    assert created.status_code == 303, created.text[:3000]
    assert created.headers["location"] == f"/ui/tools/{name}"

    entry = stored(ui_server, name)
    assert entry is not None and entry["change_note"] == "made in the form" and entry["author"] == "ui-editor"
    hook_spec = entry["spec"]["webhook"]
    assert hook_spec == {
        "url": hook.url("/weather"),
        "method": "PUT",
        "timeout_s": 7.5,
        "headers": {"X-Team": "********"},
        "secret": "********",
    }
    listed = listed_tool(ui_server, name)
    assert listed == {
        "name": name,
        "title": "Weather",
        "description": "Tells the weather",
        "inputSchema": SCHEMA,
        "outputSchema": OUTPUT,
        "annotations": {"title": "Weather now", "readOnlyHint": True, "idempotentHint": False},
    }
    call = call_tool(ui_server, hook, name)
    assert call.headers["x-team"] == "payments"
    assert verify(secret, call.body, call.headers[SIGNATURE_HEADER.lower()])


def test_the_check_lists_schema_problems_with_path_and_line(editor: httpx.Client, hook: Hook) -> None:
    csrf = CSRF.search(editor.get("/ui/tools/-/new").text).group(1)  # type: ignore[union-attr]
    fine = editor.post("/ui/tools/-/check", data=new_tool_form(csrf, "checked", hook.url()))
    assert fine.status_code == 200 and fine.text.lstrip().startswith('<div id="check-results"')
    assert "No problems: this saves." in fine.text
    assert 'aria-label="tools/list item"' in fine.text and "city" in fine.text

    meta = editor.post(
        "/ui/tools/-/check", data=new_tool_form(csrf, "checked", hook.url(), input_schema='{"type": "nope"}')
    )
    problems = issues_of(meta.text)
    assert "Input schema" in problems and "not a valid JSON Schema 2020-12 at type" in problems, problems

    nested = {"type": "object", "properties": {"when": {"type": "string", "minLength": -1}}}
    deep = editor.post(
        "/ui/tools/-/check", data=new_tool_form(csrf, "checked", hook.url(), output_schema=json.dumps(nested))
    )
    assert "Output schema" in issues_of(deep.text) and "at properties/when/minLength" in issues_of(deep.text)

    broken = '{\n  "type": "object"\n  "properties": {}\n}'
    syntax = editor.post("/ui/tools/-/check", data=new_tool_form(csrf, "checked", hook.url(), input_schema=broken))
    problems = issues_of(syntax.text)
    assert "Input schema: not valid JSON: line 3, column 3: Expecting ',' delimiter" in problems, problems
    assert "Fix the problems above" in syntax.text  # no listing of a schema that is not one

    too_big = json.dumps({"type": "object", "description": "x" * (4 * 64 * 1024)})
    big = editor.post("/ui/tools/-/check", data=new_tool_form(csrf, "checked", hook.url(), input_schema=too_big))
    assert "REGISTRY_LIMIT_SCHEMA_BYTES" in issues_of(big.text)


def test_a_bad_schema_is_refused_and_nothing_is_written(ui_server: UiServer, editor: httpx.Client, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, name)
    for bad in ('{"type": "nope"}', '{\n  "type": "object",\n  "properties": {,}\n}'):
        refused = editor.post(f"/ui/tools/{name}/edit", data={**form, "input_schema": bad, "op": "save"})
        assert refused.status_code == 422 and 'role="alert"' in refused.text, refused.text[:2000]
        assert bad in html.unescape(refused.text)  # what was typed stays in the form
        assert "Traceback" not in refused.text
    assert "line 3, column 18" in html.unescape(refused.text)
    entry = stored(ui_server, name)
    assert entry is not None and entry["latest_version"] == 1

    new_name = f"never-made-{secrets.token_hex(4)}"
    csrf = form["csrf_token"]
    never = editor.post(
        "/ui/tools/-/new", data=new_tool_form(csrf, new_name, hook.url(), input_schema='{"type": "nope"}')
    )
    assert never.status_code == 422 and "not a valid JSON Schema" in html.unescape(never.text)
    assert stored(ui_server, new_name) is None


def test_an_edit_that_does_not_replace_them_keeps_headers_and_secret(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url())
    page, form = edit_form(editor, name)
    assert FIRST_SECRET not in page and "keep-me" not in page and "payments" not in page
    assert (
        form["hdr-0-name"] == "Authorization" and form["hdr-0-value"] == "" and form["hdr-0-stored"] == "Authorization"
    )
    assert form["secret_action"] == "keep" and form["secret_new"] == ""
    assert json.loads(form["input_schema"]) == SCHEMA and json.loads(form["output_schema"]) == OUTPUT
    assert (
        form["webhook_timeout"] == "12.5"
        and form["ann-readOnlyHint"] == "true"
        and form["ann-openWorldHint"] == "false"
    )

    # Saving the form as it came: every field survives the round trip, so there is nothing to save.
    same = editor.post(f"/ui/tools/{name}/edit", data={**form, "op": "save"})
    assert same.status_code == 303, same.text[:3000]
    assert "Nothing%20to%20save" in same.headers.get("set-cookie", "")
    assert stored(ui_server, name)["latest_version"] == 1  # type: ignore[index]

    saved = editor.post(
        f"/ui/tools/{name}/edit", data={**form, "description": "Tells the weather, politely", "op": "save"}
    )
    assert saved.status_code == 303, saved.text[:3000]
    entry = stored(ui_server, name)
    assert entry is not None and entry["latest_version"] == 2
    assert entry["spec"]["description"] == "Tells the weather, politely"
    assert entry["spec"]["webhook"]["headers"] == {"Authorization": "********", "X-Team": "********"}
    assert listed_tool(ui_server, name)["description"] == "Tells the weather, politely"  # type: ignore[index]

    call = call_tool(ui_server, hook, name)
    assert call.headers["authorization"] == HEADER_VALUE and call.headers["x-team"] == "payments"
    assert verify(FIRST_SECRET, call.body, call.headers[SIGNATURE_HEADER.lower()])


@pytest.mark.parametrize("name", ["echo", "add"])
def test_the_demo_tools_round_trip_through_the_form_unchanged(editor: httpx.Client, name: str) -> None:
    _page, form = edit_form(editor, name)
    assert form["webhook_url"] == f"builtin://{name}"
    same = editor.post(f"/ui/tools/{name}/edit", data={**form, "op": "save"})
    assert same.status_code == 303, same.text[:3000]
    assert "Nothing%20to%20save" in same.headers.get("set-cookie", "")


def test_replacing_the_secret_changes_the_signature_and_no_page_shows_it(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, name)
    second = "second-secret-" + secrets.token_hex(8)

    # A new secret typed on a form with a problem is not sent back into the page.
    again = editor.post(
        f"/ui/tools/{name}/edit",
        data={**form, "secret_action": "replace", "secret_new": second, "input_schema": "{", "op": "save"},
    )
    assert again.status_code == 422 and second not in again.text
    assert 'id="secret-again"' in again.text and "type it again before saving" in again.text
    assert form_fields(again.text)["secret_action"] == "replace"
    missing = editor.post(f"/ui/tools/{name}/edit", data={**form, "secret_action": "replace", "op": "save"})
    assert missing.status_code == 422 and "type the new secret" in html.unescape(missing.text)

    replaced = editor.post(
        f"/ui/tools/{name}/edit",
        data={**form, "secret_action": "replace", "secret_new": second, "hdr-1-value": "billing", "op": "save"},
    )
    assert replaced.status_code == 303, replaced.text[:3000]
    call = call_tool(ui_server, hook, name)
    signature = call.headers[SIGNATURE_HEADER.lower()]
    assert verify(second, call.body, signature) and not verify(FIRST_SECRET, call.body, signature)
    assert call.headers["authorization"] == HEADER_VALUE and call.headers["x-team"] == "billing"

    for path in (
        f"/ui/tools/{name}",
        f"/ui/tools/{name}/edit",
        f"/ui/tools/{name}/history",
        f"/ui/tools/{name}/diff?from=1&to=2",
        f"/ui/tools/{name}?version=1",
    ):
        shown = editor.get(path)
        assert shown.status_code == 200, path
        for value in (FIRST_SECRET, second, HEADER_VALUE, "billing", "payments"):
            assert value not in shown.text, (path, value)

    removed = editor.post(
        f"/ui/tools/{name}/edit", data={**edit_form(editor, name)[1], "secret_action": "remove", "op": "save"}
    )
    assert removed.status_code == 303
    assert SIGNATURE_HEADER.lower() not in call_tool(ui_server, hook, name).headers


def test_a_conflict_keeps_my_edit_and_the_stored_values(ui_server: UiServer, editor: httpx.Client, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, name)
    with ui_server.admin() as admin:
        theirs = admin.patch(f"/api/v1/tools/{name}", json={"description": "Their description"})
        assert theirs.status_code == 200, theirs.text
    mine = {**form, "title": "My title", "op": "save"}
    refused = editor.post(f"/ui/tools/{name}/edit", data=mine)
    assert refused.status_code == 409
    assert "saved version 2 while you were editing version 1" in html.unescape(refused.text)
    assert FIRST_SECRET not in refused.text and "keep-me" not in refused.text
    reapplied = form_fields(refused.text)
    assert reapplied["base_version"] == "2" and reapplied["title"] == "My title"
    assert reapplied["description"] == "Their description"
    assert reapplied["secret_action"] == "keep" and reapplied["hdr-0-stored"] == "Authorization"
    saved = editor.post(f"/ui/tools/{name}/edit", data={**reapplied, "op": "save"})
    assert saved.status_code == 303, saved.text[:3000]
    entry = stored(ui_server, name)
    assert entry is not None and entry["latest_version"] == 3
    assert entry["spec"]["title"] == "My title" and entry["spec"]["description"] == "Their description"
    call = call_tool(ui_server, hook, name)
    assert call.headers["authorization"] == HEADER_VALUE
    assert verify(FIRST_SECRET, call.body, call.headers[SIGNATURE_HEADER.lower()])


def test_urls_the_guard_refuses_and_origin_moves_are_explained(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    csrf = CSRF.search(editor.get("/ui/tools/-/new").text).group(1)  # type: ignore[union-attr]
    name = f"guarded-{secrets.token_hex(4)}"
    for url in ("http://10.20.30.40/hook", "http://169.254.169.254/latest/meta-data"):
        checked = editor.post("/ui/tools/-/check", data=new_tool_form(csrf, name, url))
        problems = issues_of(checked.text)
        assert "Webhook URL: refused outbound URL: refusing to connect to" in problems, problems
        assert "REGISTRY_WEBHOOK_ALLOWED_NETWORKS" in problems
        refused = editor.post("/ui/tools/-/new", data=new_tool_form(csrf, name, url))
        assert refused.status_code == 422 and "refusing to connect to" in html.unescape(refused.text)
    assert stored(ui_server, name) is None

    # Kept (masked) values may not follow the URL to another origin: the check says so before a save.
    existing = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, existing)
    elsewhere = f"http://127.0.0.2:{hook.port}/hook"
    checked = editor.post("/ui/tools/-/check", data={**form, "webhook_url": elsewhere})
    assert "another origin" in issues_of(checked.text)
    moved = editor.post(f"/ui/tools/{existing}/edit", data={**form, "webhook_url": elsewhere, "op": "save"})
    assert moved.status_code == 422 and "another origin" in html.unescape(moved.text)
    assert stored(ui_server, existing)["latest_version"] == 1  # type: ignore[index]


def test_header_row_buttons_change_the_form_without_saving(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, name)
    added = editor.post(f"/ui/tools/{name}/edit", data={**form, "description": "unsaved words", "op": "add-header"})
    assert added.status_code == 200
    fields = form_fields(added.text)
    assert fields["hdr-2-name"] == "" and "hdr-3-name" not in fields
    assert fields["description"] == "unsaved words"
    removed = editor.post(f"/ui/tools/{name}/edit", data={**form, "op": "remove-header-0"})
    fields = form_fields(removed.text)
    assert fields["hdr-0-name"] == "X-Team" and "hdr-1-name" not in fields
    too_many = {f"hdr-{i}-name": f"X-H{i}" for i in range(40)}
    crowded = editor.post("/ui/tools/-/check", data={**form, **too_many})
    assert "REGISTRY_LIMIT_WEBHOOK_HEADERS" in issues_of(crowded.text)
    assert stored(ui_server, name)["latest_version"] == 1  # type: ignore[index]


def test_viewers_get_no_tool_editor(ui_server: UiServer, editor: httpx.Client, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url())
    _page, form = edit_form(editor, name)
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as viewer:
        assert sign_in(viewer, ui_server.viewer_token).status_code == 303
        entry_page = viewer.get(f"/ui/tools/{name}")
        assert entry_page.status_code == 200 and f"/ui/tools/{name}/edit" not in entry_page.text
        assert viewer.get(f"/ui/tools/{name}/edit").status_code == 403
        assert viewer.get("/ui/tools/-/new").status_code == 403
        csrf = CSRF.search(entry_page.text).group(1)  # type: ignore[union-attr]
        forged = {**form, "csrf_token": csrf, "description": "viewer was here", "op": "save"}
        assert viewer.post(f"/ui/tools/{name}/edit", data=forged).status_code == 403
        assert viewer.post("/ui/tools/-/check", data=forged).status_code == 403
    assert stored(ui_server, name)["latest_version"] == 1  # type: ignore[index]


def test_deeply_nested_schemas_are_a_problem_on_the_form(editor: httpx.Client, hook: Hook) -> None:
    """The input and output schema fields, nested far too deep: the limit on the form, no 500."""
    csrf = CSRF.search(editor.get("/ui/tools/-/new").text).group(1)  # type: ignore[union-attr]
    deep = "[" * 5000 + "]" * 5000
    for key, label in (("input_schema", "Input schema"), ("output_schema", "Output schema")):
        form = new_tool_form(csrf, "deep-schema", hook.url(), **{key: deep})
        for path, extra in (("/ui/tools/-/check", {}), ("/ui/tools/-/new", {"op": "save"})):
            answer = editor.post(path, data={**form, **extra})
            assert answer.status_code in (200, 422), (key, path, answer.text[:500])
            assert f"{label}: JSON nested deeper than 64 levels" in html.unescape(answer.text), (key, path)
