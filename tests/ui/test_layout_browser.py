"""Phones and long names (issue 25 item 4): no page of the web UI is wider than the window at
390 px (a phone) or 1280 px (a laptop), however long the names and words in it.

A server of its own holds entries made to stretch every page: a 125-character name (names allow
1-128 of [A-Za-z0-9_.-]), an unbroken 300-character description, a 64-character tag, label and team,
long change notes and URIs, three versions, a change request, a tool, a resource; the browser
signs in with a token whose name is 128 unbroken characters (the header shows it on every page).
Then each page is visited at each width in one browser context per width: the document may not
scroll sideways (``scrollWidth <= innerWidth``), no element may reach past the window's right edge
unless a box that scrolls (or clips) holds it, and ``UiPage.check`` runs axe-core on the page at
that width. Failures are collected and reported together, with the page, the width and the
element that sticks out.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

try:
    from playwright.sync_api import Browser, expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess, issue_token
from tests.ui.conftest import UiPage, UiServer

WIDTHS = (390, 1280)

#: What the page measures: how wide the document is, and the outermost and the farthest-reaching
#: element whose right edge passes the window without a scrolling (or clipping) box around it.
MEASURE = """() => {
  const width = window.innerWidth;
  // Inside a box that scrolls or clips it: an absolutely placed element escapes every such box up
  // to its containing block (the nearest positioned ancestor).
  const loose = (style) => style.position === 'absolute' || style.position === 'fixed';
  const held = (el) => {
    let free = loose(getComputedStyle(el));
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const style = getComputedStyle(p);
      if (!free && style.overflowX !== 'visible') { return true; }
      if (free && style.position !== 'static') {
        if (style.overflowX !== 'visible') { return true; }
        free = loose(style);
      }
    }
    return false;
  };
  const name = (el) => {
    let text = el.tagName.toLowerCase();
    if (el.id) { text += '#' + el.id; }
    if (el.classList.length) { text += '.' + Array.from(el.classList).join('.'); }
    const words = (el.textContent || '').trim().replace(/\\s+/g, ' ');
    return text + (words ? ' "' + words.slice(0, 40) + '"' : '');
  };
  let outermost = null, farthest = null;
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0 || box.right <= width + 0.5 || held(el)) { continue; }
    const seen = {element: name(el), right: Math.round(box.right), width: Math.round(box.width)};
    if (!outermost) { outermost = seen; }
    if (!farthest || box.right > farthest.right) { farthest = seen; }
  }
  return {width: width, scrollWidth: document.documentElement.scrollWidth, outermost: outermost, farthest: farthest};
}"""


def unbroken(prefix: str, length: int, fill: str = "x") -> str:
    """``prefix`` and a fresh suffix, padded to ``length`` with no place a line may break."""
    return (prefix + secrets.token_hex(3)).ljust(length, fill)


@dataclass
class Stretched:
    """The entries and records made to stretch the pages, by name or id."""

    server: UiServer
    token_name: str
    token_value: str
    token_id: int
    team: str
    prompt: str
    resource: str
    tool: str
    request_id: int
    agent: StreamableHttpClient


@pytest.fixture(scope="module")
def stretched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stretched]:
    data = tmp_path_factory.mktemp("layout-ui") / "data"
    env = {"REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}  # the tool's webhook (never called)
    with ServerProcess(data, name="layout-ui", env=env) as process:
        server = UiServer(process)
        token_name = unbroken("Token", 128)
        team = unbroken("team", 64).lower()
        prompt = unbroken("Prompt", 125)
        resource = unbroken("Resource", 125)
        tool = unbroken("Tool", 125)
        description = unbroken("Description", 300, "y")
        tag = unbroken("tag", 64)
        argument = unbroken("argument", 64).lower()
        note = "https://tickets.example.com/" + unbroken("Note", 200, "z")
        with server.admin() as admin:
            assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
            made = issue_token(admin, token_name, ["admin"], teams={team: "admin"})
            spec: dict[str, Any] = {
                "name": prompt,
                "title": "A prompt with a long name, description, tag, argument and team",
                "description": description,
                "tags": [tag, "short"],
                "arguments": [{"name": argument, "description": description, "required": True}],
            }
            created = admin.post(
                "/api/v1/prompts",
                json={**spec, "team": team, "template": f"Hi {{{{ {argument} }}}}", "change_note": note},
            )
            assert created.status_code == 201, created.text
            for number in (2, 3):
                text = f"Hi {{{{ {argument} }}}}, version {number}: " + unbroken("Template", 300, "t")
                saved = admin.put(f"/api/v1/prompts/{prompt}", json={**spec, "template": text, "change_note": note})
                assert saved.status_code == 200, saved.text
            moved = admin.put(f"/api/v1/prompts/{prompt}/labels/production", json={"version": 2})
            assert moved.status_code == 200, moved.text
            long_label = unbroken("label", 64, "w").lower()  # labels allow 1-64 of [a-z0-9_.-]
            moved = admin.put(f"/api/v1/prompts/{prompt}/labels/{long_label}", json={"version": 1})
            assert moved.status_code == 200, moved.text
            resource_spec = {
                "name": resource,
                "kind": "static",
                "uri": "docs://" + unbroken("Uri", 300, "u"),
                "mimeType": "text/plain",
                "description": description,
                "text": unbroken("Text", 400, "w"),
                "change_note": note,
            }
            made_resource = admin.post("/api/v1/resources", json=resource_spec)
            assert made_resource.status_code == 201, made_resource.text
            tool_spec = {
                "name": tool,
                "description": description,
                "inputSchema": {
                    "type": "object",
                    "properties": {argument: {"type": "string", "description": description}},
                },
                "webhook": {"url": "http://127.0.0.1:9/" + unbroken("hook", 300, "h")},
                "change_note": note,
            }
            made_tool = admin.post("/api/v1/tools", json=tool_spec)
            assert made_tool.status_code == 201, made_tool.text
            # A change request: a label of its own is protected, and the request asks to move it.
            assert admin.put("/api/v1/protected-labels/layout-review", json={"approvals": 1}).status_code == 200
            opened = admin.post(
                "/api/v1/change-requests",
                json={
                    "kind": "prompt",
                    "name": prompt,
                    "label": "layout-review",
                    "to_version": 3,
                    "title": unbroken("Title", 120, "q"),
                    "description": description,
                },
            )
            assert opened.status_code == 201, opened.text
        # An agent with a long name that has used the prompt (the agents and usage pages show both).
        agent = StreamableHttpClient(
            httpx.Client(base_url=server.url, timeout=30, verify=TLS),
            extra_headers={"Authorization": f"Bearer {made['token']}"},
        )
        agent.initialize(clientInfo={"name": unbroken("Agent", 200, "a"), "version": unbroken("v", 60, "9")})
        got = agent.request("prompts/get", {"name": prompt, "arguments": {argument: "Ada"}})
        assert "result" in got, got
        try:
            yield Stretched(
                server=server,
                token_name=token_name,
                token_value=made["token"],
                token_id=int(made["id"]),
                team=team,
                prompt=prompt,
                resource=resource,
                tool=tool,
                request_id=int(opened.json()["id"]),
                agent=agent,
            )
        finally:
            agent.http.close()


@dataclass
class Visit:
    """A page to measure: a path to open (or a step that leads there), and the status it answers."""

    what: str
    path: str = ""
    status: int = 200
    step: Callable[[UiPage], None] | None = None


def signed_in_pages(s: Stretched) -> list[Visit]:
    p, r, t = s.prompt, s.resource, s.tool
    visits = [
        Visit("home", "/ui/"),
        Visit("prompts list", "/ui/prompts"),
        Visit("resources list", "/ui/resources"),
        Visit("tools list", "/ui/tools"),
        Visit("prompts search", f"/ui/prompts?q={p[:20]}"),
        Visit("prompt", f"/ui/prompts/{p}"),
        Visit("prompt v1", f"/ui/prompts/{p}?version=1"),
        Visit("resource", f"/ui/resources/{r}"),
        Visit("tool", f"/ui/tools/{t}"),
        Visit("history", f"/ui/prompts/{p}/history"),
        Visit("diff", f"/ui/prompts/{p}/diff"),
        Visit("diff v1-v3", f"/ui/prompts/{p}/diff?from=1&to=3"),
        Visit("prompt editor", f"/ui/prompts/{p}/edit", step=checked),
        Visit("resource editor", f"/ui/resources/{r}/edit", step=checked),
        Visit("tool editor", f"/ui/tools/{t}/edit", step=checked),
        Visit("new prompt", "/ui/prompts/-/new", step=checked),
        Visit("new resource", "/ui/resources/-/new", step=checked),
        Visit("new tool", "/ui/tools/-/new", step=checked),
        Visit("labels", "/ui/labels"),
        Visit("confirm label", f"/ui/prompts/{p}/promote?label=production&version=1"),
        Visit("confirm archive", f"/ui/prompts/{p}/archive"),
        Visit("confirm team", f"/ui/prompts/{p}/team"),
        Visit("confirm team delete", f"/ui/teams/{s.team}/delete"),
        Visit("confirm revoke", f"/ui/tokens/{s.token_id}/revoke"),
        Visit("reviews", "/ui/reviews"),
        Visit("review", f"/ui/reviews/{s.request_id}"),
        Visit("activity", "/ui/activity"),
        Visit("agents", "/ui/agents"),
        Visit("usage", "/ui/usage"),
        Visit("usage of the prompt", f"/ui/prompts/{p}/usage"),
        Visit("audit", "/ui/audit"),
        Visit("audit verified", "/ui/audit", step=verify_audit),
        Visit("teams", "/ui/teams"),
        Visit("bundles", "/ui/bundles"),
        Visit("bundle plan", "/ui/bundles", step=upload_bundle(s)),
        Visit("tokens", "/ui/tokens"),
        Visit("token created", "/ui/tokens", step=create_token),
        Visit("token's teams", f"/ui/tokens/{s.token_id}/teams"),
        Visit("tool test", f"/ui/tools/{t}/test"),
        Visit("not found", f"/ui/prompts/{p[:-3]}zzz", status=404),
    ]
    return visits


def checked(ui: UiPage) -> None:
    """The editor's first check (run on load) has filled its side panel."""
    expect(ui.page.locator("#check-results")).not_to_contain_text("show here as you type")


