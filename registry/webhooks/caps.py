"""The outbound caps: webhook calls and ``http`` resource fetches one process has in flight.

Each call is admitted against three caps before anything is sent: calls in flight in all
(``outbound_calls``), to one origin (``outbound_calls_per_origin``) and for one caller
(``outbound_calls_per_caller``: an agent token, a single-sign-on user, or a session). A call past
one is refused at once with :class:`CapReached` naming the limit; none waits, so one slow origin or
one busy caller never holds up anyone else's calls.
"""

from __future__ import annotations

import threading
from typing import Final

from registry.limits import LimitExceeded, Limits

__all__ = ["OUTBOUND_CALLS", "CapReached", "OutboundCalls", "caller_key"]


class CapReached(LimitExceeded):
    """A call refused by one of the outbound caps before anything was sent; the message names the
    limit (``... (limit REGISTRY_LIMIT_OUTBOUND_CALLS_PER_CALLER)``) and is safe to show."""


def caller_key(token_id: int | None, user: str | None, session: str | None = None, peer: str | None = None) -> str:
    """Whose calls count against ``outbound_calls_per_caller``: an agent token, else a
    single-sign-on user, else a session, else (an anonymous stateless request) the client's
    address; callers with none of them (stdio: its one host) count as one caller."""
    if token_id is not None:
        return f"token:{token_id}"
    if user is not None:
        return f"user:{user}"
    if session:
        return f"session:{session}"
    if peer:
        return f"address:{peer}"
    return "anonymous"


class OutboundCalls:
    """Outbound calls in flight in this process: in all, per origin and per caller.

    One instance (:data:`OUTBOUND_CALLS`) is shared by every client of the process (the MCP
    server's, the test calls', the editor's fetches, which run on an event loop of their own in a
    worker thread: hence the lock). :meth:`admit` refuses at once past a cap; it never waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0
        self._origins: dict[str, int] = {}
        self._callers: dict[str, int] = {}

    def admit(self, origin: str, caller: str | None, limits: Limits) -> None:
        """Count one more call, or raise :class:`CapReached` naming the cap it would pass (the
        caller's first, then the origin's, then the process's). ``caller`` None: no caller cap."""
        with self._lock:
            if caller is not None:
                held = self._callers.get(caller, 0)
                if held >= limits.outbound_calls_per_caller:
                    raise CapReached(
                        "outbound_calls_per_caller",
                        f"{held} outbound calls of this caller are in flight, the most one caller may have at once",
                    )
            to_origin = self._origins.get(origin, 0)
            if to_origin >= limits.outbound_calls_per_origin:
                raise CapReached(
                    "outbound_calls_per_origin",
                    f"{to_origin} outbound calls to this origin are in flight, the most one origin is sent at once",
                )
            if self._total >= limits.outbound_calls:
                raise CapReached(
                    "outbound_calls",
                    f"{self._total} outbound calls are in flight in this process, the most it makes at once",
                )
            self._total += 1
            self._origins[origin] = to_origin + 1
            if caller is not None:
                self._callers[caller] = self._callers.get(caller, 0) + 1

    def release(self, origin: str, caller: str | None) -> None:
        with self._lock:
            self._total -= 1
            _decrement(self._origins, origin)
            if caller is not None:
                _decrement(self._callers, caller)

    def in_flight(self, *, origin: str | None = None, caller: str | None = None) -> int:
        """Calls in flight: in all, or to ``origin`` (``scheme://host:port``), or for ``caller``."""
        with self._lock:
            if origin is not None:
                return self._origins.get(origin, 0)
            if caller is not None:
                return self._callers.get(caller, 0)
            return self._total


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)  # origins and callers come and go: keep no entry at zero


#: The process's calls in flight (see :class:`OutboundCalls`).
OUTBOUND_CALLS: Final = OutboundCalls()
