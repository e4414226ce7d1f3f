"""Database access: the engine and session factory (created only here), ORM models, the change log."""

from registry.db.engine import Database, normalize_database_url

__all__ = ["Database", "normalize_database_url"]
