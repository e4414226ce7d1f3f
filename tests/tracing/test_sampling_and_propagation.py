"""The hot path's own sampler and W3C parser: the standard variables' meaning, the SDK's
decisions, the propagator's accepted forms."""

from __future__ import annotations

import random

import pytest
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from registry.tracing import propagation, sampling


@pytest.mark.parametrize(
    ("environ", "name", "ratio"),
    [
        ({}, "parentbased_always_on", 1.0),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, "always_off", 0.0),
        ({"OTEL_TRACES_SAMPLER": "ALWAYS_ON"}, "always_on", 1.0),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, "traceidratio", 0.25),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}, "parentbased_traceidratio", 1.0),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "traceidratio", 1.0),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "x"}, "traceidratio", 1.0),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "parentbased_always_on", 1.0),
    ],
)
def test_the_sampler_variables_are_read_as_the_sdk_reads_them(environ: dict[str, str], name: str, ratio: float) -> None:
    sampler = sampling.from_environment(environ)
    assert (sampler.name, sampler.ratio) == (name, ratio)


def _sdk(name: str, ratio: float) -> Sampler:
    root: Sampler = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(
        name.removeprefix("parentbased_"), TraceIdRatioBased(ratio)
    )
    return ParentBased(root) if name.startswith("parentbased_") else root


@pytest.mark.parametrize("name", sampling.SAMPLERS)
def test_decisions_are_the_sdk_samplers_decisions(name: str) -> None:
    ours = sampling.Sampler(name, 0.3)
    sdk = _sdk(name, 0.3)
    rng = random.Random(7)
    for _ in range(500):
        trace_id = rng.getrandbits(128) or 1
        for parent in (None, True, False):
            context = None
            if parent is not None:
                flags = TraceFlags(TraceFlags.SAMPLED if parent else TraceFlags.DEFAULT)
                span = NonRecordingSpan(SpanContext(trace_id, rng.getrandbits(64) or 1, True, flags))
                context = set_span_in_context(span)
            expected = sdk.should_sample(context, trace_id, "span").decision is Decision.RECORD_AND_SAMPLE
            assert ours.sample(parent, f"{trace_id:032x}") is expected, (name, parent, trace_id)


def test_a_ratio_samples_about_its_share_of_new_traces() -> None:
    sampler = sampling.Sampler("traceidratio", 0.1)
    rng = random.Random(1)
    sampled = sum(sampler.sample(None, f"{rng.getrandbits(128):032x}") for _ in range(20_000))
    assert 1_700 < sampled < 2_300


TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        (f"00-{TRACE}-{SPAN}-01", True),
        (f"00-{TRACE}-{SPAN}-00", True),
        (f" 00-{TRACE}-{SPAN}-01 ", True),
        (f"01-{TRACE}-{SPAN}-01-later", True),  # a later version may add fields
        (f"00-{TRACE}-{SPAN}-01-later", False),  # version 00 may not
        (f"ff-{TRACE}-{SPAN}-01", False),
        (f"00-{TRACE.upper()}-{SPAN}-01", False),
        (f"00-{'0' * 32}-{SPAN}-01", False),
        (f"00-{TRACE}-{'0' * 16}-01", False),
        (f"00-{TRACE}-{SPAN}", False),
        ("garbage", False),
    ],
)
def test_traceparent_is_parsed_as_the_w3c_propagator_parses_it(header: str, valid: bool) -> None:
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ref = propagation.parse(header)
    sdk = get_current_span(TraceContextTextMapPropagator().extract({"traceparent": header})).get_span_context()
    assert (ref is not None) is valid is sdk.is_valid
    if ref is not None:
        assert (ref.trace_id, ref.span_id, ref.sampled) == (TRACE, SPAN, header.strip().endswith(("01", "later")))


def test_the_context_sent_on_carries_tracestate_and_baggage() -> None:
    ref = propagation.parse(f"00-{TRACE}-{SPAN}-01", "vendor=a", "tenant=blue")
    assert ref is not None
    assert propagation.headers(ref) == [
        ("traceparent", f"00-{TRACE}-{SPAN}-01"),
        ("tracestate", "vendor=a"),
        ("baggage", "tenant=blue"),
    ]
    unsampled = propagation.parse(f"00-{TRACE}-{SPAN}-00", "x" * 1000)
    assert unsampled is not None and unsampled.tracestate is None  # over the bound: dropped
    assert propagation.headers(unsampled) == [("traceparent", f"00-{TRACE}-{SPAN}-00")]
