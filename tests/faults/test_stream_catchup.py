"""Item 10 of issue 7: a replica catching up on many changes drops no stream that reads, and a
stream that is dropped loses nothing.

Two real replicas on one fresh PostgreSQL schema. Replica B holds ten GET streams whose clients
read as fast as they can (half of them subscribed to a resource) and one whose client stops
reading on purpose. B is frozen with SIGSTOP while 300 edits go through A, then resumed: B reads
the 300 changes at once. Before the fix every stream's bounded queue overflowed, every stream
was dropped, and each lost one notification for good (the oldest queued one was thrown away to
make room for the close while later ones were still sent, so Last-Event-ID pointed past it).

Now notifications are coalesced per stream (a list_changed of a kind, or a resources/updated of
a URI, replaces the one still pending: the client re-reads anyway), so a reading client is never
dropped; a client that does not take the server's writes for REGISTRY_LIMIT_STREAM_STALL_SECONDS
is dropped alone, with nothing sent after the drop, and on reconnecting with Last-Event-ID it is
replayed every change it missed.
"""

from __future__ import annotations

import asyncio
import queue
import time
from pathlib import Path
from typing import Any

import httpx

from tests.http import TLS
from tests.interop.mcp_wire import SseEvent, StreamableHttpClient, iter_sse
from tests.replica_pairs import replicas_fixture
from tests.serve_process import ServerProcess
from tests.stream_listener import StreamListener

PROTOCOL = "2025-11-25"
FAST_STREAMS = 10
EDITS = 300
STALL_SECONDS = 2.0
PROBE_PROMPT = "catchup-probe"
DOC = "catchup-doc"
DOC_URI = "catchup://doc"
BULK = "catchup-bulk"
#: The stalled client subscribes to many long URIs of a template resource, so that each edit of it
#: sends that client ~200 KB: enough edits fill the loopback buffers (a few MB) and its writes stall.
BULK_SUBSCRIPTIONS = 100
BULK_URI_CHARS = 2000

LIST_CHANGED = {
    "notifications/prompts/list_changed": "prompt",
    "notifications/resources/list_changed": "resource",
    "notifications/tools/list_changed": "tool",
}


replicas = replicas_fixture("catchup", b_env={"REGISTRY_LIMIT_STREAM_STALL_SECONDS": str(STALL_SECONDS)})


# ---------------------------------------------------------------------------- helpers
def _change_id(event_id: str | None) -> int:
    assert event_id, "a notification without an SSE id"
    return int(event_id.split(":")[0])


def _open_session(server: ServerProcess) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize(PROTOCOL)
    assert client.session_id
    return client


def _streams_open(server: ServerProcess) -> int:
    return int(server.metric("mcp_streams_open"))


def _changes(server: ServerProcess, after: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with server.admin() as admin:
        while True:
            page = admin.get("/api/v1/changes", params={"after": after, "limit": 1000}).json()
            if not page["items"]:
                return found
            found.extend(page["items"])
            after = page["next_after"]


def _notifications(events: list[SseEvent]) -> list[tuple[int, dict[str, Any]]]:
    return [(_change_id(e.id), e.json()) for e in events if e.data]


def _last_list_changed(seen: list[tuple[int, dict[str, Any]]], kind: str) -> int:
    ids = [cid for cid, message in seen if LIST_CHANGED.get(message.get("method", "")) == kind]
    return max(ids, default=0)


def _last_updated(seen: list[tuple[int, dict[str, Any]]], uri: str) -> int:
    ids = [
        cid
        for cid, message in seen
        if message.get("method") == "notifications/resources/updated" and message["params"]["uri"] == uri
    ]
    return max(ids, default=0)


def _assert_nothing_masked(
    seen: list[tuple[int, dict[str, Any]]], changes: list[dict[str, Any]], subscriptions: list[str], who: str
) -> None:
    """Every change is covered by a notification with an id >= its own: the last list_changed of
    each kind carries the last change of that kind, and each subscribed URI got resources/updated
    for the last change of its resource."""
    ids = [cid for cid, _ in seen]
    assert ids == sorted(ids), f"{who}: notification ids out of order"
    for kind in ("prompt", "resource", "tool"):
        of_kind = [c["id"] for c in changes if c["kind"] == kind and "production" in c["labels"]]
        if of_kind:
            assert _last_list_changed(seen, kind) == max(of_kind), (
                f"{who}: last {kind} list_changed is for change {_last_list_changed(seen, kind)}, "
                f"the last {kind} change is {max(of_kind)}"
            )
    for uri in subscriptions:
        template = BULK if uri.startswith("bulk://") else DOC
        of_uri = [c["id"] for c in changes if c["kind"] == "resource" and c["name"] == template]
        if of_uri:
            assert _last_updated(seen, uri) == max(of_uri), (
                f"{who}: last resources/updated of {uri[:40]} is for change {_last_updated(seen, uri)}, "
                f"the last change of that resource is {max(of_uri)}"
            )


def _read_until(
    listener: StreamListener, seen: list[tuple[int, dict[str, Any]]], change: int, deadline: float, who: str
) -> None:
    """Read ``listener`` until it has had a notification of ``change`` (or later)."""
    while not seen or seen[-1][0] < change:
        if listener.events.empty() and listener.ended.is_set():
            raise AssertionError(f"{who} was dropped: its last notification is for change {seen[-1][0] if seen else 0}")
        assert time.monotonic() < deadline, (
            f"{who} did not get change {change}: its last is {seen[-1] if seen else None}"
        )
        try:
            event = listener.events.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.extend(_notifications([event]))


class StalledReader:
    """A GET stream whose client reads the priming event, then stops reading until ``drain`` reads
    everything that was delivered up to the server's close."""

    def __init__(self, base_url: str, session_id: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=30), verify=TLS)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL}
        self._context = self.client.stream("GET", "/mcp", headers=headers)
        self.response = self._context.__enter__()
        assert self.response.status_code == 200
        self._events = iter_sse(self.response.iter_lines())
        self.priming = next(self._events)
        assert self.priming.data == "" and self.priming.id is not None

    def drain(self) -> tuple[list[SseEvent], bool]:
        """Everything delivered, and whether the server ended the stream."""
        events: list[SseEvent] = []
        try:
            for event in self._events:
                events.append(event)
        except httpx.RemoteProtocolError:
            pass  # the server dropped the stream without finishing the chunked body: expected
        except httpx.ReadTimeout:
            return events, False
        return events, True

    def close(self) -> None:
        self.client.close()


