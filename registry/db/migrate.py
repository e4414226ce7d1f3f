"""Running Alembic from inside the package, wherever it is installed."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from registry.db.engine import Database
from registry.paths import migrations_dir


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation would choke on '%' in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    command.upgrade(alembic_config(db.url), revision)


def check(db: Database) -> None:
    """Raise if the models and the migrations disagree (``alembic check``)."""
    command.check(alembic_config(db.url))


def is_current(db: Database) -> bool:
    head = ScriptDirectory.from_config(alembic_config(db.url)).get_current_head()
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision() == head
