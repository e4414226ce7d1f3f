"""A caller's own short deadline running out is that caller's failure, not an outage.

The pool pings a reused PostgreSQL connection before handing it out; a ping that times out
marks the database unavailable for a moment (AVAILABILITY_HOLD_S), so the callers right after
are answered 503 at once instead of each waiting out a ping of their own. Once, in CI, a 0.8 s
readiness probe at start-up ran out of time on a loaded box inside that ping, and the admin API
then answered 503 to a healthy database's first request.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from registry.db.engine import Database, DatabaseUnavailable, deadline
from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, require_postgres


@pytest.fixture
def postgres(postgres_server_url: str | None) -> Iterator[Database]:
    server_url = require_postgres(postgres_server_url)
    url, schema = _fresh_postgres_schema(server_url)
    db = Database(url, ping_timeout_s=2.0)
    try:
        yield db
    finally:
        db.dispose()
        _drop_postgres_schema(server_url, schema)


def select_one(db: Database) -> int:
    with db.session() as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_a_ping_cut_short_by_the_callers_deadline_holds_no_503s_for_others(postgres: Database) -> None:
    assert select_one(postgres) == 1  # leaves a pooled connection, which the next checkout pings
    with pytest.raises(DatabaseUnavailable, match="left of this call's deadline"), deadline(0.0):
        select_one(postgres)
    # The database is fine: the next caller is served, not told "not answering; retrying shortly".
    assert select_one(postgres) == 1


def test_a_ping_that_times_out_on_its_own_bound_is_remembered(postgres: Database) -> None:
    """The other side: with the full ping bound spent, the next callers get 503 at once."""
    db = Database(postgres.url, ping_timeout_s=0.0)  # every ping of a reused connection times out
    try:
        assert select_one(db) == 1
        with pytest.raises(DatabaseUnavailable, match=r"did not answer a ping within 0\.0s"):
            select_one(db)
        with pytest.raises(DatabaseUnavailable, match="not answering"):
            select_one(db)
    finally:
        db.dispose()
