"""The resource editor at the HTTP level (a real server, no browser): static text and uploaded
files served by ``resources/read`` after a save, "try a URI" on a template equal to what agents
get, template problems with their lines, "fetch now" against a loopback HTTP server, write-only
headers that survive a save, and what viewers and oversized uploads get."""

from __future__ import annotations

import base64
import html
import json
import re
import secrets
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.ui.conftest import CSRF, UiServer, csrf_of, sign_in

RAW = re.compile(r'<pre class="raw-result"[^>]*>(.*?)</pre>', re.DOTALL)
#: What an empty file input sends: the form is multipart, as a browser posts it.
NO_FILE = {"upload": ("", b"", "application/octet-stream")}


def png(width: int = 2, height: int = 1) -> bytes:
    """A small valid PNG (RGB, one red and one blue pixel per row)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + b"\xff\x00\x00\x00\x00\xff" * (width // 2)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def fresh(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def read_resource(server: UiServer, uri: str) -> dict[str, Any]:
    """The whole JSON-RPC answer of ``resources/read`` (production label)."""
    client = server.mcp()
    try:
        return client.request("resources/read", {"uri": uri})
    finally:
        client.http.close()


def stored(server: UiServer, name: str) -> httpx.Response:
    with server.admin() as admin:
        return admin.get(f"/api/v1/resources/{name}")


def results_of(page: str) -> str:
    """The live panel's results as text (tags dropped, entities unescaped)."""
    start = page.index('<div id="check-results"')
    return html.unescape(re.sub(r"<[^>]+>", "", page[start:]))


# ------------------------------------------------------------------ a loopback upstream


@dataclass
class Upstream:
    url: str
    #: (path, X-Token header or None) of every request, in order.
    seen: list[tuple[str, str | None]] = field(default_factory=list)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as state:
        yield state


