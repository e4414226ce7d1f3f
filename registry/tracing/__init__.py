"""OpenTelemetry tracing, off unless the standard ``OTEL_*`` variables turn it on.

This module imports nothing of OpenTelemetry: a server without tracing never loads the SDK, and
its hot path pays nothing (``create_app`` and ``McpServer`` are built with or without a
:class:`~registry.tracing.sdk.Tracing`; without one the dispatcher's entry points are the plain
methods, and an outbound call checks one attribute for ``None``). :func:`from_environment`
imports :mod:`registry.tracing.sdk` only when :func:`enabled` says yes, and installs it as the
process's (:func:`active`), which outbound clients made without one of their own use.

**On** when ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and
``OTEL_SDK_DISABLED`` is not ``true``.

**How, when on.** The serving process records each MCP request's span (and each outbound call's)
as a plain record, samples it by ``OTEL_TRACES_SAMPLER``/``_ARG`` (``registry.tracing.sampling``),
and ships the records over a pipe to one exporter process of its own (``registry.tracing.pipe``,
``registry.tracing.exporter``), where the official SDK and OTLP exporter, configured by the standard
variables (resource, batching, endpoint, headers, timeouts), export them: the SDK's costs stay off
the event loop. Propagation is W3C ``tracecontext`` and ``baggage`` (``OTEL_PROPAGATORS``'s default;
:func:`check` refuses others).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from registry.tracing.sdk import Tracing

__all__ = ["active", "check", "enabled", "from_environment", "install"]

#: The one OTLP protocol shipped (the HTTP exporter): gRPC would need another package and port.
OTLP_PROTOCOL = "http/protobuf"
#: Exporters this server can build, per signal (``none``: that signal off).
EXPORTERS = {"OTEL_TRACES_EXPORTER": ("otlp", "console", "none"), "OTEL_METRICS_EXPORTER": ("otlp", "console", "none")}

#: What ``OTEL_PROPAGATORS`` may name: the hot path reads and writes W3C context itself.
PROPAGATORS = ("tracecontext", "baggage", "none")

_active: Tracing | None = None


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for traces (see the module's docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def exporter_names(environ: Mapping[str, str], variable: str, default: str) -> list[str]:
    """The exporters ``variable`` names (comma-separated, lower-cased), ``none`` left out."""
    raw = environ.get(variable, "").strip().lower() or default
    return [name for name in (part.strip() for part in raw.split(",")) if name and name != "none"]


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse (``ValueError``, naming the variable) what this server cannot honour while tracing
    is on: an exporter it does not ship, an OTLP protocol other than HTTP/protobuf, a propagator
    other than W3C's. Imports
    nothing; ``serve`` and ``stdio`` call it before anything starts."""
    if not enabled(environ):
        return
    for variable, known in EXPORTERS.items():
        for name in exporter_names(environ, variable, "none"):
            if name not in known:
                raise ValueError(f"{variable}={name!r}: supported are {', '.join(known)}")
    for name in (part.strip().lower() for part in environ.get("OTEL_PROPAGATORS", "").split(",")):
        if name and name not in PROPAGATORS:
            raise ValueError(f"OTEL_PROPAGATORS={name!r}: supported are {', '.join(PROPAGATORS)}")
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        protocol = (environ.get(variable) or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or OTLP_PROTOCOL).strip()
        if protocol != OTLP_PROTOCOL:
            raise ValueError(f"{variable}/OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: only {OTLP_PROTOCOL} is supported")


def from_environment(*, trace_arguments: bool = False, environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """The process's tracing, built from the ``OTEL_*`` variables and installed (:func:`active`);
    None, with nothing imported, when they leave it off. Raises ``ValueError`` for a setting
    this server cannot honour (an exporter or protocol it does not ship)."""
    if not enabled(environ):
        return None
    check(environ)
    from registry.tracing.sdk import Tracing

    tracing = Tracing.from_environment(trace_arguments=trace_arguments, environ=environ)
    install(tracing)
    return tracing


def install(tracing: Tracing | None) -> None:
    """Make ``tracing`` the process's (None: none): what outbound clients made afterwards use."""
    global _active
    _active = tracing


def active() -> Tracing | None:
    """The process's tracing, or None (tracing off)."""
    return _active
