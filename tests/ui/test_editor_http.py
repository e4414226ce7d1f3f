"""The prompt editor at the HTTP level (a real server, no browser): creating and saving through
the form, the live checks and preview, conflicts that keep the unsaved text, the "saved
meanwhile" event stream, and what viewers and forged posts get."""

from __future__ import annotations

import html
import json
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from registry.ui.security import CONTENT_SECURITY_POLICY
from tests.http import TLS
from tests.ui.conftest import CSRF, UiServer, csrf_of, sign_in

BASE = re.compile(r'name="base_version" value="(\d+)"')
RAW = re.compile(r'<pre class="raw-result"[^>]*>(.*?)</pre>', re.DOTALL)


def prompt_form(
    csrf: str, *, text: str, arguments: list[dict[str, Any]] | None = None, **fields: str
) -> dict[str, str]:
    form = {"csrf_token": csrf, "msg-0-role": "user", "msg-0-type": "text", "msg-0-text": text, **fields}
    for index, arg in enumerate(arguments or []):
        form[f"arg-{index}-name"] = arg["name"]
        form[f"arg-{index}-description"] = arg.get("description", "")
        if arg.get("required"):
            form[f"arg-{index}-required"] = "1"
        form[f"arg-{index}-enum"] = arg.get("enum", "")
        form[f"arg-{index}-default"] = arg.get("default", "")
    return form


def stored(server: UiServer, name: str) -> dict[str, Any]:
    with server.admin() as admin:
        answer = admin.get(f"/api/v1/prompts/{name}")
        assert answer.status_code == 200, answer.text
        entry: dict[str, Any] = answer.json()
        return entry


def test_a_prompt_created_through_the_form_is_served_to_agents(ui_server: UiServer, editor: httpx.Client) -> None:
    name = f"form-made-{time.monotonic_ns()}"
    csrf = csrf_of(editor, "/ui/prompts/-/new")
    form = prompt_form(
        csrf,
        text="Dear {{ who }}, welcome.",
        arguments=[{"name": "who", "description": "the reader", "required": True}],
        name=name,
        title="Made in the form",
        tags="ui, forms",
        change_note="first draft",
        publish="production",
        op="save",
    )
    created = editor.post("/ui/prompts/-/new", data=form)
    assert created.status_code == 303, created.text[:2000]
    assert created.headers["location"] == f"/ui/prompts/{name}"
    entry = stored(ui_server, name)
    assert sorted(entry["spec"]["tags"]) == ["forms", "ui"] and entry["change_note"] == "first draft"
    assert entry["author"] == "ui-editor" and entry["labels"]["production"] == 1
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Dear Ada, welcome."


def test_saving_creates_a_version_on_the_chosen_label(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    page = editor.get(f"/ui/prompts/{name}/edit")
    assert page.status_code == 200 and 'value="1"' in BASE.search(page.text).group(0)  # type: ignore[union-attr]
    assert "Hello {{ who }}" in html.unescape(page.text)
    csrf = CSRF.search(page.text).group(1)  # type: ignore[union-attr]
    args = [{"name": "who", "description": "whom to greet", "required": True}]
    staged = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="Hi {{ who }}!", arguments=args, base_version="1", publish="staging", op="save"),
    )
    assert staged.status_code == 303, staged.text[:2000]
    entry = stored(ui_server, name)
    assert entry["latest_version"] == 2 and entry["labels"] == {"latest": 2, "staging": 2, "production": 1}
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Hello Ada"  # production unchanged
    published = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="Hey {{ who }}.", arguments=args, base_version="2", op="save"),
    )
    assert published.status_code == 303
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Hey Ada."


def test_a_check_sent_while_leaving_the_page_leaves_the_saved_notice_to_the_next_page(
    ui_server: UiServer, editor: httpx.Client
) -> None:
    # A field's "change" fires as Save is clicked, and its htmx check can reach the server after
    # the save's redirect set the one-shot notice and before the page it names is fetched.
    name = ui_server.create_prompt("Hello {{ who }}")
    csrf = csrf_of(editor, f"/ui/prompts/{name}/edit")
    form = prompt_form(csrf, text="Hi {{ who }}!", arguments=[{"name": "who"}], base_version="1", op="save")
    saved = editor.post(f"/ui/prompts/{name}/edit", data=form)
    assert saved.status_code == 303 and editor.cookies.get("mcpr_ui_flash"), saved.headers
    late_check = editor.post("/ui/prompts/-/check", data=form, headers={"HX-Request": "true"})
    assert late_check.status_code == 200 and "Saved" not in late_check.text
    landed = editor.get(saved.headers["location"])
    assert f"Saved {name} v2" in html.unescape(landed.text), landed.text[:3000]
    assert f"Saved {name} v2" not in html.unescape(editor.get(saved.headers["location"]).text)  # shown once


