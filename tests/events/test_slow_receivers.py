"""A receiver that answers 2xx and then trickles its body has the event: the status decides, and
the body is drained within its own short bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from registry.events import queue
from registry.events.deliverer import DRAIN_S, EventDeliverer
from registry.runtime import Registry
from registry.webhooks.ssrf import parse_networks
from tests.thread_server import port_of, serving_in_thread


class _Trickler:
    """Answers 200 at once, then one byte every 0.2 s for far longer than the delivery bound."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        with contextlib.suppress(Exception):
            for _ in range(50):
                await send({"type": "http.response.body", "body": b"x", "more_body": True})
                await asyncio.sleep(0.2)
            await send({"type": "http.response.body", "body": b""})


@contextlib.contextmanager
def _trickling() -> Iterator[str]:
    with serving_in_thread(_Trickler(), name="trickler") as server:
        yield f"http://127.0.0.1:{port_of(server)}/hook"


async def test_a_2xx_whose_body_trickles_is_delivered(registry: Registry) -> None:
    limits = replace(registry.settings.limits, event_delivery_seconds=1.0)
    deliverer = EventDeliverer(registry.db, registry.secrets, limits, allowed_networks=parse_networks("127.0.0.0/8"))
    await deliverer.start()
    try:
        with _trickling() as url:
            item = queue.Due(1, 1, "msg_1_1", url, ("whsec_" + "A" * 32,), "{}", 0)
            started = asyncio.get_running_loop().time()
            outcome = await deliverer.send(item)
            took = asyncio.get_running_loop().time() - started
    finally:
        await deliverer.stop()
    assert outcome.ok and outcome.status_code == 200 and outcome.error is None, outcome
    assert took < DRAIN_S + 2.0