@contextmanager
def running_upstream() -> Iterator[Upstream]:
    """An HTTP server on 127.0.0.1: ``/doc`` (markdown with markup in it), ``/secret`` (needs
    ``X-Token: s3cret``), ``/image`` (a PNG); anything else is 404."""
    state = Upstream("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append((self.path, self.headers.get("X-Token")))
            if self.path == "/doc":
                self._answer(200, "text/markdown; charset=utf-8", "# Upstream ✓\n<b>bold</b> & more\n".encode())
            elif self.path == "/secret":
                if self.headers.get("X-Token") == "s3cret":
                    self._answer(200, "text/plain", b"the secret page")
                else:
                    self._answer(401, "text/plain", b"who are you?")
            elif self.path == "/image":
                self._answer(200, "image/png", png())
            else:
                self._answer(404, "text/plain", b"not here")

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ static text and files


def test_a_static_text_resource_made_in_the_form_is_served(ui_server: UiServer, editor: httpx.Client) -> None:
    name = fresh("form-text")
    uri = f"docs://{name}"
    text = "\nLeading newline kept.\n  Indented, ünïcode ✓, <b>markup</b> & {{ not a template }}\n"
    csrf = csrf_of(editor, "/ui/resources/-/new")
    assert 'enctype="multipart/form-data"' in editor.get("/ui/resources/-/new").text
    form = {
        "csrf_token": csrf,
        "name": name,
        "title": "Made in the form",
        "kind": "static",
        "uri": uri,
        "mimeType": "text/markdown",
        "source": "text",
        "text": text.replace("\n", "\r\n"),  # as a browser sends a textarea
        "annotations": "audience: [user]\npriority: 0.5",
        "change_note": "first",
        "publish": "production",
        "op": "save",
    }
    created = editor.post("/ui/resources/-/new", data=form, files=NO_FILE)
    assert created.status_code == 303, created.text[:3000]
    assert created.headers["location"] == f"/ui/resources/{name}"
    served = read_resource(ui_server, uri)["result"]["contents"]
    assert served == [{"uri": uri, "mimeType": "text/markdown", "text": text}]
    entry = stored(ui_server, name).json()
    assert entry["spec"]["annotations"] == {"audience": ["user"], "priority": 0.5}
    assert entry["author"] == "ui-editor" and entry["change_note"] == "first"

    # The edit page holds every field as stored; saving it unchanged writes nothing new.
    page = editor.get(f"/ui/resources/{name}/edit")
    assert page.status_code == 200
    assert "Leading newline kept." in html.unescape(page.text)
    edit = {**form, "base_version": "1", "annotations": json.dumps(entry["spec"]["annotations"]), "text": text}
    del edit["name"]
    same = editor.post(f"/ui/resources/{name}/edit", data=edit, files=NO_FILE)
    assert same.status_code == 303
    assert stored(ui_server, name).json()["latest_version"] == 1
    changed = editor.post(
        f"/ui/resources/{name}/edit", data={**edit, "text": "Second text", "change_note": "v2"}, files=NO_FILE
    )
    assert changed.status_code == 303, changed.text[:3000]
    assert read_resource(ui_server, uri)["result"]["contents"][0]["text"] == "Second text"
    assert stored(ui_server, name).json()["spec"]["annotations"] == {"audience": ["user"], "priority": 0.5}


def test_an_uploaded_png_is_served_as_its_blob_and_kept_across_redraws(
    ui_server: UiServer, editor: httpx.Client
) -> None:
    name = fresh("form-png")
    uri = f"img://{name}"
    image = png(4, 3)
    csrf = csrf_of(editor, "/ui/resources/-/new")
    form = {"csrf_token": csrf, "name": name, "kind": "static", "uri": uri, "source": "text", "text": ""}
    # A row button (here: Add header) redraws the form: the file is now carried in a hidden field.
    redrawn = editor.post(
        "/ui/resources/-/new", data={**form, "op": "add-header"}, files={"upload": ("dot.png", image, "image/png")}
    )
    assert redrawn.status_code == 200, redrawn.text[:3000]
    blob = base64.b64encode(image).decode()
    assert f'name="blob" value="{blob}"' in redrawn.text
    assert 'name="mimeType" value="image/png"' in redrawn.text  # the file's type
    assert 'id="f-source-file" name="source" value="file" checked' in redrawn.text
    assert f"{len(image):,} bytes" in redrawn.text and "dot.png" in redrawn.text
    assert stored(ui_server, name).status_code == 404  # nothing saved yet

    # Saving without sending the file again saves the carried blob.
    carried = {**form, "source": "file", "blob": blob, "blob_name": "dot.png", "mimeType": "image/png"}
    carried.update(mime_shown="image/png", op="save")
    created = editor.post("/ui/resources/-/new", data=carried, files=NO_FILE)
    assert created.status_code == 303, created.text[:3000]
    served = read_resource(ui_server, uri)["result"]["contents"]
    assert served == [{"uri": uri, "mimeType": "image/png", "blob": blob}]
    assert base64.b64decode(served[0]["blob"]) == image

    # A new upload replaces it; a MIME type typed in the same post wins over the file's.
    other = png(2, 2)
    replaced = editor.post(
        f"/ui/resources/{name}/edit",
        data={**carried, "base_version": "1", "mimeType": "image/x-custom", "change_note": "new image"},
        files={"upload": ("other.png", other, "image/png")},
    )
    assert replaced.status_code == 303, replaced.text[:3000]
    served = read_resource(ui_server, uri)["result"]["contents"]
    assert served == [{"uri": uri, "mimeType": "image/x-custom", "blob": base64.b64encode(other).decode()}]

    # The live panel checks the file without it being sent again (JavaScript sends its size).
    check = editor.post(
        "/ui/resources/-/check",
        data={**form, "source": "file", "blob_chars": "4000", "upload_type": "image/png", "mimeType": ""},
        files=NO_FILE,
    )
    panel = results_of(check.text)
    assert "No problems: this saves." in panel and "about 3,000 bytes of image/png" in panel
    too_big = editor.post(
        "/ui/resources/-/check", data={**form, "source": "file", "blob_chars": "5000000"}, files=NO_FILE
    )
    assert "File: the file is 5000000 base64 characters" in results_of(too_big.text)
    assert "REGISTRY_LIMIT_BODY_BYTES" in results_of(too_big.text)


def test_an_oversized_upload_is_refused_naming_the_limit_and_writes_nothing(
    ui_server: UiServer, editor: httpx.Client
) -> None:
    name = fresh("form-big")
    csrf = csrf_of(editor, "/ui/resources/-/new")
    form = {"csrf_token": csrf, "name": name, "kind": "static", "uri": f"big://{name}", "op": "save"}
    # Within the body limit, but too large for the form to carry as base64.
    big = secrets.token_bytes(3_500_000)
    refused = editor.post("/ui/resources/-/new", data=form, files={"upload": ("big.bin", big, "application/zip")})
    assert refused.status_code == 422, refused.text[:2000]
    page = html.unescape(refused.text)
    assert "big.bin" in page and "REGISTRY_LIMIT_BODY_BYTES" in page and "REGISTRY_LIMIT_BLOB_CHARS" in page
    assert 'name="blob"' not in refused.text  # not carried back either
    # Over the body limit: refused before the form is read.
    huge = editor.post("/ui/resources/-/new", data=form, files={"upload": ("huge.bin", big + big, "application/zip")})
    assert huge.status_code == 413 and "REGISTRY_LIMIT_BODY_BYTES" in huge.text
    assert "Traceback" not in refused.text + huge.text
    assert stored(ui_server, name).status_code == 404


def test_a_conflict_keeps_my_uploaded_file_and_publishes_where_asked(ui_server: UiServer, editor: httpx.Client) -> None:
    name = fresh("form-conflict")
    uri = f"docs://{name}"
    with ui_server.admin() as admin:
        created = admin.post("/api/v1/resources", json={"name": name, "uri": uri, "text": "their text"})
        assert created.status_code == 201, created.text
    csrf = csrf_of(editor, f"/ui/resources/{name}/edit")
    # Someone else saves v2 (a title) while my editor still holds v1.
    with ui_server.admin() as admin:
        assert admin.patch(f"/api/v1/resources/{name}", json={"title": "Their title"}).status_code == 200
    image = png(2, 2)
    mine = {"csrf_token": csrf, "kind": "static", "uri": uri, "base_version": "1", "change_note": "my picture"}
    mine.update(source="text", text="their text", publish="staging", op="save")
    refused = editor.post(f"/ui/resources/{name}/edit", data=mine, files={"upload": ("mine.png", image, "image/png")})
    assert refused.status_code == 409, refused.text[:3000]
    page = html.unescape(refused.text)
    assert "saved version 2 while you were editing version 1" in page
    blob = base64.b64encode(image).decode()
    assert f'name="blob" value="{blob}"' in refused.text  # my file is kept, in the form
    assert 'name="base_version" value="2"' in refused.text and 'value="Their title"' in refused.text
    assert 'id="f-publish-staging" name="publish" value="staging" checked' in refused.text
    assert stored(ui_server, name).json()["latest_version"] == 2

    again = {**mine, "base_version": "2", "title": "Their title", "source": "file", "blob": blob}
    again.update(mimeType="image/png", mime_shown="image/png")
    saved = editor.post(f"/ui/resources/{name}/edit", data=again, files=NO_FILE)
    assert saved.status_code == 303, saved.text[:3000]
    entry = stored(ui_server, name).json()
    assert entry["latest_version"] == 3 and entry["labels"]["staging"] == 3 and entry["labels"]["production"] == 2
    assert entry["spec"]["title"] == "Their title" and entry["spec"]["blob"] == blob
    assert read_resource(ui_server, uri)["result"]["contents"][0]["text"] == "their text"  # production: v2
    staging = StreamableHttpClient(
        httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS), path="/mcp?label=staging"
    )
    try:
        staging.initialize()
        served = staging.request("resources/read", {"uri": uri})["result"]["contents"]
    finally:
        staging.http.close()
    assert served == [{"uri": uri, "mimeType": "image/png", "blob": blob}]


