"""catalog search: an indexed search text per entry

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-16 12:00:00.000000

``entries.search_text`` is a generated column (lower-cased name, title, description and tags),
so every writer, bulk inserts included, keeps it right without knowing about it. What indexes it
depends on the database (see ``registry.db.search``):

- PostgreSQL: a GIN trigram index (``pg_trgm``) that serves ``LIKE '%needle%'``. Creating the
  extension needs a privilege the registry's user may lack (pg_trgm is a trusted extension since
  PostgreSQL 13: the database owner may create it); without it the migration carries on without
  the index, and search still works, by scanning. To add it later, as a superuser:
  ``CREATE EXTENSION pg_trgm; CREATE INDEX ix_entries_search_trgm ON entries USING gin
  (search_text gin_trgm_ops);``
- SQLite: an FTS5 table with the trigram tokenizer (SQLite 3.34 or newer), kept in step by
  triggers, plus an ``fts5vocab`` table over it (for one- and two-character searches). Without
  FTS5 the migration carries on and search scans.

A later migration that rebuilds ``entries`` on SQLite (Alembic batch mode) drops the triggers
with the table: recreate them with ``create_sqlite_search`` below.
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("registry.migrations")

#: The same expression as ``registry.db.models.SEARCH_TEXT_SQL`` (tests/test_search.py holds them equal).
SEARCH_TEXT_SQL = (
    "lower(name || '\n' || coalesce(title, '') || '\n' || coalesce(description, '') || '\n' || tags || '\n')"
)

TRIGRAM_INDEX = "ix_entries_search_trgm"
EXTENSION = "pg_trgm"

SQLITE_SEARCH_DDL = (
    "CREATE VIRTUAL TABLE entries_search USING fts5("
    "search_text, content='entries', content_rowid='id', tokenize='trigram')",
    "CREATE VIRTUAL TABLE entries_search_vocab USING fts5vocab(entries_search, 'row')",
    "CREATE TRIGGER entries_search_insert AFTER INSERT ON entries BEGIN "
    "INSERT INTO entries_search(rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER entries_search_delete AFTER DELETE ON entries BEGIN "
    "INSERT INTO entries_search(entries_search, rowid, search_text) VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER entries_search_update AFTER UPDATE OF name, title, description, tags ON entries BEGIN "
    "INSERT INTO entries_search(entries_search, rowid, search_text) VALUES ('delete', old.id, old.search_text); "
    "INSERT INTO entries_search(rowid, search_text) VALUES (new.id, new.search_text); END",
    "INSERT INTO entries_search(entries_search) VALUES ('rebuild')",
)


def create_sqlite_search(bind: sa.Connection) -> bool:
    """The FTS5 trigram table, its vocabulary and the triggers; False when this SQLite has no FTS5
    or no trigram tokenizer (search then scans)."""
    try:
        with bind.begin_nested():
            for statement in SQLITE_SEARCH_DDL:
                bind.exec_driver_sql(statement)
    except sa.exc.OperationalError as exc:
        log.warning("no full-text index for catalog search on this SQLite (%s); search will scan", exc.orig)
        return False
    return True


def _trigram_schema(bind: sa.Connection) -> str | None:
    return bind.exec_driver_sql(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = %(name)s",
        {"name": EXTENSION},
    ).scalar()


def create_postgres_search(bind: sa.Connection) -> bool:
    """pg_trgm (if it is missing and may be created) and the GIN trigram index; False without them.

    The extension goes into ``public`` when that schema exists and is writable, so a registry
    living in a schema of its own (or a test's throwaway schema) does not take the extension,
    which is database-wide, with it when that schema is dropped.
    """
    schema = _trigram_schema(bind)
    if schema is None:
        public_writable = bind.exec_driver_sql(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public') "
            "AND has_schema_privilege('public', 'CREATE')"
        ).scalar()
        try:
            with bind.begin_nested():
                bind.exec_driver_sql(
                    f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}" + (" SCHEMA public" if public_writable else "")
                )
        except sa.exc.DBAPIError as exc:
            log.warning("cannot create extension %s (%s); catalog search will scan", EXTENSION, exc.orig)
            return False
        schema = _trigram_schema(bind)
    if schema is None:  # pragma: no cover - created just above
        return False
    quoted = '"' + schema.replace('"', '""') + '"'
    try:
        with bind.begin_nested():
            bind.exec_driver_sql(
                f"CREATE INDEX {TRIGRAM_INDEX} ON entries USING gin (search_text {quoted}.gin_trgm_ops)"
            )
    except sa.exc.DBAPIError as exc:
        log.warning("cannot create the trigram index (%s); catalog search will scan", exc.orig)
        return False
    return True


def upgrade() -> None:
    bind = op.get_bind()
    # VIRTUAL on SQLite (ALTER TABLE cannot add a STORED one; FTS5 holds the indexed copy), STORED
    # on PostgreSQL (an index needs it; 18 would make it VIRTUAL by default).
    stored = bind.dialect.name != "sqlite"
    op.add_column(
        "entries", sa.Column("search_text", sa.Text(), sa.Computed(SEARCH_TEXT_SQL, persisted=stored), nullable=True)
    )
    # Listing a kind in name order and counting it read this index alone.
    op.create_index("ix_entries_kind_archived_name", "entries", ["kind", "archived", "name"], unique=False)
    if bind.dialect.name == "postgresql":
        create_postgres_search(bind)
    elif bind.dialect.name == "sqlite":
        create_sqlite_search(bind)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")  # the extension stays: others may use it
    elif bind.dialect.name == "sqlite":
        for trigger in ("entries_search_insert", "entries_search_delete", "entries_search_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS entries_search_vocab")
        op.execute("DROP TABLE IF EXISTS entries_search")
    op.drop_index("ix_entries_kind_archived_name", table_name="entries")
    op.drop_column("entries", "search_text")
