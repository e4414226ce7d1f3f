"""An ASGI app served by uvicorn on a thread of the test runner: the one way tests do it.

For what a test wants in its own process: a loopback webhook whose calls it reads, or a test app
it inspects. (A server the test must freeze, kill or measure is a process: ``tests/serve_process``.)
The listening socket is bound before the thread starts, so the port is the server's from the
first moment: no gap in which another test could take it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.waiting import wait_until


@contextmanager
def serving_in_thread(app: Any, *, name: str, timeout: float = 15.0, **config: Any) -> Iterator[uvicorn.Server]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the ``uvicorn.Server`` once it
    accepts connections (its port: ``port_of(server)``). ``config``: more ``uvicorn.Config``
    settings (``http=``, ``proxy_headers=``, ...)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off", **config}
    server = uvicorn.Server(uvicorn.Config(app, **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=name)
    thread.start()
    try:
        wait_until(
            lambda: server.started,
            f"{name} to start",
            timeout=timeout,
            interval=0.01,
            unless=lambda: not thread.is_alive(),
        )
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def port_of(server: uvicorn.Server) -> int:
    """The loopback port a server started by ``serving_in_thread`` listens on."""
    return int(server.servers[0].sockets[0].getsockname()[1])