# ------------------------------------------------------------------ templates

TEMPLATE = "Notes of {{ team }}{% if week %}, week {{ week }}{% endif %}: <ok> & done"


def template_form(csrf: str, name: str, **fields: str) -> dict[str, str]:
    return {
        "csrf_token": csrf,
        "name": name,
        "kind": "template",
        "uriTemplate": "notes://{team}/current{?week}",
        "mimeType": "text/plain",
        "text": TEMPLATE,
        **fields,
    }


def test_try_a_uri_shows_what_resources_read_returns(ui_server: UiServer, editor: httpx.Client) -> None:
    name = fresh("form-template")
    csrf = csrf_of(editor, "/ui/resources/-/new")
    uri = "notes://core/current?week=12"
    form = template_form(csrf, name, try_uri=uri, show_raw="1")
    checked = editor.post("/ui/resources/-/check", data=form, files=NO_FILE)
    assert checked.status_code == 200
    assert checked.text.lstrip().startswith('<div id="check-results"')  # the panel only
    match = RAW.search(checked.text)
    assert match, checked.text[:3000]
    preview = json.loads(html.unescape(match.group(1)))
    plain = editor.post("/ui/resources/-/check", data={**form, "show_raw": ""}, files=NO_FILE)
    assert "Notes of core, week 12: &lt;ok&gt; &amp; done" in plain.text  # escaped, not markup

    saved = editor.post("/ui/resources/-/new", data={**form, "op": "save"}, files=NO_FILE)
    assert saved.status_code == 303, saved.text[:3000]
    served = read_resource(ui_server, uri)
    assert preview == served["result"]
    assert served["result"]["contents"][0]["text"] == "Notes of core, week 12: <ok> & done"

    elsewhere = editor.post("/ui/resources/-/check", data={**form, "try_uri": "notes://core/past"}, files=NO_FILE)
    panel = results_of(elsewhere.text)
    assert "resource not found: notes://core/past does not match the URI template" in panel
    hint = editor.post("/ui/resources/-/check", data={**form, "try_uri": ""}, files=NO_FILE)
    assert "Type a URI that matches the template" in hint.text
    # Without JavaScript, "Check and preview" posts the whole form and gets the whole page back.
    page = editor.post(f"/ui/resources/{name}/edit", data={**form, "show_raw": "", "op": "check"}, files=NO_FILE)
    assert page.status_code == 200 and f'name="try_uri" value="{uri}"' in page.text
    assert "Notes of core, week 12: &lt;ok&gt; &amp; done" in page.text


