"""How the hub writes session streams (streams.py): an offer to an idle stream is written by the
hub's flush after the offering turn, without waking the stream's task, in id order and coalesced
as if queued; a write the client has no room for is finished by the stream's own task before
anything else; a client that never takes it is dropped and sent nothing more. Also the batched
write-back of session activity that keep-alives cause."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy import Connection, event, select, update

from registry.mcp.sessions import ClientState, Session, SessionStore
from registry.mcp.streams import ClientStream, StreamHub
from registry.runtime import Registry
from tests.mcp.asgi_peer import AsgiPeer

PRIMING = "5"


async def _open(
    hub: StreamHub, peer: AsgiPeer, session_id: str = "s", **kwargs: object
) -> tuple[ClientStream, asyncio.Task[None]]:
    """A stream served on ``peer``, once its writer waits with nothing to write."""
    client = ClientState(label="production", principal="p")
    task = asyncio.create_task(
        hub.serve_stream(session_id, client, peer.receive, peer.send, priming_id=PRIMING, **kwargs)  # type: ignore[arg-type]
    )
    for _ in range(100):
        await asyncio.sleep(0)
        mine = [s for s in hub.streams() if s.session_id == session_id]
        if mine and mine[0].idle:
            return mine[0], task
    raise AssertionError("the stream's writer never went idle")


def _change(n: int, kind: str) -> tuple[tuple[str, bytes], str]:
    return (f"{n}:0", f'{{"change":{n}}}'.encode()), kind


async def test_offers_to_idle_streams_are_written_by_one_flush_without_waking_their_tasks() -> None:
    hub = StreamHub()
    peers = [AsgiPeer(), AsgiPeer()]
    opened = [await _open(hub, peer, f"s{i}") for i, peer in enumerate(peers)]
    streams = [stream for stream, _ in opened]
    try:
        shared = [_change(n, "resource" if n % 2 == 0 else "prompt") for n in range(6, 10)]
        for stream in streams:
            for item, kind in shared:
                assert stream.offer(item, kind)
        assert [peer.events() for peer in peers] == [[(PRIMING, b"")]] * 2  # nothing written in the offering turn
        await asyncio.sleep(0)  # the flush runs once the turn is over
        for stream, peer in zip(streams, peers, strict=True):
            # Coalesced as if queued: the newest per kind, in id order (8 replaced 6, 9 replaced 7).
            assert peer.events() == [(PRIMING, b""), ("8:0", b'{"change":8}'), ("9:0", b'{"change":9}')]
            assert stream.last_event_id == "9:0" and stream.writes == 2
            # Written by the flush: the writer still waits, never woken.
            assert stream.idle and not stream.wake.is_set() and not stream.pending
        # Each event encoded once for every stream: the very same bytes written to both.
        assert peers[0].sent[-1]["body"] is peers[1].sent[-1]["body"]
    finally:
        hub.close_all()
        await asyncio.wait_for(asyncio.gather(*(task for _, task in opened)), 3)
    assert all(peer.ended for peer in peers)


async def test_a_write_the_client_has_no_room_for_is_finished_by_the_stream_task_in_order() -> None:
    hub = StreamHub()
    peer = AsgiPeer()
    stream, task = await _open(hub, peer)
    try:
        peer.block = True  # the client's buffers are full: the send waits
        stream.offer(*_change(10, "prompt"))
        await asyncio.sleep(0)  # the flush starts the write; it cannot finish
        assert stream.unfinished is not None and stream.writing and not stream.idle
        assert stream.last_event_id == PRIMING  # not taken yet
        stream.offer(*_change(11, "resource"))  # queues behind it
        await asyncio.sleep(0.05)
        assert peer.events() == [(PRIMING, b"")]
        peer.release()
        for _ in range(100):
            await asyncio.sleep(0)
            if stream.idle:
                break
        assert peer.events() == [(PRIMING, b""), ("10:0", b'{"change":10}'), ("11:0", b'{"change":11}')]
        assert stream.last_event_id == "11:0" and stream.unfinished is None and not stream.writing
    finally:
        hub.close_all()
        await asyncio.wait_for(task, 3)


async def test_a_client_that_never_takes_a_flushed_write_is_dropped_and_sent_nothing_more() -> None:
    hub = StreamHub(stall_s=0.3)
    hub.start()
    peer = AsgiPeer()
    stream, task = await _open(hub, peer)
    try:
        peer.block = True
        stream.offer(*_change(10, "prompt"))
        await asyncio.sleep(0)
        stream.offer(*_change(11, "resource"))
        await asyncio.wait_for(task, 3)  # ended by the stall rule, not by the client
        assert stream.dropped and hub.open_streams == 0
        # Its Last-Event-ID covers exactly what it got: the replay resends 10 and 11.
        assert stream.last_event_id == PRIMING and stream.pending_events() == []
        assert not stream.offer(*_change(12, "prompt"))
        peer.release()
        await asyncio.sleep(0.05)
        assert peer.events() == [(PRIMING, b"")] and not peer.ended
    finally:
        await hub.stop()


async def test_keepalives_are_flushed_too_and_keep_the_session_alive() -> None:
    hub = StreamHub(keepalive_s=0.1)
    hub.start()
    peer = AsgiPeer()
    kept: list[float] = []
    stream, task = await _open(hub, peer, on_keepalive=lambda: kept.append(1.0))
    try:
        await asyncio.sleep(0.35)
        assert len(kept) >= 2 and peer.body.count(b": keep-alive\n\n") == len(kept)
        assert stream.idle and not stream.wake.is_set()
    finally:
        await hub.stop()
        await asyncio.wait_for(task, 3)


async def test_closing_right_after_an_offer_writes_it_once_then_ends() -> None:
    hub = StreamHub()
    peer = AsgiPeer()
    stream, task = await _open(hub, peer)
    stream.offer(*_change(20, "prompt"))
    stream.close()
    await asyncio.wait_for(task, 3)
    assert peer.events() == [(PRIMING, b""), ("20:0", b'{"change":20}')]
    assert peer.ended


async def test_the_touches_of_one_turn_are_written_back_in_one_transaction(registry: Registry) -> None:
    """A keep-alive tick touches every stream's session in one turn: one transaction writes them
    all (a statement per ``TOUCH_BATCH`` ids), not one transaction per session."""
    from registry.db.models import McpSession

    store = SessionStore(registry.db)
    store.touch_interval = 0.0  # every touch is due
    store.TOUCH_BATCH = 7
    sessions = [await store.create(Session(label="production", principal="p")) for _ in range(30)]
    await store.flush()  # a burst's rows are written behind; touches apply to written rows
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)
    ids = [session.id for session in sessions]
    with registry.db.session() as db_session:
        db_session.execute(update(McpSession).where(McpSession.id.in_(ids)).values(last_seen_at=long_ago))
    updates: list[object] = []  # the transaction of each UPDATE of mcp_sessions

    def on_execute(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE MCP_SESSIONS"):
            updates.append(conn.get_transaction())

    event.listen(registry.db.engine, "before_cursor_execute", on_execute)
    try:
        for session in sessions:
            store.touch(session)
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            await asyncio.sleep(0.05)
            with registry.db.session() as db_session:
                seen = db_session.scalars(select(McpSession.last_seen_at).where(McpSession.id.in_(ids))).all()
            if all(stamp.replace(tzinfo=UTC) > long_ago for stamp in seen):
                break
            assert asyncio.get_running_loop().time() < deadline, "touches never written back"
    finally:
        event.remove(registry.db.engine, "before_cursor_execute", on_execute)
    assert len(updates) == 5  # ceil(30 / 7) statements
    assert len({id(transaction) for transaction in updates}) == 1  # in one transaction
    await store.stop()


# -- subscriptions/listen streams: the same flush ----------------------------------------------
async def test_listen_offers_are_flushed_without_waking_the_writer_and_blocked_writes_finish_in_order() -> None:
    from registry.mcp.listen import ListenService

    service = ListenService(stall_s=5)
    peer = AsgiPeer()
    client = ClientState(label="production", principal="p")
    wanted = {"notifications": {"toolsListChanged": True, "promptsListChanged": True}}
    stream = await service.open("l-1", wanted, client)
    serving = asyncio.create_task(service.serve_sse(stream, peer.receive, peer.send))
    try:
        for _ in range(100):
            await asyncio.sleep(0)
            if stream.idle:
                break
        assert stream.idle  # the ack is written
        stream.offer("tool", "notifications/tools/list_changed")
        stream.offer("prompt", "notifications/prompts/list_changed")
        stream.offer("tool", "notifications/tools/list_changed")  # replaces the pending one, moves to the end
        await asyncio.sleep(0)
        assert stream.idle and not stream.wake.is_set()  # written by the flush, the writer never woken
        peer.block = True
        stream.offer("prompt", "notifications/prompts/list_changed")
        await asyncio.sleep(0)
        assert stream.unfinished is not None and stream.outside_since is not None  # timed by the stall rule
        stream.offer("tool", "notifications/tools/list_changed")
        peer.release()
        await asyncio.sleep(0.05)
        assert [method for _, method in _methods(peer)] == [
            "notifications/subscriptions/acknowledged",
            "notifications/prompts/list_changed",
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/tools/list_changed",
        ]
        assert all(sub == "l-1" for sub, _ in _methods(peer))
    finally:
        service.close_all()
        await asyncio.wait_for(serving, 3)
        await service.stop()


def _methods(peer: AsgiPeer) -> list[tuple[str, str]]:
    import json

    from registry.mcp.protocol import META_SUBSCRIPTION_ID

    out = []
    for _, data in peer.events():
        message = json.loads(data)
        if "method" in message:
            out.append((message["params"]["_meta"][META_SUBSCRIPTION_ID], message["method"]))
    return out
