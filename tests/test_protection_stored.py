"""Protection is catalog state: ``production`` protected in the database holds on every path that
writes, in processes started *without* ``REGISTRY_PROTECTED_LABELS``: the admin API, the web UI
(label move and bundle upload), ``mcp-registry import``, ``serve --seed`` and ``stdio --seed`` on a
catalog that is not empty. Only an approved change request or a marked override moves it; a bundle
that would move it opens change requests, and the plans say so beforehand."""

from __future__ import annotations

import io
import os
import re
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import select

from registry.catalog.errors import Conflict
from registry.config import Settings
from registry.db.models import Change, ChangeRequest, ProtectedLabel
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.http import TLS
from tests.serve_process import ServerProcess, mcp_registry_command
from tests.ui.conftest import CSRF, sign_in

SETTING = "REGISTRY_PROTECTED_LABELS"


def prompt_file(folder: Path, name: str, text: str) -> Path:
    """A one-prompt entry bundle file under ``folder/prompts``."""
    (folder / "prompts").mkdir(parents=True, exist_ok=True)
    path = folder / "prompts" / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "description": "test", "template": text}, sort_keys=False))
    return folder


def zipped(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*.yaml")):
            archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def cli_env(settings: Settings) -> dict[str, str]:
    """A writer's environment: the database and key, and no REGISTRY_PROTECTED_LABELS."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("REGISTRY_")}
    env |= {"REGISTRY_DATABASE_URL": str(settings.database_url), "REGISTRY_SECRET_KEY": str(settings.secret_key)}
    env["REGISTRY_DATA_DIR"] = str(settings.data_dir)
    return env


def run_cli(settings: Settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*mcp_registry_command(), *args],
        env=cli_env(settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def production_of(registry: Registry, name: str) -> int | None:
    return registry.catalog.get("prompt", name).labels.get("production")


def requests_for(registry: Registry, name: str) -> list[ChangeRequest]:
    with registry.db.session() as session:
        return list(session.scalars(select(ChangeRequest).where(ChangeRequest.name == name).order_by(ChangeRequest.id)))


def test_production_protected_in_the_database_holds_on_every_path(settings: Settings, tmp_path: Path) -> None:
    assert SETTING not in os.environ
    # A process with the variable prepares the catalog (the seed of the empty catalog publishes).
    first = Registry(replace(settings, protected_labels=("production",)))
    first.prepare(seed="demo")
    first.close()
    with Registry(settings).db.session() as session:
        row = session.get(ProtectedLabel, "production")
        assert row is not None and row.source == "environment", "the variable was written into the catalog"

    # Every writer below runs without the variable.
    registry = Registry(settings)
    assert not registry.settings.protected_labels
    registry.prepare()
    assert production_of(registry, "summarize") == 1
    server = LiveServer(registry)
    server.start()
    try:
        with server.client() as api:
            # 1. The API: a save holds production (and opens a request when asked); a move is refused.
            saved = api.patch(
                "/api/v1/prompts/summarize",
                json={"description": "edited through the API", "request_review": True},
            )
            assert saved.status_code == 200, saved.text
            assert saved.json()["held_labels"] == ["production"]
            moved = api.put("/api/v1/prompts/summarize/labels/production", json={"version": 2})
            assert moved.status_code == 403, moved.text
            created = api.post("/api/v1/prompts", json={"name": "api-new", "template": "hi"})
            assert created.status_code == 201 and created.json()["held_labels"] == ["production"]
            assert production_of(registry, "summarize") == 1

        with httpx.Client(base_url=server.url, timeout=60, verify=TLS) as ui:
            # 2. The web UI: the promote form is refused; a bundle upload plans review and opens requests.
            assert sign_in(ui, str(settings.admin_token)).status_code == 303
            csrf = CSRF.search(ui.get("/ui/bundles").text)
            assert csrf is not None
            promoted = ui.post(
                "/ui/prompts/summarize/promote",
                data={"csrf_token": csrf.group(1), "label": "production", "version": "2"},
            )
            assert promoted.status_code == 403, promoted.text[:300]
            bundle = prompt_file(tmp_path / "ui-bundle", "summarize", "UI upload, edited")
            prompt_file(bundle, "ui-new", "a new prompt from the UI")
            sent = ui.post(
                "/ui/bundles",
                data={"csrf_token": csrf.group(1)},
                files={"bundle": ("protected.zip", zipped(bundle), "application/zip")},
            )
            assert sent.status_code == 303, sent.text[:500]
            plan = ui.get(sent.headers["location"])
            assert plan.status_code == 200
            assert 'id="plan-review"' in plan.text and "2 entries go to review" in plan.text
            assert plan.text.count('<td class="plan-review">production</td>') == 2
            fingerprint = re.search(r'name="fingerprint" value="([^"]+)"', plan.text)
            assert fingerprint is not None
            applied = ui.post(
                sent.headers["location"] + "/apply",
                data={"csrf_token": csrf.group(1), "fingerprint": fingerprint.group(1)},
            )
            assert applied.status_code == 303, applied.text[:500]
            told = ui.get(applied.headers["location"]).text
            assert "production is protected: 2 change requests" in told and "wait for review" in told
        assert production_of(registry, "summarize") == 1
        assert "production" not in registry.catalog.get("prompt", "ui-new").labels
        ui_requests = requests_for(registry, "ui-new")
        assert [(r.label, r.from_version, r.to_version, r.state) for r in ui_requests] == [
            ("production", None, 1, "in_review")
        ]
        assert ui_requests[0].author_key.startswith("token:"), "the uploader authored it (and may not approve it)"

        # 3. `mcp-registry import`, planned and applied, from a process without the variable.
        bundle = prompt_file(tmp_path / "cli-bundle", "summarize", "CLI import, edited")
        prompt_file(bundle, "cli-new", "a new prompt from the CLI")
        planned = run_cli(settings, "import", str(bundle), "--plan")
        assert planned.returncode == 0, planned.stderr
        assert re.search(r"update +prompt +summarize +live: latest +review: production", planned.stdout)
        assert re.search(r"create +prompt +cli-new +live: latest +review: production", planned.stdout)
        done = run_cli(settings, "import", str(bundle))
        assert done.returncode == 0, done.stderr
        assert "2 entries went to review" in done.stdout
        assert re.search(
            r"create +prompt +cli-new +live: latest +review: production \(change request #\d+\)", done.stdout
        )
        assert production_of(registry, "summarize") == 1
        assert [(r.label, r.from_version) for r in requests_for(registry, "cli-new")] == [("production", None)]

        # 4. `serve --seed` on a catalog that is not empty: its new entries go to review too.
        seeded = prompt_file(tmp_path / "seed-bundle", "seed-new", "seeded at start-up")
        env = {"REGISTRY_SECRET_KEY": str(settings.secret_key)}
        with ServerProcess(
            tmp_path / "serve", database_url=str(settings.database_url), env=env, args=["--seed", str(seeded)]
        ):
            pass
        assert "production" not in registry.catalog.get("prompt", "seed-new").labels
        assert [r.label for r in requests_for(registry, "seed-new")] == ["production"]

        # 5. `stdio --seed` likewise (stdin closed at once: it seeds, serves nothing, exits).
        stdio_bundle = prompt_file(tmp_path / "stdio-bundle", "stdio-new", "seeded by stdio")
        stdio = run_cli(settings, "stdio", "--seed", str(stdio_bundle), stdin="")
        assert stdio.returncode == 0, stdio.stderr
        assert "production" not in registry.catalog.get("prompt", "stdio-new").labels
        assert [r.label for r in requests_for(registry, "stdio-new")] == ["production"]

        # Only a marked override (or a published request) moves it.
        with server.client() as api:
            forced = api.put(
                "/api/v1/prompts/summarize/labels/production", json={"version": 2, "override_reason": "incident 7"}
            )
            assert forced.status_code == 200, forced.text
    finally:
        server.stop()
        registry.close()
    with registry.db.session() as session:
        moves = session.scalars(select(Change).where(Change.name == "summarize", Change.action == "label_moved")).all()
    assert [(m.override, m.reason) for m in moves] == [(True, "incident 7")], "no move but the marked override"


def test_the_variable_only_adds_and_an_admin_unprotects(settings: Settings) -> None:
    with_variable = Registry(replace(settings, protected_labels=("production",), required_approvals=2))
    with_variable.prepare()
    with pytest.raises(Conflict, match="only adds protection"):
        with_variable.protection.unprotect("production", actor="admin")
    with_variable.close()

    without = Registry(settings)
    without.prepare()  # dropping the label from the variable unprotects nothing
    assert without.protection.get("production") | {"created_at": None} == {
        "name": "production",
        "approvals": 2,
        "source": "environment",
        "created_by": "environment",
        "created_at": None,
    }
    without.protection.unprotect("production", actor="admin")
    assert not without.protection.protected("production")
    with without.db.session() as session:
        actions = session.scalars(select(Change.action).where(Change.kind == "label").order_by(Change.id)).all()
    assert actions == ["label_protected", "label_unprotected"]
    without.close()


def test_the_seed_of_an_empty_catalog_publishes_only_there(settings: Settings, tmp_path: Path) -> None:
    registry = Registry(settings)
    registry.prepare()
    registry.protection.protect("production", None, actor="admin")
    registry.prepare(seed="demo")  # empty when the start-up began: the system's own catalog
    assert production_of(registry, "summarize") == 1
    assert not requests_for(registry, "summarize")
    registry.prepare(seed=str(prompt_file(tmp_path / "later", "later", "a later seed")))
    assert "production" not in registry.catalog.get("prompt", "later").labels
    assert [(r.label, r.to_version, r.author) for r in requests_for(registry, "later")] == [("production", 1, "seed")]
    registry.close()
