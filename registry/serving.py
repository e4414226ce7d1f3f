"""Running the ASGI app under uvicorn: a shutdown that suits long-lived streams, and bounded request heads."""

from __future__ import annotations

import logging
import resource
import time
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
    """uvicorn's httptools protocol with a bound on what a request sends besides its body.

    uvicorn's httptools path has none (its h11 path has ``h11_max_incomplete_event_size``): a
    64 MB header value was gathered whole, in pieces joined over and over, before the app saw
    the request, and held ``/healthz`` for 10 s; a chunked body's trailers are gathered the same
    way. Here every byte of a request that is not its body (the request line and headers, and a
    chunked body's sizes, extensions and trailers) is counted as it arrives, against
    ``head_limit``. A head past it is refused before the parser sees it: answered 431 (or, while
    an earlier answer on the connection is still being written, the connection is closed), so
    nothing past the bound is parsed or authenticated; framing past it closes the connection.
    ``bounded_heads`` makes the class for a limit (uvicorn takes a class as ``Config(http=...)``,
    its documented way to pick one).

    Counting starts again when a request ends; the rest of the read in which it ended is not
    counted for the next request, so a pipelined one may pass the bound by at most one read (256
    KiB on uvloop). Only the parser callbacks and the ``cycle``, ``client`` and ``transport``
    attributes of uvicorn's implementation are used; ``tests/security/test_head_limit.py`` pins
    the behaviour, and ``pyproject.toml`` pins uvicorn and httptools to the versions it passed on.
    """

    head_limit = 64 * 1024
    _in_head = True  # no request yet, or one whose head is not complete: every byte is head
    _overhead = 0  # bytes of the current request that are not its body
    _body = 0  # body bytes of the current request the parser handed on
    _tail = b""  # the last 3 head bytes: a head's end may straddle reads
    _ended = False  # a request ended in the read being parsed
    _warned_at = -60.0  # refusals are logged once a minute at most, however many there are

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused: what still arrives before the close is not looked at
        if self._in_head:
            room = self.head_limit - self._overhead
            if len(data) > room and b"\r\n\r\n" not in self._tail + data[: max(room, 0)]:
                self._refuse(answer=True)
                return
            self._tail = (self._tail + data)[-3:]
        body, self._ended = self._body, False
        super().data_received(data)
        if not self._ended:
            self._overhead += len(data) - (self._body - body)
            if self._overhead > self.head_limit:
                self._refuse(answer=False)

    def on_body(self, body: bytes) -> None:
        self._body += len(body)
        super().on_body(body)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._overhead, self._body, self._tail, self._ended = True, 0, 0, b"", True

    def _refuse(self, *, answer: bool) -> None:
        now = time.monotonic()
        if now - HeadBoundProtocol._warned_at >= 60:
            HeadBoundProtocol._warned_at = now
            log.warning("refused %s: more than %d bytes besides a request's body", self.client, self.head_limit)
        if answer and (self.cycle is None or self.cycle.response_complete):
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
