"""Bulk import: one transaction for the whole bundle, batched statements, one change-log range and
one change signal, every invalid file reported at once (path, field, line)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text

from registry.catalog import bulk
from registry.catalog.bulk import BulkWriter, ImportWritten
from registry.catalog.errors import Conflict, Invalid
from registry.catalog.values import WriteOptions
from registry.db.changelog import NOTIFY_CHANNEL
from registry.db.listener import libpq_conninfo
from registry.runtime import Registry
from tests.test_bundles import counts


def write_prompts(
    folder: Path, count: int, *, start: int = 0, text_of: str = "Tell me about {{{{ topic }}}} ({i})"
) -> None:
    (folder / "prompts").mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        (folder / "prompts" / f"p{i:04d}.yaml").write_text(
            f"name: p{i:04d}\ndescription: prompt {i}\narguments:\n  - name: topic\n    required: true\n"
            f"template: '{text_of.format(i=i)}'\n"
        )


def write_tools(folder: Path, count: int) -> None:
    (folder / "tools").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / "tools" / f"t{i:02d}.yaml").write_text(
            f"name: t{i:02d}\ninputSchema: {{type: object}}\nwebhook:\n  url: builtin://echo\n"
        )


#: How the 17th file (in import order: prompts, resources, tools) of a 30-file bundle fails. The
#: first is found by validation; the other two were found only while writing, entry by entry,
#: after 16 entries had been committed.
FAILURES = {
    "invalid-template": ("prompts/p0016.yaml", "name: p0016\ntemplate: 'hi {{ nobody }}'\n", "template", 2),
    "masked-secret": (
        "tools/t00.yaml",
        "name: t00\ninputSchema: {type: object}\nwebhook:\n  url: builtin://echo\n  headers:\n    X-Key: '********'\n",
        "webhook.headers.X-Key",
        6,
    ),
    "uri-taken": ("resources/r.yaml", "name: r\nuri: docs://taken\ntext: mine\n", "uri", 2),
}


@pytest.fixture(params=sorted(FAILURES))
def seventeenth_fails(request: pytest.FixtureRequest, registry: Registry, tmp_path: Path) -> tuple[Path, str]:
    """30 entries whose 17th file (in import order) cannot be imported, and how it fails."""
    bundle = tmp_path / "bundle"
    relative, body, _field, _line = FAILURES[request.param]
    if request.param == "invalid-template":
        write_prompts(bundle, 30)
    else:
        write_prompts(bundle, 16)
        write_tools(bundle, 14 if request.param == "masked-secret" else 13)
    if request.param == "uri-taken":
        (bundle / "resources").mkdir()
        registry.catalog.create(
            "resource", {"name": "owner", "uri": "docs://taken", "text": "theirs"}, WriteOptions(actor="admin")
        )
    (bundle / relative).write_text(body)
    return bundle, request.param


def test_a_bundle_whose_17th_file_fails_writes_nothing(registry: Registry, seventeenth_fails: tuple[Path, str]) -> None:
    bundle, failure = seventeenth_fails
    relative, _body, field, line = FAILURES[failure]
    before = counts(registry)
    with pytest.raises(Invalid, match=r"1 of 30 bundle files are invalid; nothing was written") as refused:
        registry.bundles.apply_import(bundle, actor="tester")
    assert [(e["path"], e["loc"], e["line"]) for e in refused.value.errors or []] == [
        (str(bundle / relative), field, line)
    ]
    assert counts(registry) == before

    # Seeding at start-up (only_missing) goes through the same all-or-nothing path.
    with pytest.raises(Invalid):
        registry.seed(str(bundle))
    assert counts(registry) == before


def test_a_failure_inside_the_write_rolls_the_whole_bundle_back(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle is valid, but the database refuses part of the write (here: the change rows,
    written after every entry, version and label): nothing of it stays."""
    write_prompts(tmp_path / "bundle", 30)

    def refuse(*_args: Any, **_kwargs: Any) -> int:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(bulk, "_append_changes", refuse)
    with pytest.raises(RuntimeError, match="disk is full"):
        registry.bundles.apply_import(tmp_path / "bundle", actor="tester")
    assert counts(registry) == {"entries": 0, "entry_versions": 0, "labels": 0, "changes": 0}


