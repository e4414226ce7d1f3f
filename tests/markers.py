"""Markers put on tests by what they use, and how xdist keeps a module's shared fixtures together.

``pytest -m "not browser and not interop and not slow"`` is the quick run a developer makes while
working; the plain ``pytest`` of the README runs everything. The markers are applied here, at
collection, rather than written on each test, so a new test is marked by what it uses:

- ``browser``: drives Chromium (the web UI's Playwright tests; the offline API reference pages).
- ``interop``: runs a third-party MCP client or suite (``tests/interop``).
- ``postgres``: needs PostgreSQL (the ``postgresql`` half of a parametrized database, the server's
  own fixtures, or a private cluster of ``tests/faults/pg_cluster.py``).
- ``slow``: the heaviest modules (measured with ``--durations``): processes, clusters, load.

Under ``--dist loadgroup`` a test without an ``xdist_group`` goes to whichever worker is free. A
module whose tests share a module- or class-scoped fixture (one server process, a replica pair) is
kept on one worker (``xdist_group`` named after the module), so the fixture is built once and
never twice at the same time.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

#: Modules, or single tests, whose whole run is slow (seconds to minutes each).
SLOW: tuple[str, ...] = (
    "tests/faults/",
    "tests/replicas/",
    "tests/events/test_replica_delivery.py",
    "tests/test_scale.py",
    "tests/test_packaging.py",
)

#: Tests that drive Chromium without the Playwright ``browser`` fixture.
BROWSER: tuple[str, ...] = ("tests/security/test_small_items.py::test_reference_pages_render_with_no_network",)

#: Fixtures whose tests need PostgreSQL whatever their parameters.
POSTGRES_FIXTURES = frozenset({"postgres_url", "postgres_server_url"})

#: Tests that run a private PostgreSQL cluster (``tests/faults/pg_cluster.py``).
POSTGRES_CLUSTER: tuple[str, ...] = (
    "tests/faults/test_database_outage.py",
    "tests/faults/test_disk_full.py::test_postgres_",
)

_SHARED_SCOPES = frozenset({"module", "class"})


def _uses_shared_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture built once for its module or class (not the session's)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope in _SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs)


def _backend(item: pytest.Item) -> str | None:
    """``sqlite`` or ``postgresql`` when a parameter of the test picks the database."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    values = {v for v in callspec.params.values() if isinstance(v, str)}
    for backend in ("postgresql", "sqlite"):
        if backend in values:
            return backend
    return None


def classify(item: pytest.Item) -> None:
    """Add this test's markers and, where it shares a module's fixtures, its xdist group."""
    nodeid = item.nodeid
    path = PurePosixPath(nodeid.split("::", 1)[0])
    fixtures = set(getattr(item, "fixturenames", ()))
    if "browser" in fixtures or path.name.endswith("_browser.py") or nodeid.startswith(BROWSER):
        item.add_marker(pytest.mark.browser)
    if nodeid.startswith("tests/interop/"):
        item.add_marker(pytest.mark.interop)
    backend = _backend(item)
    if backend == "postgresql" or (
        backend is None and (fixtures & POSTGRES_FIXTURES or nodeid.startswith(POSTGRES_CLUSTER))
    ):
        item.add_marker(pytest.mark.postgres)
    if nodeid.startswith(SLOW):
        item.add_marker(pytest.mark.slow)
    if _uses_shared_fixture(item) and not any(item.iter_markers("xdist_group")):
        item.add_marker(pytest.mark.xdist_group(str(path)))
