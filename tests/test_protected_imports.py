"""Bundle imports and protected labels: an import is a save, so it never moves a protected label
(only the start-up seed of an empty catalog, the system's own, publishes); imports of a team's
entries keep the team in the change log, so only that team's agents hear of them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.catalog.bundles import apply_import
from registry.config import Settings
from registry.db.models import Change
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

    done = apply_import(protected.catalog, edited_demo(tmp_path), actor="importer")
    assert [(i.name, i.action) for i in done if i.action != "unchanged"] == [("summarize", "update")]
    after = protected.catalog.get("prompt", "summarize")
    assert after.version == 2
    assert after.labels == {"latest": 2, "production": 1}, "the import left protected production where it was"
    # Agents are served production: the old text.
    served = protected.catalog.render_prompt("summarize", {"text": "x"}, label="production")
    assert "Summarize the following text" in str(served)

    # Explicit unprotected labels still move.
    again = edited_demo(tmp_path / "again", "Sum up this text")
    apply_import(protected.catalog, again, actor="importer", labels=["staging", "production"])
    assert protected.catalog.get("prompt", "summarize").labels == {"latest": 3, "production": 1, "staging": 3}


def test_an_import_of_a_team_entry_names_the_team(registry: Registry, tmp_path: Path) -> None:
    registry.seed("demo")
    registry.teams.create("docs", actor="admin")
    registry.catalog.set_team("prompt", "summarize", "docs", actor="admin")

    apply_import(registry.catalog, edited_demo(tmp_path), actor="importer")
    with registry.db.session() as session:
        row = session.scalars(select(Change).where(Change.kind == "prompt").order_by(Change.id.desc()).limit(1)).one()
        assert (row.kind, row.name, row.action) == ("prompt", "summarize", "updated")
        assert row.team == "docs" and row.audience == ["docs"], "only the docs team's agents hear of it"