def _edit_prompt(admin: httpx.Client, n: int) -> None:
    # A new description each time: every edit changes what prompts/list shows, so each is notified.
    body = {
        "template": f"Probe {n}: {{{{ text }}}}",
        "description": f"Probe {n}",
        "arguments": [{"name": "text", "required": True}],
    }
    response = admin.put(f"/api/v1/prompts/{PROBE_PROMPT}", json=body)
    assert response.status_code == 200, response.text


def _edit_resource(admin: httpx.Client, name: str, n: int) -> None:
    spec = admin.get(f"/api/v1/resources/{name}").json()["spec"]
    spec["text"] = f"version {n}"
    spec["description"] = f"version {n}"  # a list change too, not only content (resources/updated)
    response = admin.put(f"/api/v1/resources/{name}", json=spec)
    assert response.status_code == 200, response.text


def _create_entries(admin: httpx.Client) -> None:
    created = [
        admin.post(
            "/api/v1/prompts",
            json={"name": PROBE_PROMPT, "template": "Probe {{ text }}", "arguments": [{"name": "text"}]},
        ),
        admin.post(
            "/api/v1/resources",
            json={"name": DOC, "uri": DOC_URI, "kind": "static", "text": "v0", "mimeType": "text/plain"},
        ),
        admin.post(
            "/api/v1/resources",
            json={"name": BULK, "uriTemplate": "bulk://{key}", "kind": "template", "text": "{{ key }}"},
        ),
    ]
    for response in created:
        assert response.status_code == 201, response.text


