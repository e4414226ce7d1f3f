"""The resource editor in a real browser: editing a static text, uploading a file, trying URIs on
a template while typing, fetching an http resource on the button, and what agents read after each
save. Every page must pass ``UiPage.check`` (no console error, no CSP violation, axe clean)."""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Iterator

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.ui.conftest import UiPage, UiServer
from tests.ui.test_resource_editor_http import Upstream, png, read_resource, running_upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as state:
        yield state


def create_static(server: UiServer, text: str) -> tuple[str, str]:
    name = f"browser-res-{secrets.token_hex(4)}"
    uri = f"docs://{name}"
    spec = {"name": name, "kind": "static", "uri": uri, "mimeType": "text/plain", "text": text}
    with server.admin() as admin:
        created = admin.post("/api/v1/resources", json={**spec, "change_note": "first"})
        assert created.status_code == 201, created.text
    return name, uri


def test_edit_a_static_text_then_upload_a_file(ui: UiPage, ui_server: UiServer) -> None:
    name, uri = create_static(ui_server, "First text")
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/resources/{name}")
    ui.page.get_by_role("link", name="Edit", exact=True).click()
    ui.check()
    page = ui.page
    # Only the static kind's fields show.
    expect(page.locator("#f-uri-template")).to_be_hidden()
    expect(page.locator("#f-url")).to_be_hidden()
    expect(page.locator("#try-uri")).to_be_hidden()
    expect(page.locator("#f-upload")).to_be_hidden()  # the text is chosen
    text = page.get_by_label("Text (static text, or the template of a template resource)")
    expect(text).to_have_value("First text")
    text.fill("Edited in a browser:\n  <kept> & exact")
    preview = page.get_by_label("Rendered content 1")
    expect(preview).to_have_text("Edited in a browser:\n  <kept> & exact", timeout=10_000)
    expect(page.locator("#check-results")).to_contain_text("No problems")
    page.get_by_label("Change note").fill("new text")
    page.get_by_role("button", name="Save version 2").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    served = read_resource(ui_server, uri)["result"]["contents"]
    assert served == [{"uri": uri, "mimeType": "text/plain", "text": "Edited in a browser:\n  <kept> & exact"}]

    # Upload a file: choosing it switches the content to "a file"; the live check does not send it.
    page.get_by_role("link", name="Edit", exact=True).click()
    ui.check()
    image = png(4, 2)
    page.locator("#f-upload").set_input_files({"name": "pixels.png", "mimeType": "image/png", "buffer": image})
    expect(page.locator("#f-source-file")).to_be_checked()
    expect(page.locator("#f-text")).to_be_hidden()
    expect(page.locator("#check-results")).to_contain_text("of image/png", timeout=10_000)
    expect(page.locator("#check-results")).to_contain_text("No problems")
    page.get_by_label("Change note").fill("a picture")
    page.get_by_role("button", name="Save version 3").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v3")
    served = read_resource(ui_server, uri)["result"]["contents"]
    assert served == [{"uri": uri, "mimeType": "image/png", "blob": base64.b64encode(image).decode()}]

    # The editor shows the stored file, and a save that changes only the title keeps it.
    page.get_by_role("link", name="Edit", exact=True).click()
    ui.check()
    expect(page.locator("#f-current-file")).to_contain_text(f"{len(image):,} bytes (image/png)")
    expect(page.get_by_alt_text("The current file")).to_be_visible()
    page.get_by_label("Title", exact=True).fill("A picture")
    expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
    page.get_by_role("button", name="Save version 4").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v4")
    assert read_resource(ui_server, uri)["result"]["contents"][0]["blob"] == base64.b64encode(image).decode()


