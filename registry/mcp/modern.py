"""The stateless revisions (2026-07-28): which requests are "modern", and how they are checked.

A modern request carries everything about its caller in ``params._meta`` (version, capabilities,
client info, log level); there is no ``initialize`` and no session. The session era keeps its own
code path untouched; this module holds what only the stateless one needs: the validation ladder
(``_meta`` → headers → version), the header value codec, the HTTP status of each error code, and
the per-request ``ClientState`` built from ``_meta``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from registry.mcp.protocol import (
    ALL_VERSIONS,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LOG_SEVERITY,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    JsonRpcError,
    Message,
)
from registry.mcp.sessions import ClientState

VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
#: The body field each name-bearing method's ``Mcp-Name`` header mirrors.
NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: Headers a client sends once; a repeated one is refused (-32020) rather than guessed at.
SINGLE_HEADERS = (VERSION_HEADER.encode(), METHOD_HEADER.encode(), NAME_HEADER.encode())

#: HTTP status of a modern error answer, by JSON-RPC code (every other code: 200).
ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$", re.DOTALL)
#: Optional whitespace around a field value (RFC 9110 §5.5): spaces and horizontal tabs.
_OWS = " \t"


def has_modern_meta(message: Message) -> bool:
    """The stdio signal (and HTTP's, when the header is missing): ``_meta`` names a protocol
    version and the method is not ``initialize`` (which always opens the session era)."""
    if message.method == "initialize":
        return False
    meta = message.params.get("_meta")
    return isinstance(meta, dict) and META_PROTOCOL_VERSION in meta


def decode_header_value(value: str) -> str | None:
    """An ``Mcp-Name``/``Mcp-Method`` value as the client meant it: whitespace around it trimmed,
    the ``=?base64?…?=`` form decoded. None for a malformed encoding (it then matches nothing)."""
    value = value.strip(_OWS)
    match = _SENTINEL.match(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:  # only the canonical encoding
            return None
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError included
        return None


def check_meta(message: Message) -> dict[str, Any]:
    """Ladder step 1: the request's ``_meta`` has the required fields (else -32602)."""
    meta = message.params.get("_meta")
    if not isinstance(meta, dict):
        raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "_meta" is required in protocol 2026-07-28')
    if not isinstance(meta.get(META_PROTOCOL_VERSION), str):
        raise JsonRpcError(INVALID_PARAMS, f'Invalid params: "_meta" needs "{META_PROTOCOL_VERSION}" (a string)')
    if not isinstance(meta.get(META_CLIENT_CAPABILITIES), dict):
        raise JsonRpcError(
            INVALID_PARAMS, f'Invalid params: "_meta" needs "{META_CLIENT_CAPABILITIES}" (an object, maybe empty)'
        )
    return meta


def check_meta_http(message: Message, headers: Mapping[str, str]) -> dict[str, Any]:
    """Step 1 over HTTP. A request without a usable ``_meta`` whose header names no version served
    here is most likely a session-era client sending a version it was never offered: it is told
    that (-32022, naming its version and ours) rather than to add a ``_meta`` it does not know."""
    try:
        return check_meta(message)
    except JsonRpcError:
        header = headers.get(VERSION_HEADER, "").strip(_OWS)
        if header and header not in MODERN_VERSIONS:
            raise unsupported_version(header) from None
        raise


def unsupported_version(requested: str) -> JsonRpcError:
    return JsonRpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {_short(requested)!r}",
        {"supported": list(ALL_VERSIONS), "requested": requested},
    )


def check_headers(message: Message, meta: dict[str, Any], headers: Mapping[str, str], raw: list[Any]) -> None:
    """Ladder step 2 (HTTP only): the MCP headers agree with the body (else -32020)."""
    for name in SINGLE_HEADERS:
        if sum(1 for key, _ in raw if key.lower() == name) > 1:
            raise JsonRpcError(HEADER_MISMATCH, f"Header mismatch: {name.decode()} sent more than once")
    requested = meta[META_PROTOCOL_VERSION]
    version = headers.get(VERSION_HEADER)
    if version is None:
        raise JsonRpcError(HEADER_MISMATCH, "Header mismatch: missing MCP-Protocol-Version header")
    if version.strip(_OWS) != requested:
        raise JsonRpcError(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version header value {_short(version)!r} "
            f"does not match body value {_short(requested)!r}",
        )
    method_header = headers.get(METHOD_HEADER)
    if method_header is None:
        raise JsonRpcError(HEADER_MISMATCH, "Header mismatch: missing Mcp-Method header")
    assert message.method is not None
    if decode_header_value(method_header) != message.method:
        raise JsonRpcError(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Method header value {_short(method_header)!r} "
            f"does not match body value {_short(message.method)!r}",
        )
    field = NAME_FIELDS.get(message.method)
    if field is None:
        return
    body_value = message.params.get(field)
    if not isinstance(body_value, str):
        return  # the handler answers -32602 for the missing field itself
    name_header = headers.get(NAME_HEADER)
    if name_header is None:
        raise JsonRpcError(HEADER_MISMATCH, f"Header mismatch: missing Mcp-Name header (params.{field})")
    if decode_header_value(name_header) != body_value:
        raise JsonRpcError(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Name header value {_short(name_header)!r} "
            f"does not match body value {_short(body_value)!r}",
        )


