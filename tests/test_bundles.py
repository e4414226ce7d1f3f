"""YAML bundles: import plan, idempotent import, exact export round trip."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from registry.catalog.bundle_secrets import ExportSecrets
from registry.catalog.errors import Invalid
from registry.catalog.values import WriteOptions
from registry.paths import seed_data_dir
from registry.runtime import Registry

DEMO = seed_data_dir() / "demo"
DEMO_ENTRIES = [
    ("prompt", "bug-analysis-report"),
    ("prompt", "code-review"),
    ("prompt", "incident-postmortem"),
    ("prompt", "summarize"),
    ("resource", "postmortem-guidelines"),
    ("resource", "server-info"),
    ("resource", "sprint-status"),
    ("tool", "add"),
    ("tool", "echo"),
]


def counts(registry: Registry) -> dict[str, int]:
    """Rows of the catalog's tables; ``changes`` counts the catalog's own (not governance events,
    such as the start-up admin token's ``token_created``)."""
    catalog_changes = "SELECT COUNT(*) FROM changes WHERE kind IN ('prompt', 'resource', 'tool')"
    with registry.db.engine.connect() as conn:
        found = {
            table: conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
            for table in ("entries", "entry_versions", "labels")
        }
        found["changes"] = conn.execute(text(catalog_changes)).scalar_one()
        return found


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_plan_writes_nothing(registry: Registry) -> None:
    plan = registry.bundles.plan_import(DEMO)
    assert sorted((item.kind, item.name) for item, _ in plan) == DEMO_ENTRIES
    assert {item.action for item, _ in plan} == {"create"}
    assert counts(registry) == {"entries": 0, "entry_versions": 0, "labels": 0, "changes": 0}


def test_import_then_reimport_changes_nothing(registry: Registry) -> None:
    done = registry.bundles.apply_import(DEMO, actor="tester")
    assert sorted((item.kind, item.name, item.action) for item in done) == [(k, n, "create") for k, n in DEMO_ENTRIES]
    after_first = counts(registry)
    assert after_first == {"entries": 9, "entry_versions": 9, "labels": 18, "changes": 9}
    assert registry.catalog.get("prompt", "summarize").author == "tester"
    assert registry.catalog.get("prompt", "summarize").change_note == "imported from demo"

    again = registry.bundles.apply_import(DEMO, actor="tester")
    assert {item.action for item in again} == {"unchanged"}
    assert counts(registry) == after_first


def test_export_round_trip_is_exact(registry: Registry, tmp_path: Path) -> None:
    registry.bundles.apply_import(DEMO, actor="tester")
    before = counts(registry)

    written_a = registry.bundles.export_catalog(tmp_path / "a", secrets=ExportSecrets("mask")).files
    assert sorted(p.relative_to(tmp_path / "a").as_posix() for p in written_a) == sorted(
        f"{kind}s/{name}.yaml" for kind, name in DEMO_ENTRIES
    )
    plan = registry.bundles.plan_import(tmp_path / "a")
    assert {item.action for item, _ in plan} == {"unchanged"}
    assert {item.action for item in registry.bundles.apply_import(tmp_path / "a", actor="tester")} == {"unchanged"}
    assert counts(registry) == before

    registry.bundles.export_catalog(tmp_path / "b", secrets=ExportSecrets("mask"))
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a == b
    # The single-message prompt is exported in the shorthand form a person would write.
    summarize = a["prompts/summarize.yaml"].decode()
    assert "template: " in summarize and "messages:" not in summarize
    assert "messages:" in a["prompts/code-review.yaml"].decode()


def test_export_imports_into_a_fresh_database_identically(registry: Registry, tmp_path: Path) -> None:
    """What one registry exports, another imports to the same definitions."""
    registry.bundles.apply_import(DEMO, actor="tester")
    registry.bundles.export_catalog(tmp_path / "a", secrets=ExportSecrets("mask"))
    with registry.db.engine.begin() as conn:
        for table in ("labels", "entry_versions", "entries", "changes"):
            conn.execute(text(f"DELETE FROM {table}"))
    done = registry.bundles.apply_import(tmp_path / "a", actor="tester")
    assert {item.action for item in done} == {"create"}
    registry.bundles.export_catalog(tmp_path / "b", secrets=ExportSecrets("mask"))
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_import_updates_only_what_differs(registry: Registry, tmp_path: Path) -> None:
    registry.bundles.apply_import(DEMO, actor="tester")
    registry.bundles.export_catalog(tmp_path / "a", secrets=ExportSecrets("mask"))
    path = tmp_path / "a" / "prompts" / "summarize.yaml"
    path.write_text(path.read_text().replace("Summarize a piece of text concisely", "Summarize briefly"))
    before = counts(registry)

    plan = {(item.kind, item.name): item.action for item, _ in registry.bundles.plan_import(tmp_path / "a")}
    assert plan.pop(("prompt", "summarize")) == "update"
    assert set(plan.values()) == {"unchanged"}
    assert counts(registry) == before  # planning wrote nothing

    registry.bundles.apply_import(tmp_path / "a", actor="tester", labels=["staging"])
    view = registry.catalog.get("prompt", "summarize")
    assert (view.version, view.spec["description"]) == (2, "Summarize briefly")
    assert view.labels == {"latest": 2, "production": 1, "staging": 2}
    assert counts(registry)["changes"] == before["changes"] + 1


def test_seed_never_overwrites_admin_edits(registry: Registry) -> None:
    registry.seed("demo")
    spec = {**registry.catalog.get("prompt", "summarize").spec, "description": "edited by an admin"}
    registry.catalog.update("prompt", "summarize", spec, WriteOptions(actor="admin"))
    before = counts(registry)
    registry.seed("demo")  # e.g. the next restart
    assert registry.catalog.get("prompt", "summarize").spec["description"] == "edited by an admin"
    assert counts(registry) == before


def test_archived_entries_are_not_revived_by_import(registry: Registry) -> None:
    registry.bundles.apply_import(DEMO, actor="tester")
    registry.catalog.set_archived("tool", "echo", True, WriteOptions(actor="admin"))
    plan = {(item.kind, item.name): item.action for item, _ in registry.bundles.plan_import(DEMO)}
    assert plan[("tool", "echo")] == "skip-archived"
    before = counts(registry)
    registry.bundles.apply_import(DEMO, actor="tester")
    assert registry.catalog.get("tool", "echo").archived is True
    assert counts(registry) == before


def test_invalid_bundles_are_refused_whole(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "b" / "prompts").mkdir(parents=True)
    (tmp_path / "b" / "prompts" / "good.yaml").write_text("name: good\ntemplate: hi\n")
    (tmp_path / "b" / "prompts" / "bad.yaml").write_text("name: bad\ntemplate: 'hi {{ nobody }}'\n")
    with pytest.raises(Invalid, match=r"bad\.yaml:2: template: uses undeclared variable\(s\) nobody"):
        registry.bundles.apply_import(tmp_path / "b", actor="tester")
    assert counts(registry)["entries"] == 0

    (tmp_path / "b" / "prompts" / "bad.yaml").write_text("name: good\ntemplate: again\n")
    with pytest.raises(Invalid, match="appears twice"):
        registry.bundles.plan_import(tmp_path / "b")
    (tmp_path / "b" / "prompts" / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(Invalid, match="not valid YAML"):
        registry.bundles.plan_import(tmp_path / "b")
    with pytest.raises(Invalid, match="does not exist"):
        registry.bundles.plan_import(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(Invalid, match="holds no"):
        registry.bundles.plan_import(tmp_path / "empty")
    assert counts(registry)["entries"] == 0