def verify_audit(ui: UiPage) -> None:
    ui.page.get_by_role("button", name="Verify chain").click()
    expect(ui.page.locator("#verify-result")).to_be_visible()


def create_token(ui: UiPage) -> None:
    ui.page.get_by_label("Name", exact=True).fill(unbroken("Created", 128))
    ui.page.get_by_label("viewer", exact=True).check()
    ui.page.get_by_role("button", name="Create token").click()
    expect(ui.page.get_by_role("heading", level=1)).to_contain_text("Token created")


def upload_bundle(s: Stretched) -> Callable[[UiPage], None]:
    def step(ui: UiPage) -> None:
        exported = ui.page.request.get(ui.url("/ui/bundles/export.zip"))
        assert exported.ok, exported.status
        edited = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(exported.body())) as source, zipfile.ZipFile(edited, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                if info.filename == f"prompts/{s.prompt}.yaml":
                    spec = yaml.safe_load(data)
                    spec["description"] = unbroken("Bundled", 300, "b")
                    data = yaml.safe_dump(spec, sort_keys=False).encode()
                target.writestr(info, data)
        upload = {"name": unbroken("bundle", 120, "n") + ".zip", "mimeType": "application/zip"}
        ui.page.get_by_label("Bundle (.zip)").set_input_files({**upload, "buffer": edited.getvalue()})
        ui.page.get_by_role("button", name="Upload and show the plan").click()
        expect(ui.page.get_by_role("heading", level=1)).to_contain_text("Import plan")
        ui.page.get_by_role("row", name=re.compile(s.prompt)).locator("summary").click()

    return step


def signed_out_pages(s: Stretched) -> list[Visit]:
    def wrong_token(ui: UiPage) -> None:
        ui.page.get_by_label("API token").fill(unbroken("WrongToken", 200, "k"))
        ui.page.get_by_role("button", name="Sign in").click()
        expect(ui.page.get_by_role("alert")).to_be_visible()

    return [
        Visit("sign-in", "/ui/signin"),
        Visit("sign-in, session ended", f"/ui/signin?ended=1&next=/ui/prompts/{s.prompt}/edit"),
        Visit("sign-in refused", "/ui/signin", step=wrong_token),
        Visit("signed-out not found", f"/ui/{s.prompt}", status=404),
        Visit("signed-out bad request", "/ui/signin?next=/" + unbroken("Next", 3000, "n"), status=400),
    ]


def measure(ui: UiPage, visit: Visit, width: int) -> str | None:
    """What is wrong with the page the tab shows (None: nothing)."""
    try:
        ui.check()
    except AssertionError as error:
        return f"{visit.what} at {width} px: {error}"
    seen = ui.page.evaluate(MEASURE)
    if seen["scrollWidth"] <= seen["width"] and seen["outermost"] is None:
        return None
    return (
        f"{visit.what} at {width} px ({ui.page.url}): the page is {seen['scrollWidth']} px wide; "
        f"sticking out: {seen['outermost']}; farthest: {seen['farthest']}"
    )


def walk(ui: UiPage, visits: list[Visit], width: int) -> list[str]:
    problems = []
    for visit in visits:
        ui.goto(visit.path, status=visit.status, check=False)
        if visit.step is not None:
            visit.step(ui)
        ui.page.wait_for_load_state("load")
        problem = measure(ui, visit, width)
        if problem:
            problems.append(problem)
    return problems


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_is_wider_than_the_window(
    width: int, browser: Browser, stretched: Stretched, axe_source: str, screenshot_dir: Path
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 860})
    try:
        ui = UiPage(context, stretched.server, axe_source, screenshot_dir)
        problems = walk(ui, signed_out_pages(stretched), width)
        ui.sign_in(stretched.token_value)
        # The header shortens the signed-in name; the whole of it stays in its tooltip.
        expect(ui.page.locator(".who-name")).to_have_attribute("title", re.compile(re.escape(stretched.token_name)))
        problems += walk(ui, signed_in_pages(stretched), width)
        ui.goto(f"/ui/prompts?q={stretched.prompt[:20]}", check=False)
        ui.shot(f"layout-list-{width}")
    finally:
        context.close()
    assert not problems, f"{len(problems)} pages too wide or failing at {width} px:\n" + "\n".join(problems)