def param_headers(input_schema: Any) -> list[tuple[str, str]]:
    """A tool's ``x-mcp-header`` annotations: (argument, header name) for each top-level
    ``string``/``integer``/``boolean`` property that carries one (others are not mirrored)."""
    properties = input_schema.get("properties") if isinstance(input_schema, dict) else None
    if not isinstance(properties, dict):
        return []
    found = []
    for argument, schema in properties.items():
        if isinstance(schema, dict):
            header = schema.get("x-mcp-header")
            if isinstance(header, str) and header and schema.get("type") in ("string", "integer", "boolean"):
                found.append((argument, header))
    return found


def check_param_headers(annotations: list[tuple[str, str]], arguments: Any, headers: Mapping[str, str]) -> None:
    """``Mcp-Param-{Name}`` headers mirror the annotated arguments (SEP-2243): present, and equal
    after decoding, when the argument has a value; absent when it has none. Else -32020."""
    if not isinstance(arguments, dict):
        arguments = {}
    for argument, header in annotations:
        value = arguments.get(argument)
        sent = headers.get("mcp-param-" + header.lower())
        if value is None:
            if sent is not None:
                raise JsonRpcError(
                    HEADER_MISMATCH, f"Header mismatch: Mcp-Param-{header} sent but arguments.{argument} is absent"
                )
            continue
        if sent is None:
            raise JsonRpcError(HEADER_MISMATCH, f"Header mismatch: missing Mcp-Param-{header} (arguments.{argument})")
        if isinstance(value, bool):
            expected = "true" if value else "false"
        elif isinstance(value, int | str):
            expected = str(value)
        else:
            continue  # not a mirrored type: the tool's input validation answers for it
        if decode_header_value(sent) != expected:
            raise JsonRpcError(
                HEADER_MISMATCH,
                f"Header mismatch: Mcp-Param-{header} header value {_short(sent)!r} "
                f"does not match arguments.{argument}",
            )


def check_version(meta: dict[str, Any]) -> str:
    """Ladder step 3: the requested version is a served stateless one (else -32022)."""
    requested: str = meta[META_PROTOCOL_VERSION]
    if requested not in MODERN_VERSIONS:
        raise unsupported_version(requested)
    return requested


def client_state(
    meta: dict[str, Any],
    *,
    label: str,
    principal: str,
    token_id: int | None,
    visible_teams: frozenset[str] | None,
    user: str | None = None,
) -> ClientState:
    """The caller of one modern request, from its ``_meta`` alone (nothing is inferred from
    earlier requests) and the identity the transport authenticated: ``visible_teams`` (None:
    every team) is what it sees besides global entries, so it is required. An invalid log level
    is -32602."""
    log_level = meta.get(META_LOG_LEVEL)
    if log_level is not None and log_level not in LOG_SEVERITY:
        raise JsonRpcError(
            INVALID_PARAMS, f'Invalid params: "{META_LOG_LEVEL}" must be one of: {", ".join(LOG_SEVERITY)}'
        )
    info = meta.get(META_CLIENT_INFO)
    return ClientState(
        label=label,
        principal=principal,
        token_id=token_id,
        user=user,
        visible_teams=visible_teams,
        protocol_version=meta[META_PROTOCOL_VERSION],
        client_info=info if isinstance(info, dict) else {},
        client_capabilities=meta[META_CLIENT_CAPABILITIES],
        log_level=log_level,
        initialized=True,
    )


def error_status(answer: dict[str, Any]) -> int:
    """The HTTP status of a modern answer (a result: 200)."""
    error = answer.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return ERROR_STATUS.get(code, 200) if isinstance(code, int) else 200


def _short(value: str) -> str:
    """At most 128 characters of a caller's value in a message (never echo more)."""
    return value if len(value) <= 128 else value[:128] + "…"
