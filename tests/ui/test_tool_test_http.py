"""The tool test-call page at the HTTP level: a real server process, a real loopback webhook.

The webhook streams NDJSON progress slowly, so the tests can tell a streamed answer (progress
events arriving while the webhook still works) from a buffered one. What the page runs is compared
with what an agent's ``tools/call`` gets for the same arguments.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from registry.ui.schema_form import FormInputError, build_form, read_fields, read_raw_json
from registry.ui.security import CONTENT_SECURITY_POLICY
from registry.ui.tool_test import (
    MAX_SHOWN_NOTIFICATIONS,
    RunSlots,
    TooManyRuns,
    describe_content,
    describe_notification,
)
from tests.http import TLS
from tests.serve_process import ServerProcess
from tests.thread_server import port_of, serving_in_thread
from tests.ui.conftest import CSRF, UiServer, csrf_of, sign_in

NDJSON = "application/x-ndjson"
#: Seconds between the slow webhook's lines: long enough to see each one arrive on its own.
STEP_S = 0.4

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "title": "Text", "description": "What to process", "default": "hello"},
        "mode": {"type": "string", "enum": ["fast", "careful"], "default": "careful"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "ratio": {"type": "number"},
        "loud": {"type": "boolean", "description": "Shout the answer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["text", "count"],
}


# ------------------------------------------------------------------ the loopback webhook


@dataclass
class HookState:
    hits: dict[str, int] = field(default_factory=dict)
    #: The arguments each call of ``/record?key=`` carried, by key, in order.
    received: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Set when a stream of ``/forever?key=`` ended (the registry hung up).
    closed: dict[str, threading.Event] = field(default_factory=dict)

    def closed_event(self, key: str) -> threading.Event:
        return self.closed.setdefault(key, threading.Event())


def _line(value: Any) -> bytes:
    return json.dumps(value).encode() + b"\n"


def _hook_app(state: HookState) -> ASGIApp:
    async def slow(request: Request) -> Response:
        """Three progress lines and a log line, ``STEP_S`` apart, then a result echoing the arguments."""
        envelope = json.loads(await request.body())
        arguments = envelope["arguments"]

        async def lines() -> AsyncIterator[bytes]:
            yield _line({"progress": 1, "total": 3, "message": "starting"})
            await asyncio.sleep(STEP_S)
            yield _line({"log": {"level": "info", "data": {"step": 1}}})
            yield _line({"progress": 2, "total": 3, "message": "halfway"})
            await asyncio.sleep(STEP_S)
            yield _line({"progress": 3, "total": 3, "message": "finishing"})
            await asyncio.sleep(STEP_S)
            text = f"done: {arguments.get('text')}"
            yield _line({"result": {"content": [{"type": "text", "text": text}], "structuredContent": arguments}})

        return StreamingResponse(lines(), media_type=NDJSON)

    async def forever(request: Request) -> Response:
        key = request.query_params.get("key", "")
        closed = state.closed_event(key)

        async def lines() -> AsyncIterator[bytes]:
            try:
                n = 0
                while True:
                    n += 1
                    yield _line({"progress": n, "message": f"tick {n}"})
                    await asyncio.sleep(0.05)
            finally:
                closed.set()

        return StreamingResponse(lines(), media_type=NDJSON)

    async def many(request: Request) -> Response:
        """More log lines than the page lists, then a result."""
        body = b"".join(_line({"log": {"level": "debug", "data": f"line {n}"}}) for n in range(1, 301))
        return Response(body + _line({"result": {"content": [{"type": "text", "text": "many"}]}}), media_type=NDJSON)

    async def record(request: Request) -> Response:
        """Keeps the arguments it was called with (under ``?key=``) and answers them as text."""
        arguments = json.loads(await request.body())["arguments"]
        state.received.setdefault(request.query_params.get("key", ""), []).append(arguments)
        return JSONResponse({"content": [{"type": "text", "text": json.dumps(arguments, sort_keys=True)}]})

    async def html_result(request: Request) -> Response:
        return JSONResponse({"content": [{"type": "text", "text": "<img src=x onerror=alert(1)><b>bold</b>"}]})

    async def failing(request: Request) -> Response:
        return Response("upstream exploded", status_code=500, media_type="text/plain")

    starlette = Starlette(
        routes=[
            Route("/slow", slow, methods=["POST"]),
            Route("/forever", forever, methods=["POST"]),
            Route("/html", html_result, methods=["POST"]),
            Route("/record", record, methods=["POST"]),
            Route("/many", many, methods=["POST"]),
            Route("/status/500", failing, methods=["POST"]),
        ]
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state.hits[scope["path"]] = state.hits.get(scope["path"], 0) + 1
        await starlette(scope, receive, send)

    return app


@dataclass
class Hook:
    port: int
    state: HookState

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def running_hook() -> Iterator[Hook]:
    """A webhook on 127.0.0.1 (the UI test server allows loopback webhooks: tests/ui/conftest.py)."""
    state = HookState()
    with serving_in_thread(_hook_app(state), name="the loopback webhook", timeout_graceful_shutdown=1) as server:
        yield Hook(port_of(server), state)


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    with running_hook() as running:
        yield running


def make_tool(server: UiServer, url: str, *, schema: dict[str, Any] | None = None, **webhook: Any) -> str:
    name = f"ui-test-call-{secrets.token_hex(4)}"
    body = {
        "name": name,
        "description": "A tool the test-call page runs",
        "inputSchema": schema if schema is not None else SCHEMA,
        "webhook": {"url": url, **webhook},
    }
    with server.admin() as admin:
        created = admin.post("/api/v1/tools", json=body)
        assert created.status_code == 201, created.text
    return name


def form_body(csrf: str, **fields: str) -> dict[str, str]:
    return {"csrf_token": csrf, "label": "production", "mode": "form", **fields}


@dataclass
class Event:
    name: str
    data: dict[str, Any]
    at: float  # seconds since the request was sent, when the event arrived


def stream_events(http: httpx.Client, path: str, body: dict[str, str], csrf: str) -> tuple[httpx.Response, list[Event]]:
    """POST as the page's script does and read the server-sent events as they arrive."""
    events: list[Event] = []
    started = time.monotonic()
    headers = {"Accept": "text/event-stream", "X-CSRF-Token": csrf}
    with http.stream("POST", path, data=body, headers=headers) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
            return response, events
        buffer = ""
        for chunk in response.iter_text():
            buffer += chunk.replace("\r\n", "\n")
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                name, data = "message", []
                for line in block.split("\n"):
                    if line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
                if data:
                    events.append(Event(name, json.loads("\n".join(data)), time.monotonic() - started))
    return response, events


