"""Alembic environment: the models' metadata, the URL from the registry's own config."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import engine_from_config, pool

from registry.db.engine import normalize_database_url
from registry.db.models import Base, UtcDateTime
from registry.db.search import unmodelled

config = context.config
target_metadata = Base.metadata


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Write the models' UtcDateTime as the plain column type it stores, so migrations need no
    registry import."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Leave out the search machinery migration 0005 creates outside the models (FTS5 tables on
    SQLite, the trigram index on PostgreSQL), so ``alembic check`` does not ask to drop it."""
    return name is None or not unmodelled(name, type_)


def run_migrations_offline() -> None:
    context.configure(
        url=normalize_database_url(config.get_main_option("sqlalchemy.url") or ""),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        render_item=render_item,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    section = config.get_section(config.config_ini_section) or {}
    section["sqlalchemy.url"] = normalize_database_url(section.get("sqlalchemy.url", ""))
    connectable = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            render_item=render_item,
            include_name=include_name,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
