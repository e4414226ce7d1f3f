"""The head sampler of the serving process, read from the standard ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG``, with the SDK's semantics.

A tiny equivalent of the SDK's samplers rather than the SDK's own classes: those build a
``SamplingResult`` (attributes, trace state) per call, a few microseconds on every request of
the hot path, where the decision needs only the parent's flag and the trace id. The rules are the
specification's, as the SDK implements them: ``always_on``, ``always_off``, ``traceidratio`` (the
low 64 bits of the trace id below ``ratio * 2**64``) and their ``parentbased_*`` forms (a parent's
decision is followed, sampled or not; only a root is asked of the ratio). Default
``parentbased_always_on``. An unknown name falls back to that default with a warning, as the SDK
does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

log = logging.getLogger("registry.tracing")

#: The names ``OTEL_TRACES_SAMPLER`` may take (the SDK's built-in ones).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
DEFAULT = "parentbased_always_on"
_LOW_64 = (1 << 64) - 1


class Sampler:
    """``sample(parent_sampled, trace_id)``: whether a span is recorded and exported.
    ``parent_sampled`` is None for a root span (no valid parent)."""

    __slots__ = ("bound", "name", "parent_based", "ratio")

    def __init__(self, name: str = DEFAULT, ratio: float = 1.0) -> None:
        self.name = name
        self.parent_based = name.startswith("parentbased_")
        root = name.removeprefix("parentbased_")
        if root == "always_on":
            ratio = 1.0
        elif root == "always_off":
            ratio = 0.0
        self.ratio = ratio
        #: As the SDK's TraceIdRatioBased: sampled when the trace id's low 64 bits are below it.
        self.bound = round(ratio * (_LOW_64 + 1))

    def sample(self, parent_sampled: bool | None, trace_id: str) -> bool:
        if parent_sampled is not None and self.parent_based:
            return parent_sampled
        if self.bound > _LOW_64:
            return True
        if self.bound <= 0:
            return False
        return int(trace_id[16:], 16) < self.bound

    def __repr__(self) -> str:
        return f"Sampler({self.name!r}, {self.ratio})"


def from_environment(environ: Mapping[str, str] = os.environ) -> Sampler:
    """The sampler the standard variables name (see the module's docstring)."""
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or DEFAULT
    if name not in SAMPLERS:
        log.warning("OTEL_TRACES_SAMPLER=%r is not a known sampler; using %s", name, DEFAULT)
        name = DEFAULT
    ratio = 1.0
    if name.endswith("traceidratio"):
        raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        try:
            ratio = float(raw) if raw else 1.0
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            log.warning("OTEL_TRACES_SAMPLER_ARG=%r is not a ratio in [0, 1]; using 1.0", raw)
            ratio = 1.0
    return Sampler(name, ratio)