# ---------------------------------------------------------------------------- the test
def test_a_replica_catching_up_drops_only_the_stalled_stream_and_loses_nothing(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    with a.admin() as admin:
        _create_entries(admin)
    subscribed = [i for i in range(FAST_STREAMS) if i % 2 == 0]
    sessions = [_open_session(b) for _ in range(FAST_STREAMS)]
    for i in subscribed:
        sessions[i].request("resources/subscribe", {"uri": DOC_URI})
    stalled_session = _open_session(b)
    bulk_uris = [f"bulk://{i:04d}" + "k" * (BULK_URI_CHARS - 12) for i in range(BULK_SUBSCRIPTIONS)]
    for uri in bulk_uris:
        stalled_session.request("resources/subscribe", {"uri": uri})

    listeners = [StreamListener(b.url, s.session_id or "") for s in sessions]
    stalled: StalledReader | None = None
    try:
        primings = [listener.next() for listener in listeners]
        assert all(p.data == "" for p in primings)
        stalled = StalledReader(b.url, stalled_session.session_id or "")
        opened_after = min(_change_id(p.id) for p in [*primings, stalled.priming])
        assert _streams_open(b) == FAST_STREAMS + 1

        # B falls 300 changes behind, then catches up all at once.
        b.freeze()
        try:
            with a.admin() as admin:
                for n in range(EDITS):
                    if n % 3 == 2:
                        _edit_resource(admin, DOC, n)
                    else:
                        _edit_prompt(admin, n)
        finally:
            b.resume()
        catchup = _changes(a, opened_after)
        assert len(catchup) >= EDITS
        last_change = catchup[-1]["id"]

        seen: list[list[tuple[int, dict[str, Any]]]] = [[] for _ in listeners]
        deadline = time.monotonic() + 30
        for i, listener in enumerate(listeners):
            _read_until(listener, seen[i], last_change, deadline, f"stream {i}")
        for i, listener in enumerate(listeners):
            seen[i].extend(_notifications(listener.drain(0.5 if i == 0 else 0.0)))
            assert not listener.ended.is_set(), f"fast-reading stream {i} was dropped while its replica caught up"
            _assert_nothing_masked(seen[i], catchup, [DOC_URI] if i in subscribed else [], f"stream {i}")
            # Coalesced: a reading client is not sent one notification per change it already re-read.
            assert len(seen[i]) < 3 * EDITS

        # Now the stalled client: edits of the resource it subscribed to (~200 KB each for it) fill
        # the loopback buffers, its writes stall, and it alone is dropped.
        with a.admin() as admin:
            deadline = time.monotonic() + 60
            n = 0
            while _streams_open(b) > FAST_STREAMS:
                assert time.monotonic() < deadline, "the stalled stream was never dropped"
                _edit_resource(admin, BULK, n)
                n += 1
                time.sleep(0.1)
        time.sleep(0.5)
        assert _streams_open(b) == FAST_STREAMS, "a stream other than the stalled one was dropped"
        everything = _changes(a, opened_after)
        last_change = everything[-1]["id"]
        for i, listener in enumerate(listeners):
            _read_until(listener, seen[i], last_change, time.monotonic() + 15, f"stream {i}")
            assert not listener.ended.is_set(), f"fast-reading stream {i} was dropped with the stalled one"
            _assert_nothing_masked(seen[i], everything, [DOC_URI] if i in subscribed else [], f"stream {i}")

        # The stalled client reads what reached it: the server ended the stream, and sent nothing
        # after the drop that could mask what it did not send.
        delivered, ended = stalled.drain()
        assert ended, "the server did not end the stalled stream"
        before = _notifications(delivered)
        assert before, "the stalled stream got nothing before it stalled"
        last_event_id = next(e.id for e in reversed(delivered) if e.data)
        # It reconnects with Last-Event-ID and is replayed what it missed.
        resumed = StreamListener(b.url, stalled_session.session_id or "", last_event_id=last_event_id)
        try:
            assert resumed.next().data == ""  # priming
            replayed = _notifications(resumed.drain(2.0))
            assert replayed, "nothing was replayed to the stalled client after its drop"
            assert min(cid for cid, _ in replayed) >= _change_id(last_event_id)
            _assert_nothing_masked([*before, *replayed], everything, bulk_uris, "the stalled stream")
            assert not resumed.ended.is_set()
        finally:
            resumed.close()
    finally:
        for listener in listeners:
            listener.close()
        if stalled is not None:
            stalled.close()


# ---------------------------------------------------------------------------- unit level
def test_closing_or_dropping_a_stream_never_discards_an_event_a_later_one_could_mask(tmp_path: Path) -> None:
    """``close`` keeps every pending event (they are written before the stream ends); a drop sends
    nothing more at all, so the client's Last-Event-ID is the last event it got and the replay
    covers the rest. (Before: ``close`` on a full queue threw the oldest event away while the
    later ones were still written.)"""
    from registry.mcp.sessions import ClientState
    from registry.mcp.streams import ClientStream, StreamHub

    async def scenario() -> None:
        stream = ClientStream("s", ClientState(label="production", principal="p"))
        for n in range(StreamHub.MAX_QUEUE):
            assert stream.offer((f"{n + 1}:0", b"{}"))
        stream.close()
        pending = stream.pending_events()
        assert [event_id for event_id, _ in pending] == [f"{n + 1}:0" for n in range(StreamHub.MAX_QUEUE)]
        assert not stream.offer(("999:0", b"{}")), "nothing is accepted after close"

        dropped = ClientStream("d", ClientState(label="production", principal="p"))
        for n in range(StreamHub.MAX_QUEUE):
            assert dropped.offer((f"{n + 1}:0", b"{}"))
        assert not dropped.offer(("999:0", b"{}"))  # over the bound: the client is not reading
        assert dropped.dropped
        assert dropped.pending_events() == [], "a dropped stream sends nothing more (the replay does)"

    asyncio.run(scenario())