def test_row_buttons_change_the_form_without_saving(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    csrf = csrf_of(editor, f"/ui/prompts/{name}/edit")
    args = [{"name": "who", "required": True}]
    added = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="Hello {{ who }} (edited)", arguments=args, base_version="1", op="add-argument"),
    )
    assert added.status_code == 200
    assert 'name="arg-1-name"' in added.text and 'name="arg-2-name"' not in added.text
    assert "Hello {{ who }} (edited)" in html.unescape(added.text)  # the unsaved text is kept
    more = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="x", arguments=args, base_version="1", op="add-message"),
    )
    assert 'name="msg-1-text"' in more.text
    removed = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="x", arguments=args, base_version="1", op="remove-argument-0"),
    )
    assert 'name="arg-0-name"' not in removed.text
    assert stored(ui_server, name)["latest_version"] == 1


def test_an_ended_session_leaves_the_editor_page_and_sends_a_save_back_to_it(ui_server: UiServer) -> None:
    who = f"drafts-http-{time.monotonic_ns()}"
    record = ui_server.issue(who, ["editor"])
    name = ui_server.create_prompt("Hello {{ who }}")
    editor_path = f"/ui/prompts/{name}/edit"
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, record["token"]).status_code == 303
        page = http.get(editor_path)
        # Drafts are kept under the person's name, never a secret of theirs.
        assert f'data-draft-owner="token:{who}"' in page.text and record["token"] not in page.text
        csrf = CSRF.search(page.text).group(1)  # type: ignore[union-attr]
        form = prompt_form(csrf, text="Typed as it ended", base_version="1", editing=name)
        ui_server.revoke(record["id"])

        check = http.post(
            "/ui/prompts/-/check",
            data=form,
            headers={"HX-Request": "true", "HX-Current-URL": ui_server.url + editor_path},
        )
        assert check.status_code == 401 and "hx-redirect" not in check.headers, check.headers
        assert "Your session ended." in check.text and "Your edits are kept in this browser." in check.text
        signin = urlsplit(check.headers["x-sign-in"])
        assert signin.path == "/ui/signin" and parse_qs(signin.query) == {"next": [editor_path], "ended": ["1"]}
        assert html.unescape(check.headers["x-sign-in"]) in html.unescape(check.text)  # the "Sign in again" link

        # A page from somewhere else is no way back: only this UI's paths are.
        elsewhere = http.post(
            "/ui/prompts/-/check",
            data=form,
            headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example//evil.example/"},
        )
        assert parse_qs(urlsplit(elsewhere.headers["x-sign-in"]).query)["next"] == ["/ui/"]

        saved = http.post(editor_path, data={**form, "op": "save"})
        assert saved.status_code == 303
        back = urlsplit(saved.headers["location"])
        assert back.path == "/ui/signin" and parse_qs(back.query)["next"] == [editor_path]
        assert parse_qs(back.query)["unsaved"] == ["1"]
        told = http.get(saved.headers["location"])
        assert "Your session ended, so your edits were not saved." in told.text
        assert f'data-drafts-kept-for="{editor_path}"' in told.text
    assert stored(ui_server, name)["latest_version"] == 1


