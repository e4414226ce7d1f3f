"""Running the ASGI app under uvicorn: a shutdown that suits long-lived streams, and bounded request heads."""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable
from types import FrameType

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from registry.limits import LimitExceeded

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


class HeadBoundProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on each request's head (request line plus headers).

    uvicorn's httptools path has none (its h11 path has ``h11_max_incomplete_event_size``): a
    64 MB header value was gathered whole, in pieces joined over and over, before the app saw
    the request, and held ``/healthz`` for 10 s. Here the bytes of a head are counted as they
    arrive, before the parser sees them; a head past ``head_limit`` is answered 431 (or, while
    an earlier answer on the connection is still being written, the connection is closed), so
    nothing past the bound is parsed or authenticated. ``bounded_heads`` makes the class for a
    limit (uvicorn takes a class as ``Config(http=...)``, its documented way to pick one).

    Counting starts when the connection opens and again when a request's body ends; a read that
    ends one request and begins the next is not counted for the new head, so a pipelined head
    may pass the bound by at most one read (256 KiB on uvloop). Only uvicorn's parser callbacks and
    its public ``cycle``, ``client`` and ``transport`` are used; ``tests/test_head_limit.py`` pins
    the behaviour against the uvicorn version installed.
    """

    head_limit = 64 * 1024
    _in_head = True
    _head_bytes = 0
    _head_tail = b""  # the last 3 bytes counted: a head's end may straddle two reads

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused: what still arrives before the close is not looked at
        if self._in_head:
            room = self.head_limit - self._head_bytes
            if len(data) > room and b"\r\n\r\n" not in self._head_tail + data[: max(room, 0)]:
                self._refuse()
                return
            self._head_bytes += len(data)
            self._head_tail = data[-3:]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._head_tail = True, 0, b""

    def _refuse(self) -> None:
        log.warning("request head from %s larger than %d bytes: refused", self.client, self.head_limit)
        if self.cycle is None or self.cycle.response_complete:
            text = str(LimitExceeded("request_head_bytes", f"Request head larger than {self.head_limit} bytes"))
            body = text.encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
        self.transport.close()


def bounded_heads(head_limit: int) -> type[HeadBoundProtocol]:
    """The protocol class to give uvicorn (``Config(http=...)``) for heads of at most ``head_limit`` bytes."""
    return type("HeadBoundProtocol", (HeadBoundProtocol,), {"head_limit": head_limit})
