"""Long lists in a real browser (issue 25, item 6): page numbers and a jump to a page, sorting by
name, update time and usage, and folders made from dotted names, each page passing the
``UiPage`` checks (no page or console error, axe clean), with JavaScript on and off.

The 120 prompts of this module live under one fresh prefix (``lst<hex>.``), so the ``prefix``
filter shows exactly them whatever else the shared server holds: 60 directly in it, 40 in
``support.`` and 20 in ``billing.``. At 50 a page that is three pages.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

try:
    from playwright.sync_api import Browser, expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.ui.conftest import UiPage, UiServer, sign_in
from tests.waiting import wait_until


@dataclass(frozen=True)
class LongList:
    prefix: str
    names: list[str]

    def under(self, folder: str) -> list[str]:
        return [n for n in self.names if n.startswith(self.prefix + folder)]


@pytest.fixture(scope="module")
def long_list(ui_server: UiServer) -> LongList:
    prefix = f"lst{secrets.token_hex(3)}."
    names = (
        [f"{prefix}top-{i:03d}" for i in range(60)]
        + [f"{prefix}support.item-{i:02d}" for i in range(40)]
        + [f"{prefix}billing.item-{i:02d}" for i in range(20)]
    )
    ui_server.create_prompts(names)
    return LongList(prefix, sorted(names))


def _names_shown(ui: UiPage) -> list[str]:
    return ui.page.locator("table.entries tbody a.entry-name").all_inner_texts()


def test_page_numbers_and_jump_to_a_page(ui: UiPage, long_list: LongList) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto(f"/ui/prompts?prefix={long_list.prefix}")
    expect(ui.page.get_by_role("status")).to_contain_text("120 prompts")
    expect(ui.page.get_by_role("status")).to_contain_text("page 1 of 3")
    pages = ui.page.get_by_role("navigation", name="Pages")
    expect(pages.get_by_role("link", name="Page 1", exact=True)).to_have_attribute("aria-current", "page")
    expect(pages.get_by_role("link", name="Page 3", exact=True)).to_be_visible()
    assert _names_shown(ui) == long_list.names[:50]

    pages.get_by_role("link", name="Page 2", exact=True).click()
    ui.check()
    expect(
        ui.page.get_by_role("navigation", name="Pages").get_by_role("link", name="Page 2", exact=True)
    ).to_have_attribute("aria-current", "page")
    assert _names_shown(ui) == long_list.names[50:100]

    ui.page.get_by_label("Go to page").fill("3")
    ui.page.get_by_role("button", name="Go", exact=True).click()
    ui.check()
    expect(ui.page).to_have_url(re.compile(r"page=3"))
    expect(ui.page.get_by_role("status")).to_contain_text("page 3 of 3")
    assert _names_shown(ui) == long_list.names[100:]
    ui.shot("list-page-numbers")


def test_sort_by_name_update_and_usage(ui: UiPage, long_list: LongList, editor: httpx.Client) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto(f"/ui/prompts?prefix={long_list.prefix}")
    sort = ui.page.get_by_label("Sort")
    sort.select_option(label="Name, Z to A")  # htmx updates the list in place
    expect(ui.page.locator("table.entries tbody a.entry-name").first).to_have_text(long_list.names[-1])
    expect(ui.page).to_have_url(re.compile(r"sort=name-desc"))
    ui.check()
    assert _names_shown(ui) == long_list.names[::-1][:50]

    # The newest update comes first.
    touched = long_list.names[70]
    with ui.server.admin() as admin:
        spec = admin.get(f"/api/v1/prompts/{touched}").json()["spec"]
        saved = admin.put(f"/api/v1/prompts/{touched}", json={**spec, "description": "touched", "change_note": "x"})
        assert saved.status_code == 200, saved.text
    sort.select_option(label="Recently updated first")
    expect(ui.page.locator("table.entries tbody a.entry-name").first).to_have_text(touched)
    ui.check()

    # Most used first: uses counted from agents' prompts/get (the server writes them every 10 s).
    busy, quiet = long_list.names[110], long_list.names[5]
    ui.server.use_prompt(busy, 3)
    ui.server.use_prompt(quiet, 1)
    used = f"/ui/prompts?prefix={long_list.prefix}&sort=usage"
    wait_until(lambda: '<td class="num">1</td>' in editor.get(used).text, "the uses to be written", timeout=30)
    sort.select_option(label="Most used first (last 30 days)")
    expect(ui.page.locator("table.entries tbody a.entry-name").first).to_have_text(busy)
    ui.check()
    rows = ui.page.locator("table.entries tbody tr")
    expect(rows.nth(0).locator("td").last).to_have_text("3")
    expect(rows.nth(1).locator("a.entry-name")).to_have_text(quiet)
    expect(rows.nth(2).locator("td").last).to_have_text("0")
    ui.shot("list-sorted-by-usage")


def test_folders_with_counts_and_breadcrumbs(ui: UiPage, long_list: LongList) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto(f"/ui/prompts?prefix={long_list.prefix}")
    ui.page.get_by_label("Group into folders").check()
    folders = ui.page.get_by_role("list", name="Folders")
    expect(folders).to_be_visible()
    ui.check()
    expect(folders.get_by_role("listitem")).to_have_count(2)
    expect(folders.get_by_role("listitem").nth(0)).to_contain_text(f"{long_list.prefix}billing.")
    expect(folders.get_by_role("listitem").nth(0)).to_contain_text("20 prompts")
    expect(folders.get_by_role("listitem").nth(1)).to_contain_text("40 prompts")
    here = f"60 prompts in “{long_list.prefix}” outside its subfolders"
    expect(ui.page.get_by_role("status")).to_contain_text(here)
    assert all(".support." not in n and ".billing." not in n for n in _names_shown(ui))

    folders.get_by_role("link", name=f"{long_list.prefix}support.").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("40 prompts")
    assert _names_shown(ui) == long_list.under("support.")
    crumbs = ui.page.get_by_role("navigation", name="Folder")
    expect(crumbs.get_by_role("link", name="support")).to_have_attribute("aria-current", "page")
    ui.shot("list-folder")

    crumbs.get_by_role("link", name=long_list.prefix.rstrip(".")).click()
    ui.check()
    expect(ui.page.get_by_role("list", name="Folders").get_by_role("listitem")).to_have_count(2)
    ui.page.get_by_role("navigation", name="Folder").get_by_role("link", name="All prompts").click()
    ui.check()
    expect(ui.page.get_by_role("list", name="Folders")).to_contain_text(long_list.prefix)


@pytest.fixture
def plain(browser: Browser, ui_server: UiServer, axe_source: str, screenshot_dir: object) -> Iterator[UiPage]:
    """A browser with JavaScript off, signed in as the viewer."""
    context = browser.new_context(java_script_enabled=False, viewport={"width": 390, "height": 844})
    try:
        page = UiPage(context, ui_server, axe_source, screenshot_dir)  # type: ignore[arg-type]
        page.page.goto(ui_server.url + "/ui/signin")
        page.page.get_by_label("API token").fill(ui_server.viewer_token)
        page.page.get_by_role("button", name="Sign in").click()
        yield page
    finally:
        context.close()


def test_paging_sorting_and_folders_without_javascript(plain: UiPage, long_list: LongList) -> None:
    plain.goto(f"/ui/prompts?prefix={long_list.prefix}", check=False)
    plain.page.get_by_label("Sort").select_option(label="Name, Z to A")
    plain.page.get_by_label("Group into folders").check()
    plain.page.get_by_role("button", name="Search").click()
    expect(plain.page).to_have_url(re.compile(r"sort=name-desc.*folders=1|folders=1.*sort=name-desc"))
    expect(plain.page.get_by_role("list", name="Folders").get_by_role("listitem")).to_have_count(2)
    assert _names_shown(plain)[0] == f"{long_list.prefix}top-059"
    plain.page.get_by_role("link", name=f"{long_list.prefix}support.").click()
    assert _names_shown(plain) == long_list.under("support.")[::-1]
    plain.goto(f"/ui/prompts?prefix={long_list.prefix}", check=False)
    plain.page.get_by_label("Go to page").fill("3")
    plain.page.get_by_role("button", name="Go", exact=True).click()
    expect(plain.page.get_by_role("status")).to_contain_text("page 3 of 3")
    assert _names_shown(plain) == long_list.names[100:]


def test_list_parameters_are_bounded(ui_server: UiServer, long_list: LongList) -> None:
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ui_server.viewer_token).status_code == 303
        bad_sort = http.get("/ui/prompts?sort=popularity")
        assert bad_sort.status_code == 400
        assert "&#39;popularity&#39; is not a sort order: use one of name, name-desc, updated, usage" in bad_sort.text
        long_sort = http.get("/ui/prompts", params={"sort": "x" * 300})
        assert long_sort.status_code == 400 and "sort" in long_sort.text
        bad_prefix = http.get("/ui/prompts", params={"prefix": "support/"})
        assert bad_prefix.status_code == 400 and "is not the start of a name" in bad_prefix.text
        long_prefix = http.get("/ui/prompts", params={"prefix": "a" * 129})
        assert long_prefix.status_code == 400 and "is not the start of a name" in long_prefix.text
        past = http.get(f"/ui/prompts?prefix={long_list.prefix}&page=9")
        assert past.status_code == 200
        assert "There is no page 9: the 120 prompts fill 3 pages" in past.text
        assert f'href="/ui/prompts?prefix={long_list.prefix}&amp;page=3">Last page (3)' in past.text
        huge = http.get("/ui/prompts?page=99999999999")
        assert huge.status_code == 400 and "page" in huge.text
        folders_past = http.get(f"/ui/prompts?prefix={long_list.prefix}&folders=1&page=3")
        assert (
            folders_past.status_code == 200 and "There is no page 3: the 60 prompts fill 2 pages" in folders_past.text
        )