def test_a_restored_draft_is_rendered_from_the_post_and_a_save_tells_the_next_page(
    ui_server: UiServer, editor: httpx.Client
) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    editor_path = f"/ui/prompts/{name}/edit"
    fresh = editor.get(editor_path)
    assert 'data-draft-from="entry"' in fresh.text and 'id="draft-offer"' in fresh.text
    csrf = CSRF.search(fresh.text).group(1)  # type: ignore[union-attr]
    args = [{"name": "who", "required": True}, {"name": "mood"}]
    draft = prompt_form(csrf, text="Hello {{ who }}, {{ mood }}", arguments=args, base_version="1", editing=name)
    restored = editor.post(editor_path, data={**draft, "op": "restore"})
    assert restored.status_code == 200
    assert 'id="draft-restored"' in restored.text and 'data-draft-from="post"' in restored.text
    assert 'id="draft-offer"' not in restored.text  # a form from a post offers nothing
    assert 'name="arg-1-name"' in restored.text and "Hello {{ who }}, {{ mood }}" in html.unescape(restored.text)
    assert stored(ui_server, name)["latest_version"] == 1, "restoring saves nothing"

    saved = editor.post(editor_path, data={**draft, "op": "save"})
    assert saved.status_code == 303
    landed = editor.get(saved.headers["location"])
    marker = re.search(r'data-draft-saved="([^"]+)"', landed.text)
    assert marker and json.loads(html.unescape(marker.group(1))) == {"kind": "prompt", "name": name, "created": False}
    assert "data-draft-saved" not in editor.get(saved.headers["location"]).text  # once


def test_checks_name_the_line_of_a_syntax_error_and_undeclared_variables(editor: httpx.Client) -> None:
    csrf = csrf_of(editor, "/ui/prompts/-/new")
    broken = editor.post(
        "/ui/prompts/-/check",
        data=prompt_form(csrf, text="line one\nline two {{ who \nline three", arguments=[{"name": "who"}], name="x"),
    )
    assert broken.status_code == 200
    text = html.unescape(broken.text)
    assert re.search(r"Message 1, line \d+</span>: ", text), text
    undeclared = editor.post(
        "/ui/prompts/-/check",
        data=prompt_form(csrf, text="Hi {{ who }}\nand {{ whom }}", arguments=[{"name": "who"}], name="x"),
    )
    text = html.unescape(undeclared.text)
    assert "Message 1, line 2" in text and "whom" in text and "declare them as arguments" in text
    fine = editor.post(
        "/ui/prompts/-/check", data=prompt_form(csrf, text="Hi {{ who }}", arguments=[{"name": "who"}], name="x")
    )
    assert "No problems: this saves." in fine.text


def test_the_preview_is_what_prompts_get_returns(ui_server: UiServer, editor: httpx.Client) -> None:
    template = "{% for w in who.split(',') %}Hi {{ w|trim }}! {% endfor %}({{ tone }})"
    args = [{"name": "who", "required": True}, {"name": "tone", "enum": "warm, formal", "default": "warm"}]
    name = ui_server.create_prompt("placeholder {{ who }}")
    csrf = csrf_of(editor, f"/ui/prompts/{name}/edit")
    form = prompt_form(csrf, text=template, arguments=args, base_version="1", editing=name)
    form.update({"sample-who": "Ada, Grace", "sample-tone": "", "show_raw": "1"})
    checked = editor.post("/ui/prompts/-/check", data=form)
    match = RAW.search(checked.text)
    assert match, checked.text[:3000]
    preview = json.loads(html.unescape(match.group(1)))
    assert preview["jsonrpc"] == "2.0"
    saved = editor.post(f"/ui/prompts/{name}/edit", data={**form, "op": "save"})
    assert saved.status_code == 303, saved.text[:2000]
    client = ui_server.mcp()
    try:
        served = client.request("prompts/get", {"name": name, "arguments": {"who": "Ada, Grace"}})
    finally:
        client.http.close()
    assert preview["result"] == served["result"]
    assert served["result"]["messages"][0]["content"]["text"] == "Hi Ada! Hi Grace! (warm)"
    missing = editor.post("/ui/prompts/-/check", data={**form, "sample-who": ""})
    assert "missing required argument" in html.unescape(missing.text) or "who" in missing.text