def test_an_entry_created_meanwhile_refuses_the_whole_bundle(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the plan and the write someone creates the 17th entry: the import writes nothing
    (seeding retries on this Conflict and then finds the entry present)."""
    write_prompts(tmp_path / "bundle", 30)
    original = BulkWriter.import_heads

    def racing(self: BulkWriter, *args: Any, **kwargs: Any) -> ImportWritten:
        self.catalog.create("prompt", {"name": "p0016", "template": "mine"}, WriteOptions(actor="admin"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BulkWriter, "import_heads", racing)
    with pytest.raises(Conflict, match=r"prompt 'p0016' was created while the import was being prepared"):
        registry.bundles.apply_import(tmp_path / "bundle", actor="tester")
    assert counts(registry) == {"entries": 1, "entry_versions": 1, "labels": 2, "changes": 1}
    assert registry.catalog.get("prompt", "p0016").author == "admin"


@pytest.fixture
def statements(registry: Registry) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(registry.db.engine, "before_cursor_execute", count)
    yield seen
    event.remove(registry.db.engine, "before_cursor_execute", count)


def test_two_thousand_prompts_are_one_transaction_of_batched_statements(
    registry: Registry, tmp_path: Path, statements: list[str]
) -> None:
    """Statements grow with the number of chunks, not of entries (one transaction per entry took
    12 statements each), and the whole import is one change-log range announced by one signal."""
    write_prompts(tmp_path / "b", 2000)
    signals: list[int] = []
    registry.catalog.on_change(signals.append)
    done = registry.bundles.apply_import(tmp_path / "b", actor="tester")
    assert {item.action for item in done} == {"create"} and len(done) == 2000
    assert len(statements) < 60, f"{len(statements)} statements for 2,000 entries"
    assert counts(registry) == {"entries": 2000, "entry_versions": 2000, "labels": 4000, "changes": 2000}
    catalog = "kind IN ('prompt', 'resource', 'tool')"
    with registry.db.engine.connect() as conn:
        first, last = conn.execute(text(f"SELECT MIN(id), MAX(id) FROM changes WHERE {catalog}")).one()
        actions = set(conn.execute(text(f"SELECT DISTINCT action FROM changes WHERE {catalog}")).scalars())
        closing = conn.execute(text("SELECT id, kind, action, note FROM changes ORDER BY id DESC LIMIT 1")).one()
    assert last - first == 1999  # one contiguous range
    assert actions == {"created"}
    # ... closed by the bundle's governance event, in the same range.
    assert tuple(closing) == (last + 1, "bundle", "imported", "2000 entries written; labels moved: latest, production")
    assert signals == [last + 1]  # one in-process signal, carrying the last id
    view = registry.catalog.get("prompt", "p1234")
    assert (view.version, view.labels, view.author) == (1, {"latest": 1, "production": 1}, "tester")
    assert view.spec["messages"][0]["content"]["text"] == "Tell me about {{ topic }} (1234)"

    # A re-import of the same bundle plans and writes nothing.
    statements.clear()
    again = registry.bundles.apply_import(tmp_path / "b", actor="tester")
    assert {item.action for item in again} == {"unchanged"}
    assert signals == [last + 1]
    assert counts(registry)["changes"] == 2000
    assert len(statements) < 30, f"{len(statements)} statements to compare 2,000 entries"


def test_updates_move_labels_and_record_what_lists_show(registry: Registry, tmp_path: Path) -> None:
    write_prompts(tmp_path / "b", 3)
    registry.bundles.apply_import(tmp_path / "b", actor="tester")
    for name in ("p0000", "p0001"):
        registry.catalog.set_label("prompt", name, "staging", 1, WriteOptions(actor="admin"))
    # p0000: a template-only edit (lists unchanged); p0001: a description edit; p0002: unchanged.
    write_prompts(tmp_path / "b", 1, text_of="Something else about {{{{ topic }}}} ({i})")
    (tmp_path / "b" / "prompts" / "p0001.yaml").write_text(
        "name: p0001\ndescription: new words\narguments:\n  - name: topic\n    required: true\n"
        "template: 'Tell me about {{ topic }} (1)'\n"
    )
    plan = {item.name: item.action for item, _ in registry.bundles.plan_import(tmp_path / "b")}
    assert plan == {"p0000": "update", "p0001": "update", "p0002": "unchanged"}

    registry.bundles.apply_import(tmp_path / "b", actor="ci", labels=["staging"])
    p0 = registry.catalog.get("prompt", "p0000")
    p1 = registry.catalog.get("prompt", "p0001")
    assert (p0.version, p0.labels) == (2, {"latest": 2, "production": 1, "staging": 2})
    assert (p1.version, p1.labels, p1.author) == (2, {"latest": 2, "production": 1, "staging": 2}, "ci")
    assert p1.spec["description"] == "new words"
    with registry.db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT name, action, version, labels, listing_changed FROM changes WHERE actor = 'ci' "
                "AND kind = 'prompt' ORDER BY name"
            )
        ).all()
    parsed = [(n, a, v, _json(labels), _json(shown)) for n, a, v, labels, shown in rows]
    assert parsed == [
        ("p0000", "updated", 2, ["latest", "staging"], []),  # only the template changed
        ("p0001", "updated", 2, ["latest", "staging"], ["latest", "staging"]),
    ]


def _json(value: Any) -> Any:
    import json

    return json.loads(value) if isinstance(value, str) else value


def test_every_invalid_file_is_reported_with_field_and_line(registry: Registry, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    write_prompts(bundle, 2)
    (bundle / "tools").mkdir()
    (bundle / "resources").mkdir()
    files = {
        "prompts/yaml.yaml": "name: yaml\ntemplate: hi\n  bad: indentation\n",
        "prompts/extra.yaml": "name: extra\ntemplate: hi\narguments:\n  - name: a\n    colour: red\n",
        "prompts/twice.yaml": "name: p0001\ntemplate: hi\n",
        "prompts/alias.yaml": "name: &n alias\ntitle: *n\ntemplate: hi\n",
        "tools/masked.yaml": (
            "name: masked\ninputSchema: {type: object}\nwebhook:\n  url: builtin://echo\n"
            "  headers:\n    X-Api-Key: '********'\n"
        ),
        "tools/unset.yaml": (
            "name: unset\ninputSchema: {type: object}\nwebhook:\n  url: builtin://echo\n"
            "  secret: ${env:REGISTRY_TEST_SURELY_UNSET}\n"
        ),
        "resources/schema.yaml": "name: schema\nkind: static\nuri: 'docs://x'\ntext: hi\ncache_ttl_s: -1\n",
    }
    for name, body in files.items():
        (bundle / name).write_text(body)
    os.environ.pop("REGISTRY_TEST_SURELY_UNSET", None)
    with pytest.raises(Invalid, match=r"7 of 9 bundle files are invalid") as refused:
        registry.bundles.plan_import(bundle)
    errors = {(Path(e["path"]).relative_to(bundle).as_posix(), e["loc"], e["line"]) for e in refused.value.errors or []}
    assert errors == {
        ("prompts/yaml.yaml", "", 3),
        ("prompts/extra.yaml", "arguments.0.colour", 5),
        ("prompts/twice.yaml", "name", 1),
        ("prompts/alias.yaml", "", 2),
        ("tools/masked.yaml", "webhook.headers.X-Api-Key", 6),
        ("tools/unset.yaml", "webhook.secret", 5),
        ("resources/schema.yaml", "cache_ttl_s", 5),
    }
    message = str(refused.value)
    assert "environment variable REGISTRY_TEST_SURELY_UNSET is not set" in message
    assert "aliases (*name) are not accepted" in message
    assert "appears twice in the bundle" in message
    assert "there is no stored value to keep: export with --secrets-key or --secrets env" in message
    assert counts(registry)["entries"] == 0


def test_postgres_notifies_once_per_import(registry: Registry, tmp_path: Path, statements: list[str]) -> None:
    """One NOTIFY for the whole import, carrying the last change id (replicas read the range)."""
    if not registry.db.is_postgres:
        pytest.skip("NOTIFY is PostgreSQL's")
    write_prompts(tmp_path / "b", 300)
    with psycopg.connect(libpq_conninfo(registry.db.url), autocommit=True) as listener:
        listener.execute(f'LISTEN "{NOTIFY_CHANNEL}"')
        registry.bundles.apply_import(tmp_path / "b", actor="tester")
        # The channel is shared by every schema on the server (other tests may notify too).
        payloads = [n.payload for n in listener.notifies(timeout=1.0)]
    with registry.db.engine.connect() as conn:
        last = conn.execute(text("SELECT MAX(id) FROM changes")).scalar_one()
    assert str(last) in payloads
    assert sum("pg_notify" in statement for statement in statements) == 1
    assert sum("pg_advisory_xact_lock" in statement for statement in statements) == 1
