"""stdio: the host runs ``mcp-registry stdio`` as a child process and talks JSON-RPC over its pipes.

One JSON message per line on stdin; answers and notifications, one per line, on stdout. Logs go
to stderr only (stdout belongs to the protocol).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, BinaryIO

from registry.mcp.protocol import (
    PARSE_ERROR,
    JsonRpcError,
    dumps,
    error_message,
    invalid_message_answer,
    loads,
    parse_message,
)
from registry.mcp.server import McpServer, RequestContext
from registry.mcp.sessions import ClientState

MAX_LINE = 4 * 1024 * 1024


class StdioTransport:
    def __init__(self, server: McpServer, client: ClientState, *, max_line: int = MAX_LINE) -> None:
        self.server = server
        self.client = client
        self.max_line = max_line
        self._write_lock = asyncio.Lock()
        self._out: BinaryIO = sys.stdout.buffer
        self._tasks: set[asyncio.Task[Any]] = set()

    async def write(self, message: dict[str, Any]) -> None:
        data = dumps(message) + b"\n"
        async with self._write_lock:
            self._out.write(data)
            self._out.flush()

    async def run(self, reader: asyncio.StreamReader, out: BinaryIO | None = None) -> None:
        if out is not None:
            self._out = out
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line over the limit
                await self.write(error_message(None, JsonRpcError(PARSE_ERROR, "message too large")))
                continue
            if not line:
                break
            line = line.strip()
            if not line:
                continue
            try:
                payload = loads(line)
            except ValueError:
                await self.write(error_message(None, JsonRpcError(PARSE_ERROR, "Parse error: invalid JSON")))
                continue
            for item in payload if isinstance(payload, list) else [payload]:
                task = asyncio.create_task(self._handle(item))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, item: Any) -> None:
        try:
            message = parse_message(item)
        except JsonRpcError as exc:
            await self.write(invalid_message_answer(exc))
            return
        if message.is_notification:
            await self.server.handle_notification(message, self.client)
            return
        if not message.is_request:
            return
        assert message.id is not None
        ctx = RequestContext(client=self.client, send=self.write)
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


async def open_stdin_reader(limit: int = MAX_LINE) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    protocol = asyncio.StreamReaderProtocol(reader)
    await loop.connect_read_pipe(lambda: protocol, sys.stdin)
    return reader
