"""Running the ASGI app under uvicorn, with a shutdown that suits long-lived streams."""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable
from types import FrameType

import uvicorn

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
