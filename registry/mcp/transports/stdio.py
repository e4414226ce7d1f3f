"""stdio: the host runs ``mcp-registry stdio`` as a child process and talks JSON-RPC over its pipes.

One JSON message per line on stdin; answers and notifications, one per line, on stdout. Logs go
to stderr only (stdout belongs to the protocol).

Both eras share the pipe, decided per message (basic/versioning): a request whose ``_meta`` names a
protocol version (and is not ``initialize``) is a stateless 2026-07-28 request, served from its own
``_meta``; everything else is the session era's, served to the process's ``ClientState``.

Teams: stdio has no token. Whoever starts the process holds the database credentials (the same
trust as the CLI, which acts as the system), so the process's ``ClientState`` sees every team's
entries (``visible_teams`` None), as it did before teams existed; both eras' requests, and listen
streams, are served with that visibility.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, BinaryIO

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from registry.mcp import modern
from registry.mcp.client_requests import ClientRequests
from registry.mcp.protocol import (
    PARSE_ERROR,
    JsonRpcError,
    Message,
    check_batch,
    dumps,
    error_message,
    invalid_message_answer,
    loads,
    parse_message,
)
from registry.mcp.server import McpServer, RequestContext
from registry.mcp.sessions import ClientState

if TYPE_CHECKING:
    from registry.mcp.listen import ListenService, ListenStream

log = logging.getLogger("registry.mcp")

#: How much is read from stdin at a time (a line may span many reads).
READ_CHUNK = 64 * 1024
#: After stdin closes, how long requests still running may take to answer before they are
#: cancelled (``echo REQUEST | mcp-registry stdio`` still gets its answer); not longer, since the
#: host waits for the process to exit, and kills it if that takes too long.
DRAIN_S = 2.0
#: How long cancelled requests get to unwind.
CANCEL_GRACE_S = 0.5


class StdioTransport:
    """``limits`` bound each line (``body_bytes``), its JSON structure and batch length, as on HTTP."""

    def __init__(
        self, server: McpServer, client: ClientState, *, limits: Limits = DEFAULT_LIMITS, max_line: int | None = None
    ) -> None:
        self.server = server
        self.client = client
        self.limits = limits
        self.max_line = limits.body_bytes if max_line is None else max_line
        self._write_lock = asyncio.Lock()
        self._out: BinaryIO = sys.stdout.buffer
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Requests sent to the host mid-call (elicitation, sampling, roots) awaiting its answer line.
        self.client_requests = ClientRequests()
        self._session_key = f"stdio-{client.history_id}"
        #: ``subscriptions/listen`` (stateless era), when the process runs a listen service.
        self.listen: ListenService | None = None
        #: Open listens by request id: ended gracefully (final result) when the process stops.
        self._listens: dict[Any, ListenStream] = {}

    async def write(self, message: dict[str, Any]) -> None:
        data = dumps(message) + b"\n"
        async with self._write_lock:
            self._out.write(data)
            self._out.flush()

    async def run(self, reader: asyncio.StreamReader, out: BinaryIO | None = None) -> None:
        if out is not None:
            self._out = out
        async for line in self.lines(reader):
            if line is None:
                too_long = LimitExceeded("body_bytes", f"message line longer than {self.max_line} bytes")
                await self.write(error_message(None, JsonRpcError(PARSE_ERROR, f"Parse error: {too_long}")))
                continue
            line = line.strip()
            if not line:
                continue
            try:
                items = check_batch(loads(line, self.limits), self.limits)
            except JsonRpcError as exc:  # over a limit, or an empty batch
                await self.write(error_message(None, exc))
                continue
            except ValueError:
                await self.write(error_message(None, JsonRpcError(PARSE_ERROR, "Parse error: invalid JSON")))
                continue
            for item in items:
                task = asyncio.create_task(self._handle(item))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        await self.finish(DRAIN_S)

    async def finish(self, grace: float = 0.0) -> None:
        """Let the requests still running answer for up to ``grace`` seconds, then cancel the rest.

        Bounded both ways, so stdin EOF or SIGTERM ends the process promptly whatever a request
        is waiting on; a request that does not unwind even when cancelled is logged and left.
        """
        for stream in list(self._listens.values()):
            stream.close()  # a graceful end: what is pending, then the listen's final result
        tasks = set(self._tasks)
        pending = tasks
        if pending and grace > 0:
            _done, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            log.info("stdio: cancelling %d request(s) still running at shutdown", len(pending))
            for task in pending:
                task.cancel()
            _done, pending = await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
        for task in tasks - pending:  # as gather(return_exceptions=True) did: no "never retrieved" noise
            if not task.cancelled() and task.exception() is not None:
                log.debug("stdio: a request ended with %r", task.exception())
        if pending:
            log.error(
                "stdio: %d request(s) did not end %.1fs after being cancelled; left behind",
                len(pending),
                CANCEL_GRACE_S,
            )

    async def lines(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes | None]:
        """The lines of ``reader``, none held beyond ``max_line`` bytes.

        An over-long line yields ``None`` once, as soon as it passes the limit (so its error is
        answered at once), and the rest of it is skipped up to its newline: the line after it is
        read as the next message. (``StreamReader.readline`` would hand the remainder on as if it
        were a line of its own.)
        """
        buffer = bytearray()
        skipping = False
        while True:
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                if buffer and not skipping:
                    yield bytes(buffer)
                return
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                piece = chunk[start:newline]
                start = newline + 1
                if skipping:
                    skipping = False
                elif len(buffer) + len(piece) > self.max_line:
                    buffer.clear()
                    yield None
                else:
                    buffer += piece
                    line = bytes(buffer)
                    buffer.clear()
                    yield line
            if skipping:
                continue
            if len(buffer) + len(chunk) - start > self.max_line:
                buffer.clear()
                skipping = True
                yield None
            else:
                buffer += chunk[start:]

    async def _handle(self, item: Any) -> None:
        try:
            message = parse_message(item, self.limits)
        except JsonRpcError as exc:
            await self.write(invalid_message_answer(exc))
            return
        if message.is_notification:
            await self.server.handle_notification(message, self.client)
            return
        if not message.is_request:
            # The host's answer to a request a tool call wrote on stdout (session era).
            await self.client_requests.deliver(self._session_key, message)
            return
        assert message.id is not None
        if modern.has_modern_meta(message):
            await self._modern(message)
            return
        ask = self.client_requests.asker(self._session_key, self.write)
        ctx = RequestContext(client=self.client, send=self.write, ask=ask)
        task = asyncio.current_task()
        if task is not None:
            self.client.in_flight[message.id] = task
        try:
            answer = await self.server.handle_request(message, ctx)
        except asyncio.CancelledError:
            return
        finally:
            self.client.in_flight.pop(message.id, None)
        await self.write(answer)

    async def _modern(self, message: Message) -> None:
        """A stateless request: checked (``_meta``, version; there are no headers on stdio), served
        to a caller built from its ``_meta`` alone; cancellable with ``notifications/cancelled``."""
        assert message.id is not None
        try:
            meta = modern.check_meta(message)
            modern.check_version(meta)
            client = modern.client_state(
                meta,
                label=self.client.label,
                principal=self.client.principal,
                token_id=self.client.token_id,
                visible_teams=self.client.visible_teams,
                user=self.client.user,
            )
        except JsonRpcError as exc:
            await self.write(error_message(message.id, exc))
            return
        task = asyncio.current_task()
        if task is not None:
            self.client.in_flight[message.id] = task
        try:
            if message.method == "subscriptions/listen" and self.listen is not None:
                await self._listen(message, client)
                return
            ctx = RequestContext(client=client, send=self.write, modern=True)
            answer = await self.server.handle_request(message, ctx)
        except asyncio.CancelledError:
            return
        finally:
            self.client.in_flight.pop(message.id, None)
        await self.write(answer)

    async def _listen(self, message: Message, client: ClientState) -> None:
        """Write a listen's messages as they come, until the client cancels it (its task is
        cancelled), stdin closes or the process stops (then it ends with its final result)."""
        assert self.listen is not None and message.id is not None
        try:
            stream = await self.listen.open(message.id, message.params, client)
        except JsonRpcError as exc:
            await self.write(error_message(message.id, exc))
            return
        self._listens[message.id] = stream
        try:
            async for frame in stream:
                await self.write(frame)
        finally:
            self._listens.pop(message.id, None)
            await stream.aclose()


async def open_stdin_reader(limit: int = DEFAULT_LIMITS.body_bytes) -> asyncio.StreamReader:
    """stdin as a StreamReader (``StdioTransport.lines`` bounds the lines; ``limit`` is the reader's buffer)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    protocol = asyncio.StreamReaderProtocol(reader)
    await loop.connect_read_pipe(lambda: protocol, sys.stdin)
    return reader
