"""A loopback receiver of change events for the tests: records each request, answers with the
statuses it is told (200 once they run out), and can hold its first answer until released."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.thread_server import port_of, serving_in_thread


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def json(self) -> dict[str, Any]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value

    @property
    def type(self) -> str:
        return str(self.json["type"])


def verify(secret: str, received: Received) -> bool:
    """Standard Webhooks verification written from the spec, not with the registry's code: the key
    is the base64 after ``whsec_``; the signed content ``{id}.{timestamp}.{body}``; the header a
    space-separated list of ``v1,<base64 HMAC-SHA256>``."""
    key = base64.b64decode(secret.split("_", 1)[1])
    content = b".".join(
        [received.headers["webhook-id"].encode(), received.headers["webhook-timestamp"].encode(), received.body]
    )
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest())
    offered = [item.split(",", 1) for item in received.headers["webhook-signature"].split(" ")]
    return any(version == "v1" and hmac.compare_digest(value.encode(), expected) for version, value in offered)


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.statuses: list[int] = []
        #: Set: the first request waits for ``release`` before it is answered.
        self.hold_first = False
        self.released = threading.Event()
        self.first_arrived = threading.Event()
        self._lock = threading.Lock()
        self.url = ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        with self._lock:
            first = not self.received
            self.received.append(Received(headers, b"".join(chunks)))
            status = self.statuses.pop(0) if self.statuses else 200
        if first and self.hold_first:
            self.first_arrived.set()
            await asyncio.to_thread(self.released.wait, 120)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def of_type(self, event_type: str) -> list[Received]:
        with self._lock:
            return [item for item in self.received if item.type == event_type]

    def all(self) -> list[Received]:
        with self._lock:
            return list(self.received)


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    with serving_in_thread(receiver, name="event-receiver") as server:
        receiver.url = f"http://127.0.0.1:{port_of(server)}/hook"
        try:
            yield receiver
        finally:
            receiver.released.set()
