"""Running the ASGI app under uvicorn, with a shutdown that suits long-lived streams."""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("registry")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; returns (soft, hard) after.

    Every MCP stream holds a socket, and a deployment holds 10,000 and more; the soft limit is
    often 1,024 (systemd's default) while the hard one allows far more. Only the soft limit moves,
    which needs no privilege; a hard limit that is itself low is left alone and named in the log.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, want, exc)
            return soft, hard
        log.info("open-files limit (RLIMIT_NOFILE) raised from %d to the hard limit %d", soft, want)
        soft = want
    return soft, hard


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT, first close every MCP stream, so their clients reconnect (to another
    replica behind the load balancer) and uvicorn's graceful shutdown is not held open by them.

    Its open-files limit is raised to the hard limit first (``raise_open_files_limit``): each
    stream is a socket."""

    def __init__(self, config: uvicorn.Config, *, drain: Callable[[], None]) -> None:
        super().__init__(config)
        self._drain = drain
        raise_open_files_limit()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._drain()
        super().handle_exit(sig, frame)


class _HeadHoldingTransport:
    """A transport that holds a response head back until the body's first write, then sends both
    as one ``write``, so an answer goes out in one system call and one segment instead of two.

    uvicorn writes the status line and headers, then the body, as two writes (an ASGI app has no
    way to send them together). Measured at one agent on two cores: the first write wakes the
    client, which then often runs before the server reaches the second, and those answers land
    in the p99 (corking the socket around the two writes halved it; see benchmarks/README.md).

    A held head is never late by more than one turn of the event loop: it goes with the next
    write, before a close, or at the end of the turn (a stream whose first event comes later).
    Everything else is passed through to uvloop's transport untouched.
    """

    __slots__ = ("_held", "_loop", "_transport", "get_extra_info", "is_closing", "pause_reading", "resume_reading")

    #: Bodies up to this size are joined to their head (a copy); larger ones are written after it.
    JOIN_MAX = 64 * 1024

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        # What uvicorn calls on every request, bound once: ``__getattr__`` is a slow path.
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= self.JOIN_MAX:
                self._transport.write(held + bytes(data))
                return
            self._transport.write(held)
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else: the real transport's
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering through a ``_HeadHoldingTransport``: given to
    uvicorn as ``Config(http=...)``, its documented way to choose the HTTP protocol class."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        holding = _HeadHoldingTransport(transport, self.loop)
        super().connection_made(holding)  # type: ignore[arg-type]
