"""A browser that leaves while its form is being sent (a live check overtaken by the next
keystroke, a closed tab) is no server error: no "Exception in ASGI application" traceback in the
log, on the web UI's form posts or the admin API's bodies.

Real sockets against the real app under uvicorn (``live_server``, on a thread of this process so
the test reads the server's log records as they are made): each request sends its head with a
``Content-Length`` and part of the body, then closes. The test waits for the server's own word
that it saw the client leave (a debug record) or for the traceback, then looks for the traceback.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.http import TLS
from tests.ui.conftest import csrf_of, sign_in
from tests.waiting import wait_until


class Records(logging.Handler):
    """Every record of the loggers it is attached to (uvicorn's own do not reach the root logger)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]

    def tracebacks(self) -> list[str]:
        return [m for m in self.messages() if "Exception in ASGI application" in m]

    def left(self, path: str) -> list[str]:
        return [m for m in self.messages() if "client left" in m and path in m]


@pytest.fixture
def server_log() -> Iterator[Records]:
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "registry.ui", "registry.api")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
    logging.getLogger("registry.ui").setLevel(logging.DEBUG)
    logging.getLogger("registry.api").setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def send_part_and_leave(server: LiveServer, path: str, headers: dict[str, str], part: bytes, declared: int) -> None:
    """POST ``path`` announcing ``declared`` body bytes, send ``part`` of them, and close."""
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}", f"Content-Length: {declared}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + part)


def test_leaving_during_a_live_check_logs_no_traceback(live_server: LiveServer, server_log: Records) -> None:
    with httpx.Client(base_url=live_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ADMIN_TOKEN).status_code == 303
        csrf = csrf_of(http, "/ui/prompts/-/new")
        cookies = "; ".join(f"{name}={value}" for name, value in http.cookies.items())
    headers = {
        "Cookie": cookies,
        "Content-Type": "application/x-www-form-urlencoded",
        "X-CSRF-Token": csrf,
        "HX-Request": "true",
    }
    send_part_and_leave(live_server, "/ui/prompts/-/check", headers, b"name=half-typed&title=Hal", 4000)
    wait_until(
        lambda: server_log.left("/ui/prompts/-/check") or server_log.tracebacks(),
        "the server to notice the client left",
    )
    assert not server_log.tracebacks(), server_log.messages()
    # The server carries on: the next check is answered as usual.
    with httpx.Client(base_url=live_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ADMIN_TOKEN).status_code == 303
        csrf = csrf_of(http, "/ui/prompts/-/new")
        answer = http.post("/ui/prompts/-/check", data={"csrf_token": csrf, "name": "whole"})
        assert answer.status_code == 200, answer.text[:300]


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_leaving_during_an_api_save_logs_no_traceback(
    live_server: LiveServer, server_log: Records, content_type: str
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": content_type}
    send_part_and_leave(live_server, "/api/v1/prompts", headers, b'{"name": "half-sent", "templ', 4000)
    wait_until(
        lambda: server_log.left("/api/v1/prompts") or server_log.tracebacks(),
        "the server to notice the client left",
    )
    assert not server_log.tracebacks(), server_log.messages()