def test_template_problems_are_listed_with_their_lines(editor: httpx.Client) -> None:
    csrf = csrf_of(editor, "/ui/resources/-/new")
    # Listed even while the name is still missing (the draft does not validate otherwise).
    broken = editor.post(
        "/ui/resources/-/check",
        data=template_form(csrf, "", text="line one\nline two {{ team \nline three"),
        files=NO_FILE,
    )
    panel = results_of(broken.text)
    assert re.search(r"Text, line [23]: ", panel), panel
    # A new entry's empty name is no problem yet (a blank form is checked on load): said neutrally.
    assert "Give it a name before you create it" in panel and "pattern" not in panel
    undeclared = editor.post(
        "/ui/resources/-/check",
        data=template_form(csrf, "x", text="{{ team }}\nand {{ nobody }}"),
        files=NO_FILE,
    )
    panel = results_of(undeclared.text)
    assert "Text, line 2" in panel and "nobody" in panel
    bad_uri = editor.post(
        "/ui/resources/-/check", data=template_form(csrf, "x", uriTemplate="notes://{team/x"), files=NO_FILE
    )
    assert "URI template: unbalanced braces" in results_of(bad_uri.text)
    no_file = editor.post(
        "/ui/resources/-/check",
        data={"csrf_token": csrf, "name": "x", "kind": "static", "uri": "a://b", "source": "file"},
        files=NO_FILE,
    )
    assert "File: choose a file to upload" in results_of(no_file.text)
    fine = editor.post("/ui/resources/-/check", data=template_form(csrf, "x"), files=NO_FILE)
    assert "No problems: this saves." in fine.text

    # Saving a broken template is refused on the page, with the text kept.
    refused = editor.post(
        "/ui/resources/-/new",
        data=template_form(csrf, fresh("form-broken"), text="{% if team %}open", op="save"),
        files=NO_FILE,
    )
    assert refused.status_code == 422 and 'role="alert"' in refused.text
    assert "{% if team %}open" in html.unescape(refused.text)


