"""Bundles in the web UI at the HTTP level, against a real server: the export download, upload →
plan → apply (written exactly as planned, or re-planned when the catalog changed), and every way
an upload is refused with a clear page and nothing written (bad zip, YAML errors, limits, unsafe
paths, a viewer, a missing CSRF token, another session's upload)."""

from __future__ import annotations

import io
import re
import secrets
import socket
import stat
import zipfile
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from registry.limits import Limits
from registry.ui.security import CONTENT_SECURITY_POLICY
from tests.http import TLS
from tests.serve_process import issue_token
from tests.ui.conftest import CSRF, UiServer, sign_in

LIMITS = Limits()  # the test server runs with the defaults


def zip_of(files: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def prompt_yaml(name: str, template: str, description: str = "A bundle test prompt") -> str:
    spec = {
        "name": name,
        "description": description,
        "arguments": [{"name": "who", "required": True}],
        "template": template,
    }
    return yaml.safe_dump(spec, sort_keys=False)


def csrf_of(http: httpx.Client, path: str = "/ui/bundles") -> str:
    found = CSRF.search(http.get(path).text)
    assert found
    return found.group(1)


def upload(
    http: httpx.Client, content: bytes, *, filename: str = "bundle.zip", csrf: str | None = None
) -> httpx.Response:
    token = csrf if csrf is not None else csrf_of(http)
    return http.post(
        "/ui/bundles",
        data={"csrf_token": token} if token else {},
        files={"bundle": (filename, content, "application/zip")},
    )


def main_text(page: httpx.Response) -> str:
    return page.text.split("<main", 1)[1]


@pytest.fixture
def admin_ui(ui_server: UiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ui_server.url, timeout=60, verify=TLS) as http:
        assert sign_in(http, ui_server.admin_token).status_code == 303
        yield http


@pytest.fixture
def viewer_ui(ui_server: UiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ui_server.url, timeout=60, verify=TLS) as http:
        assert sign_in(http, ui_server.viewer_token).status_code == 303
        yield http


def plan_of(http: httpx.Client, uploaded: httpx.Response) -> tuple[str, httpx.Response]:
    assert uploaded.status_code == 303, main_text(uploaded)[:3000]
    location = uploaded.headers["location"]
    assert re.fullmatch(r"/ui/bundles/plan/[A-Za-z0-9_-]+", location), location
    page = http.get(location)
    assert page.status_code == 200, main_text(page)[:3000]
    return location, page


def fingerprint_of(page: httpx.Response) -> str:
    found = re.search(r'name="fingerprint" value="([0-9a-f]{64})"', page.text)
    assert found, main_text(page)[:3000]
    return found.group(1)


def plan_row(page: httpx.Response, name: str) -> str:
    for row in re.findall(r'<tr class="plan-[^"]+">(.*?)</tr>', page.text, re.DOTALL):
        if f"<td>{name}</td>" in row:
            return row
    raise AssertionError(f"{name} is not in the plan: {main_text(page)[:3000]}")


# ------------------------------------------------------------------ export


def test_the_export_is_a_zipped_bundle_with_write_only_values_masked(
    ui_server: UiServer, viewer_ui: httpx.Client
) -> None:
    tool = f"bundle-hook-{secrets.token_hex(3)}"
    with ui_server.admin() as admin:
        created = admin.post(
            "/api/v1/tools",
            json={
                "name": tool,
                "description": "A tool whose header value is write-only",
                "inputSchema": {"type": "object"},
                "webhook": {"url": "http://127.0.0.1:9/hook", "headers": {"X-Api-Key": "s3cret-header-value"}},
            },
        )
        assert created.status_code == 201, created.text
    page = viewer_ui.get("/ui/bundles")
    assert page.status_code == 200 and "Download export" in page.text
    assert 'action="/ui/bundles"' not in page.text, "a viewer is not offered the upload"

    answer = viewer_ui.get("/ui/bundles/export.zip")
    assert answer.status_code == 200, answer.text[:2000]
    assert answer.headers["content-type"] == "application/zip"
    assert re.search(
        r'attachment; filename="mcp-registry-latest-\d{8}-\d{4}\.zip"', answer.headers["content-disposition"]
    )
    assert answer.headers["cache-control"] == "no-store"
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        names = set(archive.namelist())
        assert {"prompts/summarize.yaml", "tools/echo.yaml", f"tools/{tool}.yaml"} <= names
        hook = yaml.safe_load(archive.read(f"tools/{tool}.yaml"))
        assert hook["webhook"]["headers"] == {"X-Api-Key": "********"}
        assert all(b"s3cret-header-value" not in archive.read(n) for n in names)
        summarize = yaml.safe_load(archive.read("prompts/summarize.yaml"))
        assert summarize["name"] == "summarize"

    production = viewer_ui.get("/ui/bundles/export.zip", params={"label": "production"})
    assert production.status_code == 200 and "mcp-registry-production-" in production.headers["content-disposition"]
    bad = viewer_ui.get("/ui/bundles/export.zip", params={"label": "Not A Label"})
    assert bad.status_code == 400 and "is not a label name" in bad.text


# ------------------------------------------------------------------ upload, plan, apply


def test_upload_shows_the_plan_and_apply_writes_it(ui_server: UiServer, admin_ui: httpx.Client) -> None:
    tag = secrets.token_hex(3)
    existing = ui_server.create_prompt("Hello {{ who }}, version one.", prefix="bundle-upd")
    new = f"bundle-new-{tag}"
    same = _without_messages(ui_server, existing)
    bundle = zip_of(
        {
            # In one top-level folder, as zipping a folder makes it; with files the import skips.
            f"my-bundle/prompts/{existing}.yaml": yaml.safe_dump(
                {**same, "template": "Hello {{ who }}, version two from a bundle."}, sort_keys=False
            ),
            f"my-bundle/prompts/{new}.yaml": prompt_yaml(new, "Brand new, {{ who }}."),
            "my-bundle/prompts/summarize.yaml": _served_yaml(ui_server, "summarize"),
            "my-bundle/README.md": "notes",
            "__MACOSX/._x": b"\x00",
        }
    )
    location, plan = plan_of(admin_ui, upload(admin_ui, bundle, filename="../../my bundle.zip"))
    text = main_text(plan)
    assert "Import plan: my bundle.zip" in text
    row = html_unescape(plan_row(plan, existing))
    assert ">update<" in row
    assert "\n-template: Hello {{ who }}, version one.\n+template: Hello {{ who }}, version two from a bundle." in row
    assert ">create<" in plan_row(plan, new)
    assert ">unchanged<" in plan_row(plan, "summarize")
    assert f"<code>prompts/{new}.yaml</code>" in text, "paths are shown relative to the bundle"
    assert "/tmp/" not in text and "mcpr-bundle-" not in text
    assert "Apply: 2 changes" in text
    assert ui_server.prompt_text(existing, {"who": "Ann"}) == "Hello Ann, version one.", "planning writes nothing"
    assert new not in ui_server.prompt_names()

    applied = admin_ui.post(
        location + "/apply", data={"csrf_token": csrf_of(admin_ui, location), "fingerprint": fingerprint_of(plan)}
    )
    assert applied.status_code == 303 and applied.headers["location"] == "/ui/bundles", main_text(applied)[:2000]
    after = admin_ui.get("/ui/bundles")
    assert "Imported my bundle.zip: 1 created, 1 updated, 1 unchanged." in after.text
    assert ui_server.prompt_text(existing, {"who": "Ann"}) == "Hello Ann, version two from a bundle."
    assert ui_server.prompt_text(new, {"who": "Bo"}) == "Brand new, Bo."
    with ui_server.admin() as admin:
        changes = admin.get("/api/v1/changes", params={"after": 0, "limit": 1000}).json()["items"]
    notes = {c["name"]: c["note"] for c in changes if c["name"] in (existing, new)}
    assert notes[new] == notes[existing] == "imported from my bundle.zip (web UI)", notes

    # Applied: the upload is gone; its plan page says so.
    gone = admin_ui.get(location)
    assert gone.status_code == 404 and "no longer held" in gone.text


def _stored_spec(ui_server: UiServer, name: str) -> dict[str, object]:
    """The newest version of prompt ``name`` as the API shows it (the bundle form)."""
    with ui_server.admin() as admin:
        answer = admin.get(f"/api/v1/prompts/{name}")
    assert answer.status_code == 200, answer.text
    spec: dict[str, object] = answer.json()["spec"]
    return spec


def _served_yaml(ui_server: UiServer, name: str) -> str:
    return yaml.safe_dump(_stored_spec(ui_server, name), sort_keys=False)


def _without_messages(ui_server: UiServer, name: str) -> dict[str, object]:
    return {k: v for k, v in _stored_spec(ui_server, name).items() if k != "messages"}


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_apply_shows_the_new_plan_when_the_catalog_changed_meanwhile(
    ui_server: UiServer, admin_ui: httpx.Client
) -> None:
    name = ui_server.create_prompt("First {{ who }}.", prefix="bundle-race")
    same = _without_messages(ui_server, name)
    bundle = zip_of({f"prompts/{name}.yaml": yaml.safe_dump({**same, "template": "From the bundle {{ who }}."})})
    location, plan = plan_of(admin_ui, upload(admin_ui, bundle))
    shown = fingerprint_of(plan)

    with ui_server.admin() as admin:  # an editor saves meanwhile
        saved = admin.put(f"/api/v1/prompts/{name}", json={**same, "template": "Edited meanwhile {{ who }}."})
        assert saved.status_code == 200, saved.text

    stale = admin_ui.post(location + "/apply", data={"csrf_token": csrf_of(admin_ui, location), "fingerprint": shown})
    assert stale.status_code == 409, main_text(stale)[:2000]
    assert "The catalog changed since this plan was made, so nothing was written" in stale.text
    assert ui_server.prompt_text(name, {"who": "X"}) == "Edited meanwhile X."
    fresh = fingerprint_of(stale)
    assert fresh != shown
    assert "Edited meanwhile" in plan_row(stale, name), "the new plan diffs against the newest version"

    tampered = admin_ui.post(
        location + "/apply", data={"csrf_token": csrf_of(admin_ui, location), "fingerprint": "0" * 64}
    )
    assert tampered.status_code == 409 and ui_server.prompt_text(name, {"who": "X"}) == "Edited meanwhile X."

    applied = admin_ui.post(location + "/apply", data={"csrf_token": csrf_of(admin_ui, location), "fingerprint": fresh})
    assert applied.status_code == 303, main_text(applied)[:2000]
    assert ui_server.prompt_text(name, {"who": "X"}) == "From the bundle X."


def test_a_bundle_that_changes_nothing_offers_no_apply(ui_server: UiServer, admin_ui: httpx.Client) -> None:
    bundle = zip_of({"prompts/summarize.yaml": _served_yaml(ui_server, "summarize")})
    location, plan = plan_of(admin_ui, upload(admin_ui, bundle))
    assert "Nothing to import" in plan.text and "/apply" not in plan.text
    discarded = admin_ui.post(location + "/discard", data={"csrf_token": csrf_of(admin_ui, location)})
    assert discarded.status_code == 303
    assert "discarded" in admin_ui.get("/ui/bundles").text
    assert admin_ui.get(location).status_code == 404


# ------------------------------------------------------------------ refusals


def test_a_file_that_is_not_a_zip_is_refused(admin_ui: httpx.Client) -> None:
    page = upload(admin_ui, b"name: not-a-zip\n", filename="prompt.yaml")
    assert page.status_code == 422 and "not a zip archive" in page.text
    assert "Nothing was imported" in page.text
    empty = upload(admin_ui, b"")
    assert empty.status_code == 422
    no_bundle = upload(admin_ui, zip_of({"notes/readme.txt": "hello"}))
    assert no_bundle.status_code == 422 and "holds no bundle" in no_bundle.text


def test_yaml_and_entry_errors_are_listed_by_file_and_line_and_nothing_is_written(
    ui_server: UiServer, admin_ui: httpx.Client
) -> None:
    tag = secrets.token_hex(3)
    good, broken, invalid = f"bundle-good-{tag}", f"bundle-broken-{tag}", f"bundle-invalid-{tag}"
    bundle = zip_of(
        {
            f"prompts/{good}.yaml": prompt_yaml(good, "Fine {{ who }}."),
            f"prompts/{broken}.yaml": f"name: {broken}\ntemplate: [unclosed\n",
            f"prompts/{invalid}.yaml": f"name: {invalid}\ntemplate: Hi {{{{ undeclared }}}}\n",
        }
    )
    page = upload(admin_ui, bundle)
    assert page.status_code == 422, main_text(page)[:2000]
    text = html_unescape(main_text(page))
    assert "2 of 3 bundle files are invalid; nothing was written" in text
    assert f"prompts/{broken}.yaml:" in text and "not valid YAML" in text
    assert f"prompts/{invalid}.yaml:" in text and "undeclared" in text
    assert "/tmp/" not in text and "mcpr-bundle-" not in text
    assert good not in ui_server.prompt_names()


def test_env_references_are_not_resolved_from_the_servers_environment(admin_ui: httpx.Client) -> None:
    tool = f"bundle-env-{secrets.token_hex(3)}"
    spec = {
        "name": tool,
        "description": "x",
        "inputSchema": {"type": "object"},
        "webhook": {"url": "http://127.0.0.1:9/hook", "headers": {"X-Key": "${env:HOME}"}},
    }
    page = upload(admin_ui, zip_of({f"tools/{tool}.yaml": yaml.safe_dump(spec)}))
    assert page.status_code == 422, main_text(page)[:2000]
    assert "environment variable HOME is not set" in page.text and "mcp-registry import" in page.text


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("../prompts/evil.yaml", "leads out of the bundle"),
        ("prompts/../../evil.yaml", "leads out of the bundle"),
        ("/prompts/evil.yaml", "is not a relative path"),
        ("symlink", "is a symbolic link"),
    ],
)
def test_members_that_could_escape_the_folder_are_refused(admin_ui: httpx.Client, member: str, why: str) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("prompts/fine.yaml", prompt_yaml("fine", "Hi {{ who }}"))
        if member == "symlink":
            link = zipfile.ZipInfo("prompts/link.yaml")
            link.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(link, "/etc/passwd")
        else:
            archive.writestr(zipfile.ZipInfo(member), "name: evil\ntemplate: x\n")
    page = upload(admin_ui, buffer.getvalue())
    assert page.status_code == 422 and why in html_unescape(page.text), main_text(page)[:2000]


