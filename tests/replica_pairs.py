"""One fixture for the modules that run two replicas on one PostgreSQL schema.

Starting the two processes is the slow part, so a module shares one pair (``scope="module"``),
and each test uses sessions of its own. A module states only what is particular to it:

    replicas = replicas_fixture("listen-replicas", admin_token=ADMIN)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import replica_pair, require_postgres
from tests.serve_process import ServerProcess

Pair = tuple[Any, Any]


def replicas_fixture(
    folder: str,
    *,
    admin_token: str | None = None,
    b_env: dict[str, str] | None = None,
    make: Callable[..., ServerProcess] = ServerProcess,
    setup: Callable[[Any, Any], None] | None = None,
) -> Any:
    """A module-scoped ``replicas`` fixture: ``replica_pair`` (see tests/conftest.py) in a temporary
    ``folder``, skipped without PostgreSQL; ``setup(a, b)`` runs once the pair is up."""

    @pytest.fixture(scope="module")
    def replicas(tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None) -> Iterator[Pair]:
        server_url = require_postgres(postgres_server_url)
        folder_path = tmp_path_factory.mktemp(folder)
        with replica_pair(server_url, folder_path, admin_token=admin_token, b_env=b_env, make=make) as (a, b):
            if setup is not None:
                setup(a, b)
            yield a, b

    return replicas
