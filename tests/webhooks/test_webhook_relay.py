"""NotificationRelay: at most N notifications a second, progress coalesced, logs dropped with a note."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from registry.webhooks import NotificationRelay

from .test_webhook_client import Recorder


class Sink(Recorder):
    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [event for event in self.events if event[0] == kind]


async def test_a_burst_of_progress_is_coalesced_and_the_final_value_always_sent() -> None:
    sink = Sink()
    relay = NotificationRelay(sink.progress, sink.log, per_second=10)
    for n in range(1, 1001):
        await relay.progress(n, 1000, None)
    assert len(sink.events) == 10  # one second's worth went out at once
    await relay.finish()
    values = [event[1] for event in sink.of("progress")]
    assert len(values) == 11 and values[-1] == 1000
    assert values == sorted(values)


async def test_held_progress_goes_out_when_a_slot_frees_even_if_the_stream_falls_silent() -> None:
    sink = Sink()
    relay = NotificationRelay(sink.progress, sink.log, per_second=20)
    for n in range(1, 51):
        await relay.progress(n, None, "working")
    assert len(sink.events) == 20
    await asyncio.sleep(1.3)  # the webhook says nothing more for a while
    assert sink.events[-1] == ("progress", 50, None, "working")
    count = len(sink.events)
    await relay.finish()
    assert len(sink.events) == count, "nothing was held any more"


async def test_surplus_log_messages_are_dropped_with_a_note_naming_the_limit() -> None:
    sink = Sink()
    relay = NotificationRelay(sink.progress, sink.log, per_second=5)
    for n in range(30):
        await relay.log("info", f"line {n}")
    assert [event[2] for event in sink.of("log")] == [f"line {n}" for n in range(5)]
    await relay.finish()
    note = sink.events[-1]
    assert note[:2] == ("log", "warning")
    assert "25 log messages were dropped" in note[2] and "REGISTRY_LIMIT_PROGRESS_PER_SECOND" in note[2]


async def test_rates_below_one_per_second_are_honoured() -> None:
    sink = Sink()
    relay = NotificationRelay(sink.progress, sink.log, per_second=0.5)
    await relay.progress(1, None, None)
    await relay.progress(2, None, None)
    assert [event[1] for event in sink.events] == [1]
    await relay.finish()
    assert [event[1] for event in sink.events] == [1, 2]


async def test_without_callbacks_nothing_happens() -> None:
    relay = NotificationRelay(None, None, per_second=1)
    for n in range(100):
        await relay.progress(n, None, None)
        await relay.log("info", n)
    await relay.finish()


async def test_a_failing_callback_in_the_timer_is_retrieved_on_close(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def broken(progress: float, total: float | None, message: str | None) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ConnectionError("client went away")

    relay = NotificationRelay(broken, None, per_second=1)
    await relay.progress(1, None, None)
    await relay.progress(2, None, None)  # held: the timer sends it in about a second, and fails
    await asyncio.sleep(1.2)
    await relay.aclose()
    gc.collect()
    await asyncio.sleep(0)
    assert calls == 2
    assert "never retrieved" not in caplog.text


def test_the_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        NotificationRelay(None, None, per_second=0)
