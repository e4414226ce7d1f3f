"""The exporter process: span records from the serving process's pipe (stdin) to the official
SDK and OTLP exporter, configured by the standard ``OTEL_*`` variables.

    python -m registry.tracing.exporter   # started by registry.tracing.pipe.PipeOutlet, not by hand

Reads frames (4-byte big-endian length, then a JSON array of records; ``registry.tracing.records``)
until end of file, converts each record to an SDK ``ReadableSpan`` (``registry.tracing.convert``) and
hands it to a ``BatchSpanProcessor`` per ``OTEL_TRACES_EXPORTER`` (the OTLP/HTTP exporter by
default; ``OTEL_BSP_*`` apply), and records ``mcp.server.operation.duration`` where
``OTEL_METRICS_EXPORTER`` asks for it. At end of file (the server stopped, or died) it exports
what is pending and exits. ``REGISTRY_TRACE_EXPORTER_NICE`` lowers its CPU priority (0 by
default). SIGINT and SIGTERM are ignored: a Ctrl-C or a stop sent to the whole
process group must not lose what the server is still shipping; the pipe's end is the signal.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import orjson


def _read(stream: object, size: int) -> bytes:
    read = stream.read  # type: ignore[attr-defined]
    data: bytes = read(size)
    return data


#: How much lower than the server's this process's CPU priority is (``REGISTRY_TRACE_EXPORTER_NICE``,
#: 0-19). 0 by default: on a busy machine a lower priority gives serving the CPU, but then the
#: exporter falls behind and drops spans (measured on 2 shared cores at nice 10: ~half of them,
#: and prompts/get still lost ~30 %; README, Tracing).
DEFAULT_NICE = 0


def _nice(environ: os._Environ[str]) -> int:
    raw = environ.get("REGISTRY_TRACE_EXPORTER_NICE", "").strip()
    try:
        value = int(raw) if raw else DEFAULT_NICE
    except ValueError:
        value = DEFAULT_NICE
    return max(0, min(19, value))


def main() -> int:
    nice = _nice(os.environ)
    if nice:
        os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from opentelemetry.sdk.metrics import MeterProvider

    from registry.tracing.convert import Converter
    from registry.tracing.sdk import metric_readers, resource, span_processors

    environ = os.environ
    shared = resource()
    readers = metric_readers(environ)
    meter_provider = MeterProvider(resource=shared, metric_readers=readers) if readers else None
    converter = Converter(span_processors(environ), resource=shared, meter_provider=meter_provider)
    stdin = sys.stdin.buffer
    try:
        while True:
            header = _read(stdin, 4)
            if len(header) < 4:
                break
            size = int.from_bytes(header, "big")
            data = _read(stdin, size)
            if len(data) < size:
                break
            converter.export(orjson.loads(data))
    finally:
        converter.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