def test_try_a_uri_on_a_template_resource_while_typing(ui: UiPage, ui_server: UiServer) -> None:
    name = f"browser-tpl-{secrets.token_hex(4)}"
    ui.sign_in(ui_server.editor_token)
    ui.goto("/ui/resources")
    ui.page.get_by_role("link", name="New resource").click()
    ui.check()
    page = ui.page
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Kind").select_option("template")
    expect(page.locator("#f-uri")).to_be_hidden()
    expect(page.locator("#try-uri")).to_be_visible()
    page.get_by_label("URI template (template resources)").fill("team://{team}/board{?sprint}")
    page.get_by_label("MIME type").fill("text/markdown")
    template = page.get_by_label("Text (static text, or the template of a template resource)")
    template.fill("# {{ team|title }}\n{{ nobody }}")
    issues = page.get_by_role("list", name="Problems")
    expect(issues).to_contain_text("line 2", timeout=10_000)
    expect(issues).to_contain_text("nobody")
    template.fill("# {{ team|title }}{% if sprint %}\nSprint {{ sprint }}{% endif %}")
    expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
    expect(page.locator("#check-results")).to_contain_text("Type a URI")

    page.get_by_label("Try a URI").press_sequentially("team://core/board?sprint=7", delay=20)
    preview = page.get_by_label("Rendered content 1")
    expect(preview).to_have_text("# Core\nSprint 7", timeout=10_000)
    ui.check()
    ui.shot("resource-editor")
    page.get_by_label("Show the raw resources/read result").check()
    raw = page.get_by_role("group", name="Raw resources/read result")
    expect(raw).to_contain_text('"contents"', timeout=10_000)
    previewed = json.loads(raw.inner_text())
    ui.check()

    page.get_by_label("Try a URI").fill("team://core/elsewhere")
    expect(page.locator("#check-results")).to_contain_text("does not match the URI template", timeout=10_000)
    page.get_by_label("Try a URI").fill("team://core/board?sprint=7")
    expect(raw).to_contain_text('"team://core/board?sprint=7"', timeout=10_000)
    page.get_by_role("button", name="Create").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Created {name} v1")
    assert read_resource(ui_server, "team://core/board?sprint=7")["result"] == previewed


def test_fetch_now_on_an_http_resource(ui: UiPage, ui_server: UiServer, upstream: Upstream) -> None:
    name = f"browser-http-{secrets.token_hex(4)}"
    ui.sign_in(ui_server.editor_token)
    ui.goto("/ui/resources/-/new")
    page = ui.page
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Kind").select_option("http")
    page.get_by_label("URI (static and http resources)").fill(f"remote://{name}")
    page.get_by_label("URL to fetch (http resources)").fill(upstream.url + "/doc")
    expect(page.locator("#check-results")).to_contain_text("Press “Fetch now”", timeout=10_000)
    assert upstream.seen == []  # typing fetched nothing
    page.get_by_role("button", name="Fetch now").click()
    expect(page.get_by_label("Rendered content 1")).to_contain_text("<b>bold</b> & more", timeout=10_000)
    expect(page.locator("#check-results")).to_contain_text("Upstream answered HTTP 200 OK")
    assert upstream.seen == [("/doc", None)]
    ui.check()
    ui.shot("resource-editor-fetch")
    page.get_by_label("URL to fetch (http resources)").fill(upstream.url + "/missing")
    # Let the check that typing schedules land first: it redraws the panel (a fetch result is shown
    # until the next check).
    expect(page.locator("#check-results")).to_contain_text("Press “Fetch now”", timeout=10_000)
    page.get_by_role("button", name="Fetch now").click()
    expect(page.locator("#check-results")).to_contain_text("answered HTTP 404 Not Found", timeout=10_000)
    page.get_by_role("button", name="Add header").click()
    ui.check()
    assert page.get_by_label("URL to fetch (http resources)").input_value() == upstream.url + "/missing"
    page.get_by_label("Header 1 name").fill("X-Token")
    page.get_by_label("Header 1 value").fill("s3cret")
    page.get_by_label("URL to fetch (http resources)").fill(upstream.url + "/secret")
    page.get_by_role("button", name="Create").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Created {name} v1")
    assert read_resource(ui_server, f"remote://{name}")["result"]["contents"][0]["text"] == "the secret page"
