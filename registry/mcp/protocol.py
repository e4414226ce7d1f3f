"""JSON-RPC 2.0 framing and the MCP constants every transport and handler shares."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from registry import boundedjson
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

# Protocol versions, oldest first. The newest is answered when a client asks for one we lack.
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]
#: Versions that allowed JSON-RPC batches (removed in 2025-06-18).
BATCH_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})
#: Stateless revisions (no initialize, no sessions): every request carries its version in ``_meta``.
MODERN_VERSIONS = ("2026-07-28",)
#: Every version this server speaks, for ``server/discover`` and -32022's ``supported`` list.
ALL_VERSIONS = (*SUPPORTED_VERSIONS, *MODERN_VERSIONS)

#: Per-request ``_meta`` keys of the stateless revisions.
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002
REQUEST_CANCELLED = -32800
#: 2026-07-28: an HTTP header disagrees with the body (or is missing).
HEADER_MISMATCH = -32020
#: 2026-07-28: the request needs a client capability the request's ``_meta`` does not declare.
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
#: 2026-07-28: the requested protocol version is not served (``data``: supported, requested).
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: The catalog's database cannot be reached right now; the client may retry (server-defined code).
CATALOG_UNAVAILABLE = -32003
CATALOG_UNAVAILABLE_MESSAGE = "the catalog is temporarily unavailable (its database cannot be reached); retry shortly"
#: The same code when a write is refused because the database or its disk is full (reads still work).
CATALOG_FULL_MESSAGE = (
    "the catalog cannot store this right now: its database or disk is full (reads keep working); "
    "retry after an operator has freed space"
)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
LOG_SEVERITY = {level: index for index, level in enumerate(LOG_LEVELS)}

RequestId = str | int


class JsonRpcError(Exception):
    """A protocol fault, answered as a JSON-RPC error object (never used for tool failures)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def catalog_unavailable_error(full: bool = False) -> JsonRpcError:
    """-32003: the catalog's database cannot be reached (retry shortly), or, ``full``, it refused
    a write because it or its disk is full (retry once space is freed)."""
    return JsonRpcError(CATALOG_UNAVAILABLE, CATALOG_FULL_MESSAGE if full else CATALOG_UNAVAILABLE_MESSAGE)


@dataclass(slots=True)
class Message:
    """One incoming JSON-RPC message: a request (has id and method), notification (method only) or
    response. (Not frozen: one is made per message, and a frozen dataclass's ``__init__`` costs
    three times as much; nothing changes one after parsing.)"""

    raw: dict[str, Any]
    method: str | None
    id: RequestId | None
    params: dict[str, Any]

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.id is not None

    @property
    def is_notification(self) -> bool:
        return self.method is not None and self.id is None

    @property
    def is_response(self) -> bool:
        return self.method is None


_ID_TYPES = (str, int)


def parse_message(item: Any, limits: Limits = DEFAULT_LIMITS) -> Message:
    """Validate one JSON-RPC message; raise ``JsonRpcError(INVALID_REQUEST)`` with the id when known.

    A method name over ``limits.method_chars`` is refused here, by its length only: no answer or
    log line ever carries it (it would echo whatever the caller sent, however large).
    """
    if not isinstance(item, dict):
        raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC message must be an object")
    raw_id = item.get("id")
    valid_id = raw_id if type(raw_id) in _ID_TYPES else None  # exact types: bool is an int subclass
    if item.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'missing or wrong "jsonrpc" (must be "2.0")', {"id": valid_id})
    method = item.get("method")
    if method is None:
        if "result" in item or "error" in item:
            if valid_id is None:
                raise JsonRpcError(INVALID_REQUEST, "a response needs a string or integer id")
            return Message(item, None, valid_id, {})
        raise JsonRpcError(INVALID_REQUEST, 'a message needs "method" (request/notification) or "result"/"error"')
    if not isinstance(method, str) or not method:
        raise JsonRpcError(INVALID_REQUEST, '"method" must be a non-empty string', {"id": valid_id})
    if len(method) > limits.method_chars:
        too_long = LimitExceeded("method_chars", f'"method" longer than {limits.method_chars} characters')
        raise JsonRpcError(INVALID_REQUEST, str(too_long), {"id": valid_id})
    if "id" in item and valid_id is None:
        raise JsonRpcError(INVALID_REQUEST, '"id" must be a string or an integer (not null)')
    params = item.get("params")
    if params is None:
        params = {}
    elif not isinstance(params, dict):
        raise JsonRpcError(INVALID_PARAMS, '"params" must be an object', {"id": valid_id})
    return Message(item, method, valid_id, params)


def invalid_message_answer(exc: JsonRpcError) -> dict[str, Any]:
    """The error answer to a message ``parse_message`` refused, carrying the message's id when it had one."""
    data = exc.data if isinstance(exc.data, dict) else {}
    return error_message(data.get("id"), JsonRpcError(exc.code, exc.message))


def result_message(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: RequestId | None, error: JsonRpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def dumps(message: Any) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:  # e.g. an integer beyond 64 bits: the standard library copes
        pass
    if isinstance(message, dict) and "id" in message:
        # The usual cause is a client's request id; the answer may hold pre-encoded fragments
        # (list items), which only orjson can write, so encode the id alone the other way.
        try:
            return orjson.dumps({**message, "id": orjson.Fragment(json.dumps(message["id"]).encode())})
        except TypeError:
            pass
    return json.dumps(message, separators=(",", ":")).encode()  # ASCII: a lone surrogate cannot be UTF-8


def loads(data: bytes, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse a JSON body within ``limits.json_depth``/``json_elements`` (see registry/boundedjson.py).

    Raises ``JsonRpcError(PARSE_ERROR)`` naming the limit for a document over one, before parsing
    it, and ``ValueError`` for invalid JSON. Never ``RecursionError``, however deep the nesting.
    """
    try:
        return boundedjson.loads(data, limits)
    except boundedjson.JsonStructureError as exc:
        raise JsonRpcError(PARSE_ERROR, f"Parse error: {exc}") from None


def check_batch(payload: Any, limits: Limits = DEFAULT_LIMITS) -> list[Any]:
    """The messages of a parsed body: a batch's items, or the one message. A batch over
    ``limits.batch_messages`` raises ``JsonRpcError(INVALID_REQUEST)`` naming the limit; so does an
    empty one (JSON-RPC 2.0)."""
    if not isinstance(payload, list):
        return [payload]
    if not payload:
        raise JsonRpcError(INVALID_REQUEST, "empty batch")
    if len(payload) > limits.batch_messages:
        too_long = LimitExceeded(
            "batch_messages", f"batch of {len(payload)} messages; at most {limits.batch_messages} are accepted"
        )
        raise JsonRpcError(INVALID_REQUEST, str(too_long))
    return payload


def negotiate_version(requested: Any) -> str:
    return requested if isinstance(requested, str) and requested in SUPPORTED_VERSIONS else LATEST_VERSION
