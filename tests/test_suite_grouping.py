"""The suite's own machinery: xdist keeps a module's shared fixtures on one worker.

``tests/markers.py`` gives every test that uses a module- or class-scoped fixture an ``xdist_group``
named after its module, and ``--dist loadgroup`` sends a group to one worker by a suffix xdist
adds to the test's node id. pytest 9.2 made node ids read-only to that (``Node.nodeid`` reads
``_id``, xdist 3.8 writes ``_nodeid``), so every group was silently split: a module's server
process was started on each worker that ran one of its tests, and a parametrized module fixture
once per test (test_workers.py paid ~10 s for each). pytest is pinned to 8.4 until xdist follows;
this test fails if an upgrade splits the groups again.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def shared() -> str:
    return "built once for the module"


def test_a_test_sharing_a_module_fixture_is_grouped_by_its_module(
    request: pytest.FixtureRequest, shared: str
) -> None:
    assert request.node.get_closest_marker("xdist_group").args == ("tests/test_suite_grouping.py",)
    if not (os.environ.get("PYTEST_XDIST_WORKER") and request.config.getvalue("loadgroup")):
        pytest.skip("the grouping is xdist's: this run is not under --dist loadgroup (the README command is)")
    assert request.node.nodeid.endswith("@tests/test_suite_grouping.py"), (
        f"xdist did not see the group ({request.node.nodeid}): a module's tests are spread over workers"
    )
