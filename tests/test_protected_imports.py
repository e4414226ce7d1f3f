"""Bundle imports and protected labels: an import is a save, so it never moves a protected label
(only the start-up seed of an empty catalog, the system's own, publishes) and opens a change
request per entry and protected label instead; its plan says which entries go live and which to
review. Imports of a team's entries keep the team in the change log, so only that team's agents
hear of them."""

from __future__ import annotations

import io
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from registry.catalog.bundle_archive import PlanChanged
from registry.catalog.errors import NotFound
from registry.catalog.values import WriteOptions
from registry.config import Settings
from registry.db.models import Change, ChangeRequest
from registry.paths import seed_data_dir
from registry.runtime import Registry

DEMO = seed_data_dir() / "demo"


@pytest.fixture
def protected(settings: Settings) -> Iterator[Registry]:
    registry = Registry(replace(settings, protected_labels=("production",)))
    registry.prepare()
    yield registry
    registry.close()


def edited_demo(tmp_path: Path, wording: str = "Summarise this text") -> Path:
    """The demo bundle with the summarize prompt's template changed."""
    folder = tmp_path / "demo-edited"
    shutil.copytree(DEMO, folder)
    path = folder / "prompts" / "summarize.yaml"
    path.write_text(path.read_text().replace("Summarize the following text", wording))
    return folder


def test_the_seed_publishes_but_an_import_holds_production(protected: Registry, tmp_path: Path) -> None:
    protected.seed("demo")  # an empty catalog's start-up seed: the system's own, published
    seeded = protected.catalog.get("prompt", "summarize")
    assert seeded.labels == {"latest": 1, "production": 1}

    done = protected.bundles.apply_import(edited_demo(tmp_path), actor="importer")
    assert [(i.name, i.action) for i in done if i.action != "unchanged"] == [("summarize", "update")]
    after = protected.catalog.get("prompt", "summarize")
    assert after.version == 2
    assert after.labels == {"latest": 2, "production": 1}, "the import left protected production where it was"
    # Agents are served production: the old text.
    served = protected.catalog.render_prompt("summarize", {"text": "x"}, label="production")
    assert "Summarize the following text" in str(served)

    # Explicit unprotected labels still move.
    again = edited_demo(tmp_path / "again", "Sum up this text")
    protected.bundles.apply_import(again, actor="importer", labels=["staging", "production"])
    assert protected.catalog.get("prompt", "summarize").labels == {"latest": 3, "production": 1, "staging": 3}


def test_an_import_of_a_team_entry_names_the_team(registry: Registry, tmp_path: Path) -> None:
    registry.seed("demo")
    registry.teams.create("docs", actor="admin")
    registry.catalog.set_team("prompt", "summarize", "docs", WriteOptions(actor="admin"))

    registry.bundles.apply_import(edited_demo(tmp_path), actor="importer")
    with registry.db.session() as session:
        row = session.scalars(select(Change).where(Change.kind == "prompt").order_by(Change.id.desc()).limit(1)).one()
        assert (row.kind, row.name, row.action) == ("prompt", "summarize", "updated")
        assert row.team == "docs" and row.audience == ["docs"], "only the docs team's agents hear of it"


def history_bundle(folder: Path, name: str) -> Path:
    """A history bundle of one prompt with two versions, production on v1 and staging on v2."""
    stamp = "2026-01-01T00:00:00+00:00"
    versions = [
        {"version": n, "author": "alice", "created_at": stamp, "spec": {"name": name, "template": f"text {n}"}}
        for n in (1, 2)
    ]
    document = {
        "name": name,
        "archived": False,
        "created_at": stamp,
        "updated_at": stamp,
        "labels": {"production": 1, "staging": 2},
        "versions": versions,
    }
    (folder / "history" / "prompts").mkdir(parents=True)
    (folder / "history" / "prompts" / f"{name}.yaml").write_text(yaml.safe_dump(document))
    return folder


def test_a_history_restore_opens_a_request_for_each_protected_pointer(protected: Registry, tmp_path: Path) -> None:
    planned = protected.bundles.plan_import(history_bundle(tmp_path / "h", "moved"))
    assert [(i.action, i.live, i.review) for i, _ in planned] == [("restore", ("staging",), ("production",))]

    done = protected.bundles.apply_import(tmp_path / "h", actor="mover")
    restored = protected.catalog.get("prompt", "moved")
    assert restored.labels == {"latest": 2, "staging": 2}, "production was not restored past review"
    with protected.db.session() as session:
        opened = session.scalars(select(ChangeRequest).where(ChangeRequest.name == "moved")).all()
        assert [(r.label, r.from_version, r.to_version, r.author) for r in opened] == [("production", None, 1, "mover")]
    assert done[0].change_requests == (opened[0].id,)


def test_an_import_plan_says_which_entries_go_to_review(protected: Registry, tmp_path: Path) -> None:
    protected.seed("demo")
    planned = protected.bundles.plan_import(edited_demo(tmp_path), labels=["staging", "production"])
    changed = [(i.name, i.live, i.review) for i, _ in planned if i.action != "unchanged"]
    assert changed == [("summarize", ("staging",), ("production",))]

    done = protected.bundles.apply_import(edited_demo(tmp_path / "again"), actor="importer")
    (item,) = [i for i in done if i.action == "update"]
    with protected.db.session() as session:
        opened = session.scalars(select(ChangeRequest)).all()
        assert [(r.id, r.name, r.label, r.from_version, r.to_version) for r in opened] == [
            (item.change_requests[0], "summarize", "production", 1, 2)
        ]
        assert opened[0].description == "Opened by the import of the bundle demo-edited: it holds this version."
    # The same bundle again changes nothing and opens nothing more.
    again = protected.bundles.apply_import(edited_demo(tmp_path / "third"), actor="importer")
    assert all(i.action == "unchanged" and not i.change_requests for i in again)


def test_a_ui_plan_made_before_a_label_was_protected_is_not_applied(registry: Registry) -> None:
    """The plan shown said "goes live"; production was protected before Apply: nothing is written
    and the new plan (going to review) is shown instead."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("prompts/fresh.yaml", yaml.safe_dump({"name": "fresh", "template": "hello"}))
    shown = registry.zip_bundles.plan(buffer.getvalue())
    assert [(r.name, r.live, r.review) for r in shown.rows] == [("fresh", ("production",), ())]
    registry.protection.protect("production", None, actor="admin")
    with pytest.raises(PlanChanged) as changed:
        registry.zip_bundles.apply(buffer.getvalue(), fingerprint=shown.fingerprint, actor="admin", source="z")
    assert [(r.name, r.live, r.review) for r in changed.value.plan.rows] == [("fresh", (), ("production",))]
    with pytest.raises(NotFound):
        registry.catalog.get("prompt", "fresh")
