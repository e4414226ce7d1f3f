"""Catalog search (``GET /api/v1/{kind}?q=&tag=``, ``CatalogService.list_entries``) on both databases:
the same answers as a plain substring search over name, title, description and tags, whichever
index path serves them (FTS5 trigram phrase, FTS5 vocabulary for short needles, scan, pg_trgm).

Speed at 100,000 entries is measured by ``benchmarks/search.py``, not asserted here.
"""

from __future__ import annotations

import importlib.util
import random
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from alembic import command
from sqlalchemy import insert, inspect, text

from registry.catalog.service import CatalogService
from registry.catalog.values import WriteOptions
from registry.db import migrate, search
from registry.db.models import SEARCH_TEXT_SQL, Entry
from registry.runtime import Registry
from tests.factories import prompt_body

ROOT = Path(__file__).resolve().parent.parent


def _migration() -> ModuleType:
    path = ROOT / "migrations" / "versions" / "0005_catalog_search.py"
    spec = importlib.util.spec_from_file_location("catalog_search_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_prompt = partial(prompt_body, template="static text", arguments=(), tags=())


def _names(catalog: CatalogService, **query: Any) -> list[str]:
    return [item["name"] for item in catalog.list_entries("prompt", limit=500, **query).items]


@pytest.fixture
def catalog(registry: Registry) -> CatalogService:
    return registry.catalog


def _drop_search_index(registry: Registry) -> None:
    """The state migration 0005 leaves where it could not build an index (no FTS5, no pg_trgm)."""
    with registry.db.engine.begin() as conn:
        if registry.db.is_postgres:
            conn.execute(text(f"DROP INDEX IF EXISTS {search.TRIGRAM_INDEX}"))
            return
        for trigger in ("entries_search_insert", "entries_search_delete", "entries_search_update"):
            conn.execute(text(f"DROP TRIGGER {trigger}"))
        conn.execute(text("DROP TABLE entries_search_vocab"))
        conn.execute(text("DROP TABLE entries_search"))


def test_every_field_is_searched_in_any_case(catalog: CatalogService) -> None:
    catalog.create("prompt", _prompt("invoice-reminder"), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("a1", title="Quarterly Report"), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("a2", description="Summarise the SHIPPING manifest"), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("a3", tags=["Payments", "ops"]), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("a4", description="nothing to see"), WriteOptions(actor="t"))

    assert _names(catalog, q="INVOICE") == ["invoice-reminder"]
    assert _names(catalog, q="quarterly rep") == ["a1"]
    assert _names(catalog, q="shipping") == ["a2"]
    assert _names(catalog, q="payments") == ["a3"]  # tags are searched too
    assert _names(catalog, q="ay") == ["a3"]  # two characters
    assert _names(catalog, q="Q") == ["a1"]  # one character
    assert _names(catalog, q="xyz") == []
    assert _names(catalog, q="zz") == []
    page = catalog.list_entries("prompt", q="e")
    assert (page.total, page.total_exact) == (5, True)


def test_wildcards_quotes_and_query_syntax_match_themselves(catalog: CatalogService) -> None:
    texts = {
        "pct": "50% off",
        "under": "a_b c",
        "slash": "either/or",
        "quote": 'say "hi" now',
        "star": "glob * star",
        "ops": "NEAR(a b) AND OR NOT",
        "colon": "col:umn ^caret",
        "plain": "axb c",
    }
    for name, description in texts.items():
        catalog.create("prompt", _prompt(name, description=description), WriteOptions(actor="t"))
    assert _names(catalog, q="50%") == ["pct"]
    assert _names(catalog, q="%") == ["pct"]
    assert _names(catalog, q="a_b") == ["under"]
    assert _names(catalog, q="_") == ["under"]
    assert _names(catalog, q="r/o") == ["slash"]
    assert _names(catalog, q="/") == ["slash"]
    assert _names(catalog, q='"hi"') == ["quote"]
    assert _names(catalog, q='"') == ["quote"]
    assert _names(catalog, q="*") == ["star"]
    assert _names(catalog, q="b * s") == ["star"]
    assert _names(catalog, q="near(") == ["ops"]
    assert _names(catalog, q="and or not") == ["ops"]
    assert _names(catalog, q="l:u") == ["colon"]
    assert _names(catalog, q="^c") == ["colon"]


def test_tag_filter_is_exact_and_combines_with_search(catalog: CatalogService) -> None:
    catalog.create("prompt", _prompt("p0", description="about invoices", tags=["billing"]), WriteOptions(actor="t"))
    catalog.create(
        "prompt", _prompt("p1", description="about shipping", tags=["billing", "ops"]), WriteOptions(actor="t")
    )
    catalog.create("prompt", _prompt("p2", description="about shipping", tags=["ops"]), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("p3", description="mentions ,billing, in text"), WriteOptions(actor="t"))
    assert _names(catalog, tag="billing") == ["p0", "p1"]
    assert _names(catalog, tag="bill") == []  # whole tags only
    assert _names(catalog, tag="ops", q="shipping") == ["p1", "p2"]
    assert _names(catalog, tag="ops", q="sh") == ["p1", "p2"]
    assert _names(catalog, tag="billing", q="invoice") == ["p0"]
    assert _names(catalog, tag="ops", q="invoice") == []


def test_edits_archive_and_restore_keep_the_index_in_step(catalog: CatalogService) -> None:
    catalog.create("prompt", _prompt("doc", title="Alpha title", description="first words"), WriteOptions(actor="t"))
    assert _names(catalog, q="alpha") == ["doc"]
    catalog.update(
        "prompt", "doc", _prompt("doc", title="Beta title", description="second words"), WriteOptions(actor="t")
    )
    assert _names(catalog, q="alpha") == []
    assert _names(catalog, q="first") == []
    assert _names(catalog, q="beta") == ["doc"]
    assert _names(catalog, q="second") == ["doc"]
    catalog.set_archived("prompt", "doc", True, WriteOptions(actor="t"))
    assert _names(catalog, q="beta") == []
    assert _names(catalog, q="beta", archived=True) == ["doc"]
    catalog.set_archived("prompt", "doc", False, WriteOptions(actor="t"))
    assert _names(catalog, q="beta") == ["doc"]


def test_rows_written_without_the_orm_are_found(registry: Registry) -> None:
    """Bulk import inserts rows with Core statements; the search text is the database's to derive."""
    now = registry.catalog.list_entries("prompt").total  # touch the schema
    assert now == 0
    with registry.db.session() as session:
        session.execute(
            insert(Entry.__table__),  # type: ignore[arg-type]
            [
                {
                    "kind": "prompt",
                    "name": f"bulk{i}",
                    "latest_version": 1,
                    "archived": False,
                    "title": f"Bulk Title {i}",
                    "description": None,
                    "tags": ",imported,",
                }
                for i in range(3)
            ],
        )
    assert _names(registry.catalog, q="bulk title 1") == ["bulk1"]
    assert _names(registry.catalog, tag="imported") == ["bulk0", "bulk1", "bulk2"]


def test_total_counts_exactly_up_to_the_cap(catalog: CatalogService, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        catalog.create("prompt", _prompt(f"match{i}", description="needle here"), WriteOptions(actor="t"))
    catalog.create("prompt", _prompt("other", description="hay"), WriteOptions(actor="t"))
    monkeypatch.setattr(search, "EXACT_COUNT_UP_TO", 3)
    page = catalog.list_entries("prompt", q="needle", limit=2)
    assert (page.total, page.total_exact, len(page.items)) == (3, False, 2)
    page = catalog.list_entries("prompt", q="needle", offset=4)
    assert [i["name"] for i in page.items] == ["match4"]  # paging goes on past the count
    monkeypatch.setattr(search, "EXACT_COUNT_UP_TO", 5)
    page = catalog.list_entries("prompt", q="needle")
    assert (page.total, page.total_exact) == (5, True)
    page = catalog.list_entries("prompt")  # unfiltered: always exact
    assert (page.total, page.total_exact) == (6, True)


def _corpus(rng: random.Random, n: int) -> list[dict[str, Any]]:
    alphabet = "abcdefgh XY-_%,"
    bodies = []
    for i in range(n):
        word = lambda k: "".join(rng.choice(alphabet) for _ in range(k))  # noqa: E731
        bodies.append(
            _prompt(
                f"n{i:03d}-{''.join(rng.choice('abcdefgh') for _ in range(3))}",
                title=word(rng.randint(0, 12)).strip() or None,
                description=word(rng.randint(0, 40)) or None,
                tags=sorted(
                    {"".join(rng.choice("abcXY") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 2))}
                ),
            )
        )
    return bodies


def _reference(bodies: list[dict[str, Any]], q: str | None, tag: str | None) -> list[str]:
    found = []
    for body in bodies:
        tags = body["tags"]
        haystack = "\n".join(
            [
                body["name"],
                body.get("title") or "",
                body.get("description") or "",
                "," + ",".join(tags) + ("," if tags else ""),
            ]
        ).lower()
        if (q is None or q.lower() in haystack) and (tag is None or tag in tags):
            found.append(body["name"])
    return sorted(found)


@pytest.mark.parametrize("index", ["indexed", "no index"])
def test_search_agrees_with_a_plain_substring_search(
    registry: Registry, index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if index == "no index":
        _drop_search_index(registry)
    rng = random.Random(8)
    bodies = _corpus(rng, 120)
    for body in bodies:
        registry.catalog.create("prompt", body, WriteOptions(actor="t"))
    needles = {
        "a",
        "X",
        "%",
        "_",
        ",",
        "-",
        " ",
        "ab",
        "bX",
        "h ",
        "zz",
        "a,",
        "g%",
        "abc",
        "ch-",
        "X_%",
        "a b",
        "hgf",
        "Y-a",
    }
    for body in rng.sample(bodies, 15):
        text_ = body.get("description") or body["name"]
        start = rng.randrange(len(text_))
        needles.add(text_[start : start + rng.randint(1, 6)])
    needles.discard("")
    queries: list[tuple[str | None, str | None]] = [(q, None) for q in sorted(needles)]
    queries += [(None, "aX"), ("a", "b"), ("ab", "Y"), ("cde", "c")]
    for q, tag in queries:
        expected = _reference(bodies, q, tag)
        assert _names(registry.catalog, q=q, tag=tag) == expected, (q, tag)
    # Short needles take either path: the FTS5 vocabulary or a scan; both must agree.
    monkeypatch.setattr(search, "_SHORT_MAX_TRIGRAMS", 0)
    for q in ("a", "ab", "bX", "zz"):
        assert _names(registry.catalog, q=q) == _reference(bodies, q, None), q


def test_a_nul_character_matches_nothing_instead_of_failing(catalog: CatalogService) -> None:
    catalog.create("prompt", _prompt("p", description="plain"), WriteOptions(actor="t"))
    for q in ("\x00", "pl\x00", "pla\x00in"):
        assert _names(catalog, q=q) == []
    assert _names(catalog, tag="a\x00") == []


def test_non_ascii_text_matches_in_its_own_case(catalog: CatalogService) -> None:
    catalog.create("prompt", _prompt("uni", title="Café Ünïcode Ω"), WriteOptions(actor="t"))
    for q in ("Café", "café", "Ünï", "Ω", "é"):
        assert _names(catalog, q=q) == ["uni"], q


def test_the_index_serves_the_query(registry: Registry) -> None:
    catalog = registry.catalog
    catalog.create("prompt", _prompt("p", description="indexed words"), WriteOptions(actor="t"))
    with registry.db.session() as session:
        stmt = Entry.__table__.select().where(*search.filters(session, q="indexed", tag=None))
        compiled = stmt.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
        if registry.db.is_postgres:
            session.execute(text("SET LOCAL enable_seqscan = off"))  # a tiny table would be scanned anyway
            plan = "\n".join(session.execute(text(f"EXPLAIN {compiled}")).scalars())
            assert search.TRIGRAM_INDEX in plan, plan
        else:
            rows = session.execute(text(f"EXPLAIN QUERY PLAN {compiled}")).all()
            plan = "\n".join(str(row[-1]) for row in rows)
            assert "VIRTUAL TABLE INDEX" in plan and search.SQLITE_SEARCH_TABLE in plan, plan


def test_migration_carries_on_without_an_index(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """No FTS5 / trigram tokenizer on SQLite, no privilege for pg_trgm on PostgreSQL: the migration
    step reports it, leaves the transaction usable, and search still answers (by scanning)."""
    migration = _migration()
    _drop_search_index(registry)
    with registry.db.engine.begin() as conn:
        if registry.db.is_postgres:
            monkeypatch.setattr(migration, "EXTENSION", "registry_no_such_extension")
            assert migration.create_postgres_search(conn) is False
        else:
            bad = tuple(
                s.replace("tokenize='trigram'", "tokenize='no_such_tokenizer'") for s in migration.SQLITE_SEARCH_DDL
            )
            monkeypatch.setattr(migration, "SQLITE_SEARCH_DDL", bad)
            assert migration.create_sqlite_search(conn) is False
        assert conn.execute(text("SELECT count(*) FROM entries")).scalar_one() == 0  # still usable
    registry.catalog.create("prompt", _prompt("found", description="still searchable"), WriteOptions(actor="t"))
    assert _names(registry.catalog, q="searchable") == ["found"]
    assert _names(registry.catalog, q="se") == ["found"]


def test_the_migration_and_the_model_generate_the_same_text() -> None:
    assert _migration().SEARCH_TEXT_SQL == SEARCH_TEXT_SQL


def test_downgrade_removes_the_search_machinery(registry: Registry) -> None:
    command.downgrade(migrate.alembic_config(registry.db.url), "0004")
    with registry.db.engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("entries")}
        assert "search_text" not in columns
        if not registry.db.is_postgres:
            names = set(conn.execute(text("SELECT name FROM sqlite_master")).scalars())
            assert not {n for n in names if n.startswith("entries_search")}, names
    migrate.upgrade(registry.db)
    registry.catalog.create("prompt", _prompt("back", description="upgraded again"), WriteOptions(actor="t"))
    assert _names(registry.catalog, q="again") == ["back"]
