"""Running the ASGI app under uvicorn, with a shutdown that suits long-lived streams."""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType

import uvicorn


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT, first close every MCP stream, so their clients reconnect (to another
    replica behind the load balancer) and uvicorn's graceful shutdown is not held open by them."""

    def __init__(self, config: uvicorn.Config, *, drain: Callable[[], None]) -> None:
        super().__init__(config)
        self._drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._drain()
        super().handle_exit(sig, frame)
