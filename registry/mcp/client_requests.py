"""Server-to-client requests of the session era (``elicitation/create``, ``sampling/createMessage``,
``roots/list``): sent related to a request being handled, answered by the client later.

A tool call that needs the user or the model sends the client a JSON-RPC request on the call's
own channel (the POST's SSE stream, the HTTP+SSE session stream, stdout) and waits here for the
client's response, keyed by (session, server request id), with a timeout and a bound per session.

The response arrives as a message of its own: on stdio a line, on HTTP a new POST carrying the
session id. With several replicas behind a round-robin balancer that POST may land on a replica
that is not running the call: that replica forwards it on the PostgreSQL channel
:data:`CLIENT_RESPONSE_CHANNEL` and the one holding the pending request resolves it. A NOTIFY
payload holds at most 8,000 bytes; a larger answer cannot be forwarded, so the call waiting for it
is told so at once (and the POST is refused naming the limit) rather than left to time out.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

from registry.mcp.protocol import Message, RequestId, notification

log = logging.getLogger("registry.mcp")

#: PostgreSQL channel on which a replica forwards a client's response to the replica waiting for it.
CLIENT_RESPONSE_CHANNEL: Final = "registry_client_response"
#: Largest forwarded payload (PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more).
MAX_FORWARD_BYTES: Final = 7_900
#: Every server-to-client request id starts so (then a per-process part): only such are forwarded.
ID_PREFIX: Final = "registry-"
#: How long a server-to-client request waits for its answer (a person may be typing).
DEFAULT_TIMEOUT_S: Final = 300.0
#: Most server-to-client requests one session may have waiting at once.
DEFAULT_PER_SESSION: Final = 8

Send = Callable[[dict[str, Any]], Awaitable[None]]
Forward = Callable[[str], Awaitable[None]]


class AskFailed(Exception):
    """The client's answer did not come (timeout, too many waiting, too large to forward) or was an
    error; the message is meant for the model (it becomes an ``isError`` tool result)."""


class ForwardTooLarge(Exception):
    """A response for another replica is larger than a NOTIFY payload can hold."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"the response is {size} bytes; responses reaching a replica other than the one running the "
            f"call are forwarded over PostgreSQL NOTIFY, which holds at most {MAX_FORWARD_BYTES} bytes"
        )
        self.size = size


_numbers = itertools.count(1)


class ClientRequests:
    """Pending server-to-client requests of this process, and where their responses go."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, per_session: int = DEFAULT_PER_SESSION) -> None:
        self.timeout_s = timeout_s
        self.per_session = per_session
        self._pending: dict[tuple[str, RequestId], asyncio.Future[dict[str, Any]]] = {}
        self._counts: Counter[str] = Counter()
        #: Set by the runtime on PostgreSQL: sends a payload on :data:`CLIENT_RESPONSE_CHANNEL`.
        self.forward: Forward | None = None
        # Random per process, so ids never collide between replicas serving one session.
        self._prefix = f"{ID_PREFIX}{secrets.token_hex(4)}-"

    @property
    def pending(self) -> int:
        return len(self._pending)

    def asker(self, session_key: str, send: Send) -> Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]:
        """``await ask(method, params)`` for one request being handled: sends on ``send``."""

        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self.request(session_key, send, method, params)

        return ask

    async def request(self, session_key: str, send: Send, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send ``method`` to the client and return its result; :class:`AskFailed` otherwise."""
        if self._counts[session_key] >= self.per_session:
            raise AskFailed(
                f"this session already has {self.per_session} requests waiting for the client; "
                "answer them first (limit per session)"
            )
        request_id = f"{self._prefix}{next(_numbers)}"
        key = (session_key, request_id)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        self._counts[session_key] += 1
        try:
            await send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            try:
                async with asyncio.timeout(self.timeout_s):
                    message = await future
            except TimeoutError:
                await self._cancel(send, request_id, "timed out")
                raise AskFailed(f"the client did not answer {method} within {self.timeout_s:g} s") from None
            except asyncio.CancelledError:
                await self._cancel(send, request_id, "the tool call was cancelled")
                raise
        finally:
            self._pending.pop(key, None)
            self._counts[session_key] -= 1
            if self._counts[session_key] <= 0:
                del self._counts[session_key]
        if "forward_error" in message:
            raise AskFailed(f"the client's answer to {method} could not reach this call: {message['forward_error']}")
        error = message.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, dict) else None
            raise AskFailed(f"the client answered {method} with an error: {str(text)[:500] if text else error!r:.500}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise AskFailed(f"the client's answer to {method} is not an object")
        return result

    @staticmethod
    async def _cancel(send: Send, request_id: str, reason: str) -> None:
        """Tell the client to stop working on a request nobody waits for (best effort)."""
        try:
            await send(notification("notifications/cancelled", {"requestId": request_id, "reason": reason}))
        except Exception:  # the channel may be gone with the call
            log.debug("could not send notifications/cancelled for %s", request_id, exc_info=True)

    # -- responses ------------------------------------------------------------------------
    async def deliver(self, session_key: str, message: Message) -> bool:
        """A client's response arrived here: resolve the request waiting for it in this process,
        else forward it to the other replicas. False if it belongs to nothing known (dropped).
        Raises :class:`ForwardTooLarge` when it would have to be forwarded but cannot be."""
        if self._resolve(session_key, message.id, message.raw):
            return True
        request_id = message.id
        if self.forward is None or not isinstance(request_id, str) or not request_id.startswith(ID_PREFIX):
            return False  # single process, or not an id any replica made
        if request_id.startswith(self._prefix):
            return False  # one of ours that nobody waits for any more
        payload = json.dumps({"s": session_key, "i": message.id, "m": message.raw}, separators=(",", ":"))
        size = len(payload.encode())
        if size > MAX_FORWARD_BYTES:
            # Tell the waiting call at once, in a payload that fits, then refuse the POST.
            too_large = ForwardTooLarge(size)
            await self.forward(json.dumps({"s": session_key, "i": message.id, "x": str(too_large)}))
            raise too_large
        await self.forward(payload)
        return True

    def deliver_forwarded(self, payload: str) -> None:
        """A response another replica forwarded (PostgreSQL notification payload)."""
        try:
            data = json.loads(payload)
            session_key, request_id = data["s"], data["i"]
            message = data["m"] if "m" in data else {"forward_error": str(data["x"])}
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed forwarded client response")
            return
        if isinstance(session_key, str) and isinstance(message, dict):
            self._resolve(session_key, request_id, message)

    def _resolve(self, session_key: str, request_id: Any, message: dict[str, Any]) -> bool:
        if not isinstance(request_id, str | int):
            return False
        future = self._pending.get((session_key, request_id))
        if future is None:
            return False
        if not future.done():
            future.set_result(message)
        return True