def test_a_conflict_keeps_my_text_and_reapplies_it_on_top(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    csrf = csrf_of(editor, f"/ui/prompts/{name}/edit")
    # Someone else saves v2 (a new description) while my editor still holds v1.
    with ui_server.admin() as admin:
        theirs = admin.patch(f"/api/v1/prompts/{name}", json={"description": "Their new description"})
        assert theirs.status_code == 200, theirs.text
    args = [{"name": "who", "description": "whom to greet", "required": True}]
    mine = prompt_form(
        csrf,
        text="My unsaved text for {{ who }}",
        arguments=args,
        base_version="1",
        title="UI probe",
        description="A prompt the web UI tests change",
        tags="ui-test",
        change_note="mine",
        op="save",
    )
    refused = editor.post(f"/ui/prompts/{name}/edit", data=mine)
    assert refused.status_code == 409
    page = html.unescape(refused.text)
    assert "saved version 2 while you were editing version 1" in page
    assert "My unsaved text for {{ who }}" in page  # my text is kept in the form
    assert 'name="base_version" value="2"' in refused.text  # the form now builds on theirs
    assert "Their new description" in page  # their field is in the form (and in their diff)
    assert 'id="theirs-description"' in refused.text
    assert stored(ui_server, name)["latest_version"] == 2  # nothing of mine was written
    again = re.findall(r'<(?:input|textarea|select)[^>]*name="([^"]+)"[^>]*?(?:value="([^"]*)")?', refused.text)
    assert again  # the page is a complete form
    resubmit = {**mine, "base_version": "2", "description": "Their new description"}
    saved = editor.post(f"/ui/prompts/{name}/edit", data=resubmit)
    assert saved.status_code == 303
    entry = stored(ui_server, name)
    assert entry["latest_version"] == 3 and entry["spec"]["description"] == "Their new description"
    assert entry["spec"]["messages"][0]["content"]["text"] == "My unsaved text for {{ who }}"


def test_bad_input_is_explained_and_writes_nothing(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    csrf = csrf_of(editor, f"/ui/prompts/{name}/edit")
    broken = editor.post(
        f"/ui/prompts/{name}/edit",
        data=prompt_form(csrf, text="Hello {% if %}", arguments=[{"name": "who"}], base_version="1", op="save"),
    )
    assert broken.status_code == 422 and 'role="alert"' in broken.text
    assert "Hello {% if %}" in html.unescape(broken.text)
    duplicate = editor.post("/ui/prompts/-/new", data=prompt_form(csrf, text="x", name=name, op="save"))
    assert duplicate.status_code == 409 and "already exists" in duplicate.text
    bad_name = editor.post("/ui/prompts/-/new", data=prompt_form(csrf, text="x", name="no spaces allowed", op="save"))
    assert bad_name.status_code == 422
    assert stored(ui_server, name)["latest_version"] == 1
    assert "Traceback" not in broken.text + duplicate.text + bad_name.text


def test_viewers_get_no_editor_and_forged_posts_are_refused(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    form = prompt_form("", text="forged {{ who }}", arguments=[{"name": "who"}], base_version="1", op="save")
    no_csrf = editor.post(f"/ui/prompts/{name}/edit", data=form)
    assert no_csrf.status_code == 403
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as viewer:
        assert sign_in(viewer, ui_server.viewer_token).status_code == 303
        entry_page = viewer.get(f"/ui/prompts/{name}")
        assert f"/ui/prompts/{name}/edit" not in entry_page.text and "/-/new" not in viewer.get("/ui/prompts").text
        assert viewer.get(f"/ui/prompts/{name}/edit").status_code == 403
        csrf = CSRF.search(entry_page.text).group(1)  # type: ignore[union-attr]
        forged = viewer.post(f"/ui/prompts/{name}/edit", data={**form, "csrf_token": csrf})
        assert forged.status_code == 403
    assert stored(ui_server, name)["latest_version"] == 1


def test_an_open_page_hears_of_a_save_made_elsewhere(ui_server: UiServer, editor: httpx.Client) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    events: list[tuple[str, str]] = []
    opened = threading.Event()

    def listen() -> None:
        with editor.stream("GET", f"/ui/prompts/{name}/events?since=1", timeout=15) as stream:
            assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
            opened.set()
            kind = ""
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and kind:
                    events.append((kind, line.split(":", 1)[1].strip()))
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10)  # what is saved from here on is reported: the page asks for all since v1
    started = time.monotonic()
    with ui_server.admin() as admin:
        saved = admin.patch(f"/api/v1/prompts/{name}", json={"template": "Bye {{ who }}", "change_note": "elsewhere"})
        assert saved.status_code == 200
    listener.join(10)
    assert events, "no event within 10 s"
    kind, data = events[0]
    assert kind == "saved"
    payload = json.loads(data)
    assert payload["version"] == 2 and payload["note"] == "elsewhere" and payload["by_you"] is False
    assert time.monotonic() - started < 5


def test_an_open_event_stream_does_not_hold_up_shutdown(tmp_path: Any) -> None:
    """A browser tab left open on an entry must not keep a stopping server (a rolling deploy) alive."""
    import signal

    from tests.serve_process import ServerProcess

    with (
        ServerProcess(tmp_path / "data", name="ui-sse-shutdown") as process,
        httpx.Client(base_url=process.url, timeout=30, verify=TLS) as http,
    ):
        assert sign_in(http, process.admin_token).status_code == 303
        opened = threading.Event()

        def listen() -> None:
            try:
                with http.stream("GET", "/ui/prompts/summarize/events?since=1", timeout=30) as stream:
                    opened.set()
                    for _line in stream.iter_lines():
                        pass
            except httpx.HTTPError:
                pass

        threading.Thread(target=listen, daemon=True).start()
        assert opened.wait(10)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait_exit(timeout=10)
        assert time.monotonic() - started < 8


def test_a_save_through_one_replica_reaches_a_page_open_on_the_other(
    tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None
) -> None:
    """The banner's source is the change log as each replica's change feed reads it (PostgreSQL
    NOTIFY), not the process that saved."""
    from tests.conftest import replica_pair, require_postgres

    server_url = require_postgres(postgres_server_url)
    with (
        replica_pair(server_url, tmp_path_factory.mktemp("editor-replicas")) as (a, b),
        httpx.Client(base_url=b.url, timeout=30, verify=TLS) as on_b,
    ):
        assert sign_in(on_b, b.admin_token).status_code == 303
        events: list[str] = []
        opened = threading.Event()

        def listen() -> None:
            with on_b.stream("GET", "/ui/prompts/summarize/events?since=1", timeout=20) as stream:
                opened.set()
                for line in stream.iter_lines():
                    if line.startswith("data:"):
                        events.append(line.split(":", 1)[1].strip())
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert opened.wait(10)  # what is saved from here on is reported: the page asks for all since v1
        with a.admin() as admin:
            saved = admin.patch("/api/v1/prompts/summarize", json={"description": "Saved through replica A"})
            assert saved.status_code == 200, saved.text
            version = saved.json()["version"]
        listener.join(10)
        assert events, "replica B's page heard nothing of a save made through replica A"
        assert json.loads(events[0])["version"] == version


#: Nested far deeper than REGISTRY_LIMIT_JSON_DEPTH (64), and than Python's json recurses (1000).
DEEP_JSON = "[" * 5000 + "]" * 5000


def test_deeply_nested_stored_samples_are_a_problem_on_the_form(editor: httpx.Client) -> None:
    """``stored_samples`` is read with the bounded JSON loader: the check and the save show the
    depth limit on the form (no RecursionError, no 500) and nothing is written."""
    csrf = csrf_of(editor, "/ui/prompts/-/new")
    name = f"deep-samples-{time.monotonic_ns()}"
    form = prompt_form(csrf, text="Hi {{ who }}", arguments=[{"name": "who"}], name=name, stored_samples=DEEP_JSON)
    checked = editor.post("/ui/prompts/-/check", data=form)
    assert checked.status_code == 200, checked.text[:500]
    assert "sample argument sets: JSON nested deeper than 64 levels" in html.unescape(checked.text)
    saved = editor.post("/ui/prompts/-/new", data={**form, "op": "save"})
    assert saved.status_code in (200, 422), saved.text[:500]
    assert "sample argument sets: JSON nested deeper than 64 levels" in html.unescape(saved.text)
    assert editor.get(f"/ui/prompts/{name}").status_code == 404  # nothing saved


def test_only_the_code_editor_pages_allow_a_style_nonce_a_fresh_one_each_time(editor: httpx.Client) -> None:
    nonces = []
    for _ in range(2):
        page = editor.get("/ui/prompts/-/new")
        found = re.search(r'<meta property="csp-nonce" nonce="([^"]+)">', page.text)
        assert found, page.text[:2000]
        nonce = found.group(1)
        strict_but_the_nonce = CONTENT_SECURITY_POLICY.replace("style-src 'self'", f"style-src 'self' 'nonce-{nonce}'")
        assert page.headers["content-security-policy"] == strict_but_the_nonce
        nonces.append(nonce)
    assert nonces[0] != nonces[1]
    for path in ("/ui/prompts", "/ui/tools/-/new", "/ui/resources/-/new"):
        page = editor.get(path)
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert "csp-nonce" not in page.text, path