# ------------------------------------------------------------------ http resources


def http_form(csrf: str, name: str, url: str, **fields: str) -> dict[str, str]:
    return {"csrf_token": csrf, "name": name, "kind": "http", "uri": f"remote://{name}", "url": url, **fields}


def test_fetch_now_shows_the_upstream_content_status_and_errors(editor: httpx.Client, upstream: Upstream) -> None:
    csrf = csrf_of(editor, "/ui/resources/-/new")
    form = http_form(csrf, "x", upstream.url + "/doc")
    typed = editor.post("/ui/resources/-/check", data=form, files=NO_FILE)
    assert "Press “Fetch now”" in typed.text and upstream.seen == []  # typing fetches nothing

    fetched = editor.post("/ui/resources/-/check", data={**form, "op": "fetch"}, files=NO_FILE)
    assert upstream.seen == [("/doc", None)]
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in fetched.text and "<b>bold</b>" not in fetched.text
    panel = results_of(fetched.text)
    assert "Upstream answered HTTP 200 OK" in panel and "text/markdown" in panel and "# Upstream ✓" in panel

    binary = editor.post(
        "/ui/resources/-/check", data={**form, "url": upstream.url + "/image", "op": "fetch"}, files=NO_FILE
    )
    assert f"Binary content: {len(png()):,} bytes of image/png" in results_of(binary.text)

    missing = editor.post(
        "/ui/resources/-/check", data={**form, "url": upstream.url + "/gone", "op": "fetch"}, files=NO_FILE
    )
    panel = results_of(missing.text)
    assert "Upstream answered HTTP 404 Not Found" in panel and "answered HTTP 404 Not Found" in panel
    assert 'class="warning preview-error fetch-error"' in missing.text

    # Without JavaScript the button posts the whole form back: the page shows the same result.
    page = editor.post("/ui/resources/-/new", data={**form, "op": "fetch"}, files=NO_FILE)
    assert page.status_code == 200 and "&lt;b&gt;bold&lt;/b&gt;" in page.text
    assert 'name="url" value="' + upstream.url + '/doc"' in page.text


