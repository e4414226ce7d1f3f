"""A live registry whose tracing exports to memory: spans and the duration histogram, read back in the test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from registry.config import Settings
from registry.runtime import Registry
from registry.tracing.sdk import Tracing
from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.databases import SqliteTemplate
from tests.waiting import wait_until
from tests.webhooks.conftest import webhook_server

__all__ = ["Traced", "in_memory_tracing", "traced", "traced_arguments", "webhook_server"]


@dataclass
class Traced:
    server: LiveServer
    exporter: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def spans(self, name: str, count: int = 1) -> list[ReadableSpan]:
        """The finished spans named ``name``, once there are ``count`` (the admin API's end
        just after the response is sent)."""

        def named() -> list[ReadableSpan]:
            return [span for span in self.exporter.get_finished_spans() if span.name == name]

        wait_until(lambda: len(named()) >= count, lambda: f"{count} span(s) named {name!r}; have {self.names()}")
        return named()

    def span(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, [s.name for s in found]
        return found[0]

    def names(self) -> list[str]:
        return [span.name for span in self.exporter.get_finished_spans()]

    def admin(self) -> httpx.Client:
        return self.server.client()


def in_memory_tracing(*, trace_arguments: bool = False) -> tuple[Tracing, InMemorySpanExporter, InMemoryMetricReader]:
    """Tracing as a server gets it from the environment, with the exporter process's conversion
    run in this process (``Tracing.in_process``: each record through orjson, as the pipe has it)
    and exporting to memory (each span as it is recorded)."""
    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    tracing = Tracing.in_process(
        [SimpleSpanProcessor(exporter)],
        meter_provider=MeterProvider(metric_readers=[reader]),
        trace_arguments=trace_arguments,
    )
    return tracing, exporter, reader


def _start(tmp_path: Path, template: SqliteTemplate, **options: Any) -> Iterator[Traced]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=template.copy_to(tmp_path / "registry.db"),
        admin_token=ADMIN_TOKEN,
        secret_key="test-secret-key",
        webhook_allowed_networks="127.0.0.0/8",  # the loopback webhook server
    )
    registry = Registry(settings)
    registry.prepare()
    tracing, exporter, reader = in_memory_tracing(**options)
    server = LiveServer(registry, tracing=tracing)
    server.start()
    try:
        yield Traced(server, exporter, reader)
    finally:
        server.stop()
        registry.close()
        tracing.shutdown()


@pytest.fixture
def traced(tmp_path: Path, sqlite_template: SqliteTemplate) -> Iterator[Traced]:
    yield from _start(tmp_path, sqlite_template)


@pytest.fixture
def traced_arguments(tmp_path: Path, sqlite_template: SqliteTemplate) -> Iterator[Traced]:
    """As ``traced``, with ``REGISTRY_TRACE_ARGUMENTS`` on."""
    yield from _start(tmp_path, sqlite_template, trace_arguments=True)
