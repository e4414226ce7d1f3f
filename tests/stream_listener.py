"""A GET-stream (server-to-client SSE) listener for tests: holds the stream open in a thread."""

from __future__ import annotations

import queue
import threading
import time

import httpx

from tests.http import TLS
from tests.interop.mcp_wire import SseEvent, iter_sse


class StreamListener:
    """Holds a GET stream open in a thread and queues its events."""

    def __init__(self, base_url: str, session_id: str, last_event_id: str | None = None) -> None:
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.events: queue.Queue[SseEvent] = queue.Queue()
        self.status: int | None = None
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=60), verify=TLS)
        self._stop = threading.Event()
        #: Set when the server ended the stream (or it failed).
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(headers,), daemon=True)
        self._thread.start()

    def _run(self, headers: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", "/mcp", headers=headers) as response:
                self.status = response.status_code
                for event in iter_sse(response.iter_lines()):
                    self.events.put(event)
                    if self._stop.is_set():
                        return
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self.ended.set()

    def next(self, timeout: float = 10.0) -> SseEvent:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no SSE event within {timeout}s") from None

    def drain(self, wait: float) -> list[SseEvent]:
        time.sleep(wait)
        found = []
        while not self.events.empty():
            found.append(self.events.get_nowait())
        return found

    def close(self) -> None:
        self._stop.set()
        self._client.close()
        # A daemon thread blocked in a read: it ends when the server closes the stream (at the latest
        # when the test server stops), so there is no point waiting for it here.
        self._thread.join(timeout=0.2)