def test_masked_headers_survive_a_save_that_does_not_replace_them(
    ui_server: UiServer, editor: httpx.Client, upstream: Upstream
) -> None:
    name = fresh("form-http")
    uri = f"remote://{name}"
    csrf = csrf_of(editor, "/ui/resources/-/new")
    form = http_form(csrf, name, upstream.url + "/secret", cache_ttl_s="0")
    form.update({"hdr-0-name": "X-Token", "hdr-0-value": "s3cret", "op": "save"})
    created = editor.post("/ui/resources/-/new", data=form, files=NO_FILE)
    assert created.status_code == 303, created.text[:3000]
    assert read_resource(ui_server, uri)["result"]["contents"][0]["text"] == "the secret page"

    page = editor.get(f"/ui/resources/{name}/edit")
    assert 'name="hdr-0-value" value="********"' in page.text and "s3cret" not in page.text
    masked = {k: v for k, v in form.items() if k != "name"}
    masked.update({"hdr-0-value": "********", "title": "Renamed", "base_version": "1", "change_note": "title"})

    # "Fetch now" on the edit page sends the stored value, as agents' reads do.
    upstream.seen.clear()
    preview = editor.post("/ui/resources/-/check", data={**masked, "editing": name, "op": "fetch"}, files=NO_FILE)
    assert "the secret page" in preview.text and upstream.seen == [("/secret", "s3cret")]

    saved = editor.post(f"/ui/resources/{name}/edit", data=masked, files=NO_FILE)
    assert saved.status_code == 303, saved.text[:3000]
    entry = stored(ui_server, name).json()
    assert entry["latest_version"] == 2 and entry["spec"]["title"] == "Renamed"
    assert entry["spec"]["headers"] == {"X-Token": "********"}
    upstream.seen.clear()
    assert read_resource(ui_server, uri)["result"]["contents"][0]["text"] == "the secret page"
    assert upstream.seen == [("/secret", "s3cret")]  # the stored secret still works after the save

    # A masked value is never sent to another origin, in a preview or a save.
    moved = {**masked, "url": "http://127.0.0.2:9/secret", "base_version": "2"}
    elsewhere = editor.post("/ui/resources/-/check", data={**moved, "editing": name, "op": "fetch"}, files=NO_FILE)
    assert "write-only values must be sent again" in html.unescape(elsewhere.text)
    refused = editor.post(f"/ui/resources/{name}/edit", data=moved, files=NO_FILE)
    assert refused.status_code == 422 and "write-only values must be sent again" in html.unescape(refused.text)
    assert stored(ui_server, name).json()["latest_version"] == 2


# ------------------------------------------------------------------ who may


def test_viewers_get_no_resource_editor(ui_server: UiServer, editor: httpx.Client) -> None:
    name = fresh("form-viewer")
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as viewer:
        assert sign_in(viewer, ui_server.viewer_token).status_code == 303
        assert viewer.get("/ui/resources/-/new").status_code == 403
        assert "/ui/resources/-/new" not in viewer.get("/ui/resources").text
        csrf = CSRF.search(viewer.get("/ui/resources").text).group(1)  # type: ignore[union-attr]
        form = {"csrf_token": csrf, "name": name, "kind": "static", "uri": f"v://{name}", "text": "x", "op": "save"}
        assert viewer.post("/ui/resources/-/new", data=form, files=NO_FILE).status_code == 403
        assert viewer.post("/ui/resources/-/check", data=form, files=NO_FILE).status_code == 403
        assert viewer.get("/ui/resources/server-info/edit").status_code == 403
    assert stored(ui_server, name).status_code == 404
    # An editor sees the way in.
    assert "/ui/resources/-/new" in editor.get("/ui/resources").text


def test_deeply_nested_annotations_are_a_problem_on_the_form(editor: httpx.Client) -> None:
    """The annotations field (JSON or YAML) as JSON nested far too deep: the limit on the form."""
    csrf = csrf_of(editor, "/ui/resources/-/new")
    name = fresh("deep-annotations")
    form = {
        "csrf_token": csrf,
        "name": name,
        "kind": "static",
        "uri": f"docs://{name}",
        "mimeType": "text/plain",
        "source": "text",
        "text": "x",
        "annotations": "[" * 5000 + "]" * 5000,
    }
    for path, extra in (("/ui/resources/-/check", {}), ("/ui/resources/-/new", {"op": "save"})):
        answer = editor.post(path, data={**form, **extra}, files=NO_FILE)
        assert answer.status_code in (200, 422), (path, answer.text[:500])
        assert "JSON nested deeper than 64 levels" in html.unescape(answer.text), path
