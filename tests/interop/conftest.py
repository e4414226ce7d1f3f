"""Fixtures shared by the interoperability tests: a live server holding the demo bundle."""

from __future__ import annotations

import pytest

from registry.runtime import Registry
from tests.conftest import LiveServer


@pytest.fixture
def demo(registry: Registry) -> Registry:
    registry.seed("demo")
    return registry


@pytest.fixture
def server(demo: Registry, live_server: LiveServer) -> LiveServer:
    return live_server
