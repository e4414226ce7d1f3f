"""Connected agents and bundles in a real browser (headless Chromium, Playwright): each page passes
the ``UiPage`` checks (no page or console error, no serious accessibility violation), and a bundle
goes round trip: exported, edited, uploaded, planned, applied, and served over MCP."""

from __future__ import annotations

import io
import os
import secrets
import zipfile
from pathlib import Path

import httpx
import pytest
import yaml

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.ui.conftest import UiPage


def test_the_agents_page_lists_connected_clients(ui: UiPage) -> None:
    name = f"browser-agent-{secrets.token_hex(3)}"
    client = StreamableHttpClient(httpx.Client(base_url=ui.server.url, timeout=30, verify=TLS))
    client.initialize(clientInfo={"name": name, "version": "4.5.6"})
    try:
        ui.sign_in(ui.server.viewer_token)
        home = ui.page.locator("section", has=ui.page.get_by_role("heading", name="Connected agents"))
        expect(home.get_by_role("cell", name=name)).to_be_visible()

        ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
        ui.check()
        expect(ui.page.get_by_role("heading", level=1)).to_have_text("Connected agents")
        row = ui.page.get_by_role("row", name=name)
        expect(row).to_contain_text("4.5.6")
        expect(row).to_contain_text("Streamable HTTP")
        expect(row).to_contain_text("production")
        expect(row).to_contain_text("anonymous")
        expect(ui.page.get_by_text("stdio", exact=False).first).to_be_visible()
        assert client.session_id and client.session_id not in ui.page.content()
        ui.shot("agents")
    finally:
        client.http.close()


def test_a_bundle_exported_edited_uploaded_and_applied_is_served(ui: UiPage, tmp_path: Path) -> None:
    name = ui.server.create_prompt("Dear {{ who }}, the old wording.", prefix="bundle-browser", title="Bundle browser")
    ui.sign_in(ui.server.admin_token)
    ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Bundles").click()
    ui.check()
    ui.shot("bundles")

    with ui.page.expect_download() as downloading:
        ui.page.get_by_role("button", name="Download export (.zip)").click()
    download = downloading.value
    assert download.suggested_filename.startswith("mcp-registry-latest-")
    exported = Path(download.path()).read_bytes()

    # Edit the prompt's text in the zip, leave everything else as exported.
    edited = io.BytesIO()
    member = f"prompts/{name}.yaml"
    with zipfile.ZipFile(io.BytesIO(exported)) as source, zipfile.ZipFile(edited, "w", zipfile.ZIP_DEFLATED) as target:
        assert member in source.namelist()
        for info in source.infolist():
            data = source.read(info)
            if info.filename == member:
                spec = yaml.safe_load(data)
                spec["template"] = "Dear {{ who }}, the new wording from the bundle."
                data = yaml.safe_dump(spec, sort_keys=False).encode()
            target.writestr(info, data)
    upload = tmp_path / "edited-export.zip"
    upload.write_bytes(edited.getvalue())

    ui.page.get_by_label("Bundle (.zip)").set_input_files(str(upload))
    ui.page.get_by_role("button", name="Upload and show the plan").click()
    ui.check()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Import plan: edited-export.zip")
    row = ui.page.get_by_role("row", name=name)
    expect(row).to_contain_text("update")
    row.locator("summary").click()
    expect(row.locator("pre.plan-diff")).to_contain_text("+template: Dear {{ who }}, the new wording from the bundle.")
    ui.check()
    ui.shot("bundle-plan")
    assert ui.server.prompt_text(name, {"who": "Ann"}) == "Dear Ann, the old wording.", "a plan writes nothing"

    ui.page.get_by_role("button", name="Apply: 1 change").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("Imported edited-export.zip: 1 updated")
    ui.shot("bundle-applied")
    assert ui.server.prompt_text(name, {"who": "Ann"}) == "Dear Ann, the new wording from the bundle."