def agent_call(server: UiServer, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    client = server.mcp()
    try:
        answer = client.request("tools/call", {"name": name, "arguments": arguments})
    finally:
        client.http.close()
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


# ------------------------------------------------------------------ the page and its form


def test_the_form_is_generated_from_the_input_schema(editor: httpx.Client, ui_server: UiServer, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    entry = editor.get(f"/ui/tools/{name}")
    assert f'href="/ui/tools/{name}/test"' in entry.text, "the entry page links to the test page for editors"
    page = editor.get(f"/ui/tools/{name}/test")
    assert page.status_code == 200
    text = page.text
    assert re.search(r'<input type="text" id="arg-0" name="arg.text" value="hello"', text)
    assert 'Text <span class="required">(required)</span>' in text and "What to process" in text
    mode = re.search(r'<select id="arg-1" name="arg.mode".*?</select>', text, re.S)
    assert mode and '<option value="1" data-json=\'"careful"\' selected>careful</option>' in mode.group(0)
    count = re.search(r'<input type="number" id="arg-2" name="arg.count"[^>]*>', text, re.S)
    assert count and 'value="3"' in count.group(0) and 'min="1"' in count.group(0) and 'max="10"' in count.group(0)
    assert 'step="1"' in count.group(0) and 'aria-required="true"' in count.group(0)
    assert re.search(r'<input type="number" id="arg-3" name="arg.ratio" value="" step="any"', text)
    # An optional boolean: "leave out" (the default here), true or false; never a checkbox.
    loud = re.search(r'<select id="arg-4" name="arg.loud".*?</select>', text, re.S)
    assert loud and '<option value="" selected>(leave out)</option>' in loud.group(0)
    assert "<option value=\"0\" data-json='true'>true</option>" in loud.group(0)
    assert "<option value=\"1\" data-json='false'>false</option>" in loud.group(0)
    assert 'name="arg.loud" value="true"' not in text
    # A string: its "send an empty string" box.
    assert '<input type="checkbox" id="arg-0-empty" name="empty.text" value="true">' in text
    assert re.search(r'<textarea id="arg-5" name="arg.tags"', text)
    assert 'id="mode-form" name="mode" value="form" checked' in text
    assert '<textarea id="arguments-json" name="arguments_json"' in text
    assert '<script src="/ui/static/tool_test.js" defer></script>' in text
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=", text) is None, "inline script/style"
    assert editor.get("/ui/static/tool_test.js").status_code == 200
    assert "production (v1)" in text and "version 1 (production)" in text


def test_a_schema_beyond_a_form_starts_in_raw_json(editor: httpx.Client, ui_server: UiServer, hook: Hook) -> None:
    union = {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}], "properties": {"a": {}}}
    name = make_tool(ui_server, hook.url("/slow"), schema=union)
    page = editor.get(f"/ui/tools/{name}/test").text
    assert 'id="mode-json" name="mode" value="json" checked' in page
    assert "oneOf" in page and "cannot express" in page