def test_an_upload_larger_than_a_form_but_within_the_bundle_limit_is_taken(
    ui_server: UiServer, admin_ui: httpx.Client
) -> None:
    name = f"bundle-large-{secrets.token_hex(3)}"
    padding = secrets.token_bytes(LIMITS.body_bytes + 1024 * 1024)  # incompressible, and skipped on import
    bundle = zip_of({f"prompts/{name}.yaml": prompt_yaml(name, "Hi {{ who }}"), "README.md": padding})
    assert LIMITS.body_bytes < len(bundle) < LIMITS.bundle_bytes
    _location, plan = plan_of(admin_ui, upload(admin_ui, bundle))
    assert ">create<" in plan_row(plan, name)


def test_an_upload_over_the_bundle_limit_is_refused_before_it_is_read(
    ui_server: UiServer, admin_ui: httpx.Client
) -> None:
    csrf = csrf_of(admin_ui)
    url = urlsplit(ui_server.url)
    cookie = "; ".join(f"{c.name}={c.value}" for c in admin_ui.cookies.jar)
    declared = LIMITS.bundle_bytes + 1024 * 1024
    head = (
        f"POST /ui/bundles HTTP/1.1\r\nHost: {url.netloc}\r\nCookie: {cookie}\r\n"
        f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
        f'--x\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n{csrf}\r\n'
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer[:500]
    assert b"REGISTRY_LIMIT_BUNDLE_BYTES" in rest


def test_an_upload_without_a_length_is_counted_as_it_arrives(admin_ui: httpx.Client) -> None:
    csrf = csrf_of(admin_ui)
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n{csrf}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="bundle"; filename="big.zip"\r\n'
        "Content-Type: application/zip\r\n\r\n"
    ).encode()
    total = LIMITS.bundle_bytes + 256 * 1024

    def chunks() -> Iterator[bytes]:
        yield head
        sent = len(head)
        block = b"\0" * (256 * 1024)
        while sent < total:
            yield block
            sent += len(block)
        yield f"\r\n--{boundary}--\r\n".encode()

    page = admin_ui.post(
        "/ui/bundles", content=chunks(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    assert page.status_code == 413 and "REGISTRY_LIMIT_BUNDLE_BYTES" in page.text


def test_a_zip_that_unpacks_past_the_limit_is_refused(ui_server: UiServer, admin_ui: httpx.Client) -> None:
    bomb = zip_of({"prompts/bomb.yaml": b"\0" * (LIMITS.bundle_bytes + 1)})
    assert len(bomb) < 1024 * 1024
    page = upload(admin_ui, bomb)
    assert page.status_code == 413, main_text(page)[:2000]
    assert "unpacks to more than" in page.text and "REGISTRY_LIMIT_BUNDLE_BYTES" in page.text
    assert "bomb" not in ui_server.prompt_names()


def test_a_zip_with_too_many_files_is_refused(admin_ui: httpx.Client) -> None:
    many = zip_of({f"prompts/p{i}.yaml": "" for i in range(LIMITS.bundle_files + 1)})
    page = upload(admin_ui, many)
    assert page.status_code == 422 and "REGISTRY_LIMIT_BUNDLE_FILES" in page.text


def test_a_viewer_cannot_upload_or_see_plans(viewer_ui: httpx.Client) -> None:
    refused = upload(viewer_ui, zip_of({"prompts/x.yaml": prompt_yaml("x", "Hi {{ who }}")}))
    assert refused.status_code == 403 and "this needs admin" in refused.text
    assert viewer_ui.get("/ui/bundles/plan/abc").status_code == 403
    assert viewer_ui.post("/ui/bundles/plan/abc/apply", data={"csrf_token": csrf_of(viewer_ui)}).status_code == 403


def test_a_post_without_the_csrf_token_is_refused(ui_server: UiServer, admin_ui: httpx.Client) -> None:
    name = f"bundle-csrf-{secrets.token_hex(3)}"
    bundle = zip_of({f"prompts/{name}.yaml": prompt_yaml(name, "Hi {{ who }}")})
    forged = upload(admin_ui, bundle, csrf="")
    assert forged.status_code == 403 and "security token" in forged.text

    location, plan = plan_of(admin_ui, upload(admin_ui, bundle))
    no_token = admin_ui.post(location + "/apply", data={"fingerprint": fingerprint_of(plan)})
    assert no_token.status_code == 403
    assert name not in ui_server.prompt_names()


def test_an_upload_belongs_to_the_session_that_made_it(ui_server: UiServer, admin_ui: httpx.Client) -> None:
    name = f"bundle-owner-{secrets.token_hex(3)}"
    location, plan = plan_of(
        admin_ui, upload(admin_ui, zip_of({f"prompts/{name}.yaml": prompt_yaml(name, "Hi {{ who }}")}))
    )
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as other:
        assert sign_in(other, ui_server.admin_token).status_code == 303
        assert other.get(location).status_code == 404
        stolen = other.post(
            location + "/apply", data={"csrf_token": csrf_of(other), "fingerprint": fingerprint_of(plan)}
        )
        assert stolen.status_code == 404
    assert name not in ui_server.prompt_names()
    # A newer upload in the same session replaces it.
    newer, _ = plan_of(admin_ui, upload(admin_ui, zip_of({f"prompts/{name}.yaml": prompt_yaml(name, "Yo {{ who }}")})))
    assert newer != location and admin_ui.get(location).status_code == 404


def test_the_pages_have_the_strict_csp_and_no_inline_script_or_style(
    ui_server: UiServer, admin_ui: httpx.Client
) -> None:
    name = f"bundle-csp-{secrets.token_hex(3)}"
    location, _ = plan_of(
        admin_ui, upload(admin_ui, zip_of({f"prompts/{name}.yaml": prompt_yaml(name, "Hi {{ who }}")}))
    )
    bad = upload(admin_ui, b"not a zip")
    for page in (
        admin_ui.get("/ui/bundles"),
        admin_ui.get(location),
        bad,
        admin_ui.get("/ui/agents"),
        admin_ui.get("/ui/"),
    ):
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.headers["cache-control"] == "no-store"
        assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.text) is None
        assert re.search(r"<style\b|\sstyle=|\son[a-z]+=", page.text) is None


def test_an_export_holds_only_the_entries_its_downloader_sees(ui_server: UiServer, viewer_ui: httpx.Client) -> None:
    """Another team's entries never leave in a download: a viewer in no team gets the global entries,
    a member of the team gets the team's too."""
    suffix = secrets.token_hex(3)
    team, name = f"export-{suffix}", f"team-only-{suffix}"
    with ui_server.admin() as admin:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        made = admin.post("/api/v1/prompts", json={"name": name, "template": "Only for the team", "team": team})
        assert made.status_code == 201, made.text
        member = issue_token(admin, f"export-member-{suffix}", ["viewer"], teams={team: "viewer"})

    def exported(http: httpx.Client) -> set[str]:
        answer = http.get("/ui/bundles/export.zip")
        assert answer.status_code == 200, answer.text[:2000]
        with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
            return set(archive.namelist())

    outside = exported(viewer_ui)
    assert "prompts/summarize.yaml" in outside and f"prompts/{name}.yaml" not in outside
    with httpx.Client(base_url=ui_server.url, timeout=60, verify=TLS) as http:
        assert sign_in(http, member["token"]).status_code == 303
        inside = exported(http)
    assert {"prompts/summarize.yaml", f"prompts/{name}.yaml"} <= inside