def test_viewers_may_not_run_tools_and_forms_need_their_csrf_token(
    ui_server: UiServer, editor: httpx.Client, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    path = f"/ui/tools/{name}/test"
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as viewer:
        assert sign_in(viewer, ui_server.viewer_token).status_code == 303
        assert f'href="{path}"' not in viewer.get(f"/ui/tools/{name}").text, "no test link for viewers"
        assert viewer.get(path).status_code == 403
        csrf = CSRF.search(viewer.get("/ui/").text)
        assert csrf
        refused = viewer.post(path, data=form_body(csrf.group(1), **{"arg.text": "x", "arg.count": "1"}))
        assert refused.status_code == 403 and "this needs editor" in refused.text
    hits = hook.state.hits.get("/slow", 0)
    no_token = editor.post(path, data={"label": "production", "mode": "form", "arg.text": "x", "arg.count": "1"})
    assert no_token.status_code == 403 and "security token" in no_token.text
    wrong = editor.post(
        path, data=form_body("not-the-token", **{"arg.text": "x"}), headers={"Accept": "text/event-stream"}
    )
    assert wrong.status_code == 403
    assert hook.state.hits.get("/slow", 0) == hits, "nothing reached the webhook"


# ------------------------------------------------------------------ running it


def test_the_streamed_run_shows_progress_before_the_result_and_matches_tools_call(
    editor: httpx.Client, ui_server: UiServer, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    path = f"/ui/tools/{name}/test"
    csrf = csrf_of(editor, path)
    fields = {"arg.text": "streamed", "arg.mode": "0", "arg.count": "4", "arg.ratio": "0.5", "arg.tags": '["a", "b"]'}
    response, events = stream_events(editor, path, form_body(csrf, **fields), csrf)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    names = [e.name for e in events]
    assert names[0] == "started" and names[-1] == "result", names
    assert events[0].data == {"name": name, "version": 1, "label": "production"}
    notes = [e for e in events if e.name == "notification"]
    methods = [e.data["notification"]["method"] for e in notes]
    progress, message = "notifications/progress", "notifications/message"
    assert methods == [progress, message, progress, progress]
    first = notes[0].data["notification"]["params"]
    assert first == {"progressToken": "test", "progress": 1, "total": 3, "message": "starting"}
    result_event = events[-1]
    # Streamed, not buffered: the first progress arrived while the webhook still had ~3 steps to go.
    assert result_event.at - notes[0].at >= 2.5 * STEP_S, [(e.name, round(e.at, 2)) for e in events]
    assert notes[0].data["t"] < notes[-1].data["t"] <= result_event.data["t"]
    arguments = {"text": "streamed", "mode": "fast", "count": 4, "ratio": 0.5, "tags": ["a", "b"]}
    assert result_event.data["result"]["structuredContent"] == arguments
    assert result_event.data["result"] == agent_call(ui_server, name, arguments)
    assert result_event.data["omitted"] == 0


def test_without_javascript_the_post_answers_the_result_page(
    editor: httpx.Client, ui_server: UiServer, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    path = f"/ui/tools/{name}/test"
    csrf = csrf_of(editor, path)
    raw = json.dumps({"text": "plain <post>", "count": 2})
    page = editor.post(path, data=form_body(csrf, mode="json", arguments_json=raw))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert "Ran version 1 (production)." in text
    assert "done: plain &lt;post&gt;" in text and "<post>" not in text
    assert "The tool answered (<code>isError: false</code>)." in text
    listed = re.findall(r'<li class="note-(\w+)">.*?<span class="note-text">(.*?)</span>', text, re.S)
    assert [(kind, html.unescape(shown)) for kind, shown in listed] == [
        ("progress", "1 / 3 — starting"),
        ("log", '{"step":1}'),
        ("progress", "2 / 3 — halfway"),
        ("progress", "3 / 3 — finishing"),
    ]
    assert 'id="mode-json" name="mode" value="json" checked' in text, "the form comes back as it was sent"
    kept = re.search(r'<textarea id="arguments-json"[^>]*>(.*?)</textarea>', text, re.S)
    assert kept and html.unescape(kept.group(1)) == raw


def test_failures_are_results_or_form_errors_and_nothing_crashes(
    editor: httpx.Client, ui_server: UiServer, hook: Hook
) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    path = f"/ui/tools/{name}/test"
    csrf = csrf_of(editor, path)
    hits = hook.state.hits.get("/slow", 0)

    bad_json = editor.post(path, data=form_body(csrf, mode="json", arguments_json="{nope"))
    assert bad_json.status_code == 400 and "The JSON arguments: not valid JSON" in bad_json.text
    not_object = editor.post(path, data=form_body(csrf, mode="json", arguments_json="[1]"))
    assert not_object.status_code == 400 and "must be an object" in not_object.text
    bad_number = editor.post(path, data=form_body(csrf, **{"arg.text": "x", "arg.count": "three"}))
    assert bad_number.status_code == 400
    assert "count: &#39;three&#39; is not a whole number" in bad_number.text
    assert 'aria-invalid="true"' in bad_number.text
    streamed_error = editor.post(
        path, data=form_body(csrf, **{"arg.count": "x"}), headers={"Accept": "text/event-stream", "X-CSRF-Token": csrf}
    )
    assert streamed_error.status_code == 400 and streamed_error.headers["content-type"].startswith("text/html")
    assert hook.state.hits.get("/slow", 0) == hits, "no webhook call for a form error"

    # A required string left empty: a form error at the field, nothing sent.
    empty = editor.post(path, data=form_body(csrf, **{"arg.text": "", "arg.count": "2"}))
    assert empty.status_code == 400 and "nothing was sent" in empty.text
    assert "Text: required: type a value, or tick “send an empty string” to send one" in empty.text
    assert hook.state.hits.get("/slow", 0) == hits, "no webhook call for a required field left empty"

    # Arguments the schema refuses: an isError result, exactly as an agent gets it. (An empty
    # string, sent because its box says so.)
    fields = {"arg.text": "", "empty.text": "true", "arg.count": "99"}
    _, events = stream_events(editor, path, form_body(csrf, **fields), csrf)
    result = events[-1].data["result"]
    assert result["isError"] is True and "invalid arguments" in result["content"][0]["text"]
    assert result == agent_call(ui_server, name, {"text": "", "count": 99})

    failing = make_tool(ui_server, hook.url("/status/500"), schema={"type": "object"})
    page = editor.post(f"/ui/tools/{failing}/test", data=form_body(csrf, mode="json", arguments_json="{}"))
    assert page.status_code == 200 and "isError: true" in page.text and "HTTP 500" in page.text

    slow = make_tool(ui_server, hook.url("/forever?key=timeout"), schema={"type": "object"}, timeout_s=1)
    _, events = stream_events(editor, f"/ui/tools/{slow}/test", form_body(csrf, mode="json"), csrf)
    assert events[-1].name == "result" and "timed out after 1 s" in events[-1].data["result"]["content"][0]["text"]
    assert sum(1 for e in events if e.name == "notification") >= 5

    unknown = editor.post("/ui/tools/no-such-tool/test", data=form_body(csrf))
    assert unknown.status_code == 404
    no_label = editor.get(f"/ui/tools/{name}/test?label=canary")
    assert no_label.status_code == 404 and "no label" in no_label.text


def test_webhook_output_is_text_never_html(editor: httpx.Client, ui_server: UiServer, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url("/html"), schema={"type": "object"})
    path = f"/ui/tools/{name}/test"
    page = editor.post(path, data=form_body(csrf_of(editor, path), mode="json", arguments_json="{}"))
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;b&gt;bold&lt;/b&gt;" in page.text
    assert "<img src=x" not in page.text and "<b>bold" not in page.text


def test_the_version_to_run_can_be_chosen(editor: httpx.Client, ui_server: UiServer, hook: Hook) -> None:
    name = make_tool(ui_server, hook.url("/slow"))
    v2 = {"type": "object", "properties": {"text": {"type": "string", "default": "second"}}}
    with ui_server.admin() as admin:
        saved = admin.put(
            f"/api/v1/tools/{name}",
            json={
                "name": name,
                "description": "v2",
                "inputSchema": v2,
                "webhook": {"url": hook.url("/slow")},
                "labels": ["staging"],
            },
        )
        assert saved.status_code == 200, saved.text
    production = editor.get(f"/ui/tools/{name}/test").text
    assert "version 1 (production)" in production and 'name="arg.count"' in production
    latest = editor.get(f"/ui/tools/{name}/test?label=latest").text
    assert "version 2 (latest)" in latest and 'name="arg.count"' not in latest and 'value="second"' in latest
    assert '<input type="hidden" name="label" value="latest">' in latest
    by_number = editor.get(f"/ui/tools/{name}/test?version=2").text
    assert '<input type="hidden" name="version" value="2">' in by_number
    csrf = csrf_of(editor, f"/ui/tools/{name}/test")
    body = {"csrf_token": csrf, "version": "2", "mode": "form", "arg.text": "v2 run"}
    _, events = stream_events(editor, f"/ui/tools/{name}/test", body, csrf)
    assert events[0].data == {"name": name, "version": 2, "label": None}
    assert events[-1].data["result"]["structuredContent"] == {"text": "v2 run"}
    assert editor.get(f"/ui/tools/{name}/test?version=9").status_code == 404


def test_closing_the_stream_cancels_the_call_and_runs_are_bounded(
    editor: httpx.Client, ui_server: UiServer, hook: Hook
) -> None:
    key = secrets.token_hex(4)
    name = make_tool(ui_server, hook.url(f"/forever?key={key}"), schema={"type": "object"}, timeout_s=120)
    path = f"/ui/tools/{name}/test"
    csrf = csrf_of(editor, path)
    headers = {"Accept": "text/event-stream", "X-CSRF-Token": csrf}
    body = form_body(csrf, mode="json")
    with editor.stream("POST", path, data=body, headers=headers) as response:
        lines = response.iter_lines()
        assert any("notifications/progress" in line for line in lines)
    assert hook.state.closed_event(key).wait(10), "the webhook call goes on after the browser left"

    # The same without JavaScript: the plain POST waits for the call, and leaving cancels it.
    plain_key = secrets.token_hex(4)
    plain = make_tool(ui_server, hook.url(f"/forever?key={plain_key}"), schema={"type": "object"}, timeout_s=120)
    with pytest.raises(httpx.ReadTimeout):
        editor.post(f"/ui/tools/{plain}/test", data=body, timeout=1.0)
    assert hook.state.closed_event(plain_key).wait(10), "the plain POST's call goes on after the browser left"

    # At most RUNS_PER_SESSION (4) run at once for one session; the fifth is refused with a page.
    opened: list[Any] = []
    try:
        for _ in range(4):
            stream = editor.stream("POST", path, data=body, headers=headers)
            response = stream.__enter__()
            lines = response.iter_lines()
            opened.append((stream, lines))  # a dropped line iterator would close its connection
            assert response.status_code == 200
            assert any("started" in line for line in lines)
        fifth = editor.post(path, data=body, headers=headers)
        assert fifth.status_code == 429 and "at most 4 run at once per session" in fifth.text
    finally:
        for stream, _lines in opened:
            stream.__exit__(None, None, None)
    deadline = time.monotonic() + 10
    while True:  # the slots are freed once the server sees the connections close
        with editor.stream("POST", path, data=body, headers=headers) as again:
            status = again.status_code
            if status == 200:
                assert any("started" in line for line in again.iter_lines())
        if status != 429 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200


def test_the_notifications_shown_are_bounded(tmp_path: Path, hook: Hook) -> None:
    """With the relay's rate limit out of the way, a webhook's 300 log lines reach the page as the
    first MAX_SHOWN_NOTIFICATIONS (200) and a count of the rest, streamed or not."""
    env = {"REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "REGISTRY_LIMIT_PROGRESS_PER_SECOND": "100000"}
    with ServerProcess(tmp_path / "data", name="tool-test-bounds", env=env) as process:
        with process.admin() as admin:
            created = admin.post(
                "/api/v1/tools",
                json={
                    "name": "chatty",
                    "description": "x",
                    "inputSchema": {"type": "object"},
                    "webhook": {"url": hook.url("/many")},
                },
            )
            assert created.status_code == 201, created.text
        with httpx.Client(base_url=process.url, timeout=30, verify=TLS) as http:
            assert sign_in(http, process.admin_token).status_code == 303
            path = "/ui/tools/chatty/test"
            csrf = csrf_of(http, path)
            _, events = stream_events(http, path, form_body(csrf, mode="json"), csrf)
            notes = [e.data["notification"]["params"]["data"] for e in events if e.name == "notification"]
            assert notes == [f"line {n}" for n in range(1, MAX_SHOWN_NOTIFICATIONS + 1)]
            assert events[-1].data["omitted"] == 300 - MAX_SHOWN_NOTIFICATIONS
            page = http.post(path, data=form_body(csrf, mode="json")).text
            assert page.count('<li class="note-log">') == MAX_SHOWN_NOTIFICATIONS
            assert "100 more not shown (at most 200 are listed)." in page


# ------------------------------------------------------------------ the pieces, without a server


def test_form_fields_read_back_as_arguments() -> None:
    form = build_form(SCHEMA)
    assert [f.widget for f in form.fields] == ["text", "select", "integer", "number", "select", "json"]
    sent = {"arg.text": "", "empty.text": "true", "arg.mode": "1", "arg.count": "7", "arg.ratio": "", "arg.tags": ""}
    assert read_fields(form, {**sent, "arg.loud": "0"}) == {"text": "", "mode": "careful", "count": 7, "loud": True}
    assert read_fields(form, {**sent, "arg.loud": "1"}) == {"text": "", "mode": "careful", "count": 7, "loud": False}
    assert read_fields(form, {**sent, "arg.loud": ""}) == {"text": "", "mode": "careful", "count": 7}
    assert not form.has_errors
    bad = read_fields(form, {"arg.mode": "5", "arg.ratio": "nan", "arg.tags": "[1,", "arg.count": "1.5"})
    assert bad == {}
    errors = {f.name: f.error for f in form.fields if f.error}
    assert set(errors) == {"text", "mode", "ratio", "tags", "count"}
    assert errors["text"] == "required: type a value, or tick “send an empty string” to send one"
    # Required fields left empty are refused at the field, whatever their kind; optional ones left out.
    kinds: dict[str, Any] = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": "number"},
            "i": {"type": "integer"},
            "e": {"enum": ["a", "b"]},
            "o": {"type": "object"},
            "b": {"type": "boolean"},
        },
    }
    optional = build_form(kinds)
    assert read_fields(optional, {}) == {} and not optional.has_errors
    assert read_fields(optional, {"empty.s": "true", "arg.n": "0", "arg.i": "0"}) == {"s": "", "n": 0, "i": 0}
    required = build_form({**kinds, "required": list(kinds["properties"])})
    assert read_fields(required, {}) == {"b": False}  # a required boolean stays a checkbox: unchecked is false
    assert {f.name: f.error for f in required.fields if f.error} == {
        "s": "required: type a value, or tick “send an empty string” to send one",
        "n": "required: enter a number",
        "i": "required: enter a whole number",
        "e": "required: choose a value",
        "o": "required: enter a JSON value",
    }
    # An optional boolean with a default starts on it.
    defaulted = build_form({"type": "object", "properties": {"b": {"type": "boolean", "default": False}}})
    assert defaulted.fields[0].widget == "select" and defaulted.fields[0].value == "1"
    assert read_raw_json("") == {} and read_raw_json('{"a": [1]}') == {"a": [1]}
    with pytest.raises(FormInputError, match="REGISTRY_LIMIT_JSON_DEPTH"):
        read_raw_json("[" * 100 + "]" * 100)
    empty = build_form({"type": "object"})
    assert empty.fields == [] and empty.prefer_json
    closed = build_form({"type": "object", "additionalProperties": False})
    assert closed.fields == [] and not closed.prefer_json
    assert build_form({"type": "array"}).prefer_json
    many = build_form({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(101)}})
    assert many.fields == [] and many.note and "at most 100" in many.note


def test_results_and_notifications_are_described_not_rendered() -> None:
    png = describe_content({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="})
    assert png["src"] == "data:image/png;base64,iVBORw0KGgo=" and png["size"] == 8
    svg = describe_content({"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="})
    assert svg["src"] is None, "only raster images are shown inline"
    weird = describe_content({"type": "image", "mimeType": "image/png", "data": '"><script>'})
    assert weird["src"] is None
    assert describe_content({"type": "mystery", "x": 1})["json"] == '{\n  "type": "mystery",\n  "x": 1\n}'
    progress = {"method": "notifications/progress", "params": {"progressToken": "t", "progress": 0.5, "total": 2}}
    assert describe_notification(progress, 1.0)["text"] == "0.5 / 2"
    long_log = {"method": "notifications/message", "params": {"level": "warning", "data": "x" * 5000}}
    described = describe_notification(long_log, 0.0)
    assert described["level"] == "warning" and len(described["text"]) == 2000 and described["text"].endswith("…")


def test_run_slots_bound_sessions_and_the_process() -> None:
    slots = RunSlots(per_session=2, total=3)
    slots.acquire("a")
    slots.acquire("a")
    with pytest.raises(TooManyRuns, match="at most 2 run at once per session"):
        slots.acquire("a")
    slots.acquire("b")
    with pytest.raises(TooManyRuns, match="at most 3 at once"):
        slots.acquire("c")
    slots.release("a")
    slots.acquire("c")


def test_deeply_nested_json_arguments_are_form_errors(editor: httpx.Client, ui_server: UiServer, hook: Hook) -> None:
    """The raw JSON arguments and a JSON-valued argument field, nested far too deep: a form error
    naming the limit (no 500), and no webhook call."""
    schema = {"type": "object", "properties": {"filter": {"type": "object"}}}
    name = make_tool(ui_server, hook.url("/echo"), schema=schema)
    path = f"/ui/tools/{name}/test"
    csrf = csrf_of(editor, path)
    hits = hook.state.hits.get("/echo", 0)
    deep = "[" * 5000 + "]" * 5000
    raw = editor.post(path, data=form_body(csrf, mode="json", arguments_json=deep))
    assert raw.status_code == 400, raw.text[:500]
    assert "The JSON arguments: JSON nested deeper than 64 levels" in html.unescape(raw.text)
    field = editor.post(path, data=form_body(csrf, **{"arg.filter": deep}))
    assert field.status_code == 400, field.text[:500]
    assert "JSON nested deeper than 64 levels" in html.unescape(field.text)
    assert hook.state.hits.get("/echo", 0) == hits
