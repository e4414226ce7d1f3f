"""Calling a tool's webhook and turning the answer into an MCP ``CallToolResult``.

:func:`call_webhook` is the one entry point. Everything that can go wrong on the far side of the
call (timeouts, refused connections, SSRF refusals, HTTP errors, bad or oversized bodies) comes
back as an ``isError`` result the model can read, because to MCP a failing tool is a tool result,
not a protocol error. Only cancellation propagates: the MCP server cancels the task running this
call when the client sends ``notifications/cancelled``, and the HTTP response is closed on the way
out.

Error messages name at most the destination host: URLs, header values and secrets can all be
credentials, resolved addresses map the internal network, and results are shown to models and
end users (see :mod:`.messages`). Bodies are read with a bound that holds while they arrive,
gzip included (see :mod:`.bodies`), and progress and log notifications are relayed at a bounded
rate (see :mod:`.relay`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import httpx

from registry.limits import DEFAULT_LIMITS

from ._types import LOG_LEVELS, JSONObject, LogCallback, ProgressCallback
from .bodies import ACCEPT_ENCODING, BodyError, BodyTooLarge, iter_body, read_body
from .builtin import BUILTINS, HookContext, HookError, builtin_name
from .caps import CapReached
from .headers import InvalidHeader, configured_headers
from .input_required import InputRequired, is_input_required, parse_input_required
from .messages import host_for_messages, transport_failure
from .outbound import (
    ConnectFailed,
    InvalidRequest,
    InvalidURL,
    OutboundClient,
    OutboundError,
    OutboundResponse,
    OutboundTimeout,
)
from .relay import NotificationRelay
from .results import InvalidResult, error_result, to_call_tool_result
from .signing import SIGNATURE_HEADER, sign
from .ssrf import ForbiddenDestination

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "WebhookAnswer", "WebhookTarget", "call_webhook"]

#: What one webhook call ends with: a ``CallToolResult`` dict, or a request for input.
WebhookAnswer = JSONObject | InputRequired

#: Bodies above this (after content decoding) are refused: results end up in a model's context
#: and in memory here, so an unbounded answer is a denial-of-service vector.
DEFAULT_MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024

USER_AGENT: Final = "mcp-registry"
_ACCEPT: Final = "application/json, application/x-ndjson"
_NDJSON_TYPES: Final = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl"})
_SNIPPET_CHARS: Final = 500
_HTTP_SCHEMES: Final = frozenset({"http", "https"})
_TOKEN_RE: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

log = logging.getLogger("registry.webhooks")


@dataclass(frozen=True)
class WebhookTarget:
    """Where and how to call one tool. ``headers`` and ``secret`` are kept out of ``repr`` since
    they are usually credentials."""

    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    timeout_s: float = 30.0
    secret: str | None = field(default=None, repr=False)


class _Failure(Exception):
    """Internal: ends the call with an ``isError`` result carrying this (already safe) message."""


def _fail(message: str) -> NoReturn:
    raise _Failure(message)


def _loads(data: bytes | str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, which are not JSON and would not re-encode."""

    def reject(constant: str) -> NoReturn:
        raise ValueError(f"{constant} is not valid JSON")

    return json.loads(data, parse_constant=reject)


def _encode_payload(payload: Mapping[str, Any]) -> bytes:
    try:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        _fail(f"tool arguments cannot be sent as JSON: {exc}")
    return text.encode("utf-8")


# --------------------------------------------------------------------------- entry point


async def call_webhook(
    target: WebhookTarget,
    payload: Mapping[str, Any],
    *,
    client: OutboundClient,
    caller: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_log: LogCallback | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    notifications_per_second: float = DEFAULT_LIMITS.progress_per_second,
    hook_services: Any = None,
) -> WebhookAnswer:
    """Call ``target`` with ``payload`` as its JSON body: a ``CallToolResult`` dict, or the hook's
    request for input (an :class:`~registry.webhooks.input_required.InputRequired`, validated and
    bounded; an invalid one is an ``isError`` result), which the caller answers by calling again
    with ``input_responses`` and ``state`` in the payload.

    ``client`` should come from :func:`~registry.webhooks.outbound.make_guarded_client`: the SSRF
    guard and the outbound caps live there, not here; ``caller``
    (:func:`~registry.webhooks.caps.caller_key`) is whose call it is, for the per-caller cap. A
    call past a cap is an ``isError`` result naming the limit. Neither is used for ``builtin://``
    targets, which get ``hook_services`` (``HookContext.services``) instead.

    The whole call, streaming included, is bounded by ``target.timeout_s``. Responses:

    * ``application/x-ndjson``: one JSON object per line; ``{"progress": n, "total"?, "message"?}``
      awaits ``on_progress``, ``{"log": {"level", "data"}}`` awaits ``on_log``, and
      ``{"result": ...}`` (or ``{"input_required": ...}``) ends the call with that answer (mapped
      like a JSON body). Other objects are ignored, for forward compatibility.
    * a JSON ``CallToolResult`` (an object with a ``content`` list) is passed through, any other
      JSON value is wrapped as text (and ``structuredContent`` if an object), and an empty body
      (e.g. 204) is a success with no content.

    Progress and log notifications reach the callbacks at most ``notifications_per_second``
    times a second, progress coalesced to its latest value and surplus log messages dropped with
    a note (see :class:`~registry.webhooks.relay.NotificationRelay`); the final progress value is
    always delivered when the call returns.

    Exceptions raised by ``on_progress``/``on_log`` propagate for HTTP targets (they are the
    caller's), as does ``asyncio.CancelledError``; everything else becomes an ``isError`` result.
    """
    relay = NotificationRelay(on_progress, on_log, notifications_per_second)
    try:
        result = await _call(target, payload, client, caller, relay, max_response_bytes, hook_services)
    finally:
        await relay.aclose()
    await relay.finish()
    return result


async def _call(
    target: WebhookTarget,
    payload: Mapping[str, Any],
    client: OutboundClient,
    caller: str | None,
    relay: NotificationRelay,
    max_response_bytes: int,
    hook_services: Any = None,
) -> WebhookAnswer:
    name = builtin_name(target.url)

    def what() -> str:
        return f"built-in hook {name!r}" if name is not None else f"webhook call to {host()}"

    def host() -> str:  # only for failures: a successful call need not parse its URL again
        return host_for_messages(target.url)

    try:
        body = _encode_payload(payload)
        async with asyncio.timeout(target.timeout_s):
            if name is not None:
                return await _call_builtin(name, body, relay, hook_services)
            return await _call_http(target, body, client, caller, relay, max_response_bytes)
    except _Failure as exc:
        return error_result(str(exc))
    except (TimeoutError, OutboundTimeout):
        return error_result(f"{what()} timed out after {target.timeout_s:g} s")
    except CapReached as exc:  # nothing was sent
        return error_result(f"webhook call to {host()} was not made: {exc}")
    except ForbiddenDestination as exc:
        log.warning("webhook call refused: %s", exc)  # the operator's view, with the address
        return error_result(f"webhook call refused: {exc.public_message}")
    except ConnectFailed as exc:
        return error_result(f"could not connect to webhook host {host()}: {transport_failure(exc)}")
    except InvalidRequest:
        return error_result(f"webhook request to {host()} could not be sent: invalid request")
    except InvalidURL:
        return error_result("webhook URL is not a valid URL")
    except BodyError as exc:
        return error_result(f"webhook response from {host()} could not be read: {exc}")
    except OutboundError as exc:
        return error_result(f"webhook call to {host()} failed: {transport_failure(exc)}")


# --------------------------------------------------------------------------- built-in hooks


async def _call_builtin(name: str, body: bytes, relay: NotificationRelay, services: Any) -> WebhookAnswer:
    hook = BUILTINS.get(name)
    if hook is None:
        _fail(f"unknown built-in hook {name!r}")
    # Decode the exact bytes an HTTP webhook would get, so built-ins see the same payload and
    # cannot mutate the caller's dict.
    payload = _loads(body)
    # Hooks get the tool arguments; the rest of the envelope (tool, request_id, session) is routing,
    # and the input round trip's parts (client capabilities, answers, state) come in the context.
    envelope = payload if isinstance(payload, dict) and "tool" in payload else {}
    arguments = payload.get("arguments", {}) if envelope else payload
    capabilities = envelope.get("client_capabilities")
    responses = envelope.get("input_responses")
    state = envelope.get("state")
    ctx = HookContext(
        relay.progress,
        relay.log,
        client_capabilities=capabilities if isinstance(capabilities, dict) else {},
        input_responses=responses if isinstance(responses, dict) else None,
        state=state if isinstance(state, str) else None,
        services=services,
    )
    try:
        value = await hook(arguments, ctx)
    except HookError as exc:
        _fail(str(exc))
    except Exception as exc:
        _fail(f"built-in hook {name!r} failed: {type(exc).__name__}: {exc}")
    if not isinstance(value, dict):
        _fail(f"built-in hook {name!r} returned {type(value).__name__}, expected an object")
    try:
        json.dumps(value, allow_nan=False)
        return _answer(value)
    except (TypeError, ValueError, RecursionError) as exc:
        _fail(f"built-in hook {name!r} returned an invalid result: {exc}")


# --------------------------------------------------------------------------- HTTP


def _request_headers(target: WebhookTarget, body: bytes) -> list[tuple[str, str]]:
    try:
        headers = configured_headers(target.headers, "webhook")
    except InvalidHeader as exc:
        _fail(str(exc))
    headers += [
        ("Content-Type", "application/json"),
        ("Accept", _ACCEPT),
        ("Accept-Encoding", ACCEPT_ENCODING),
        ("User-Agent", USER_AGENT),
    ]
    if target.secret:
        headers.append((SIGNATURE_HEADER, sign(target.secret, body)))
    return headers


def _check_target(target: WebhookTarget) -> str:
    """The request method, once the target is known to be an HTTP(S) call we can make."""
    try:
        return _checked_method(target.url, target.method)
    except (httpx.InvalidURL, TypeError, ValueError):
        _fail("webhook URL is not a valid URL")


@functools.lru_cache(maxsize=1024)
def _checked_method(url: str, method: str) -> str:
    """Checked once per URL and method, not per call (a catalog calls a few URLs many times)."""
    scheme = httpx.URL(url).scheme
    if scheme not in _HTTP_SCHEMES:
        _fail(f"webhook URL scheme must be http, https or builtin, not {scheme!r}")
    upper = method.upper()
    if not _TOKEN_RE.fullmatch(upper):
        _fail(f"invalid webhook method {method!r}")
    return upper


async def _call_http(
    target: WebhookTarget,
    body: bytes,
    client: OutboundClient,
    caller: str | None,
    relay: NotificationRelay,
    max_bytes: int,
) -> WebhookAnswer:
    method = _check_target(target)
    headers = _request_headers(target, body)
    # ``async with`` closes the response (and so the connection, if unread) on every way out,
    # cancellation included.
    async with client.stream(
        method,
        target.url,
        content=body,
        headers=headers,
        timeout=target.timeout_s,
        caller=caller,
    ) as response:
        if not response.is_success:
            _fail(await _status_message(response))
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            _fail(_too_large(max_bytes))
        media_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type in _NDJSON_TYPES:
            return await _read_ndjson(response, max_bytes, relay)
        raw = await _read_capped(response, max_bytes)
    return _json_body_result(raw, media_type)


def _too_large(max_bytes: int) -> str:
    return f"webhook response is larger than the {max_bytes}-byte limit"


async def _status_message(response: OutboundResponse) -> str:
    message = f"webhook returned HTTP {response.status_code} {response.reason_phrase}".rstrip()
    if response.is_redirect:
        message += " (redirects are not followed)"
    snippet = bytearray()
    try:
        async for chunk in iter_body(response, DEFAULT_MAX_RESPONSE_BYTES):
            snippet += chunk
            if len(snippet) >= _SNIPPET_CHARS * 4:
                break
    except (OutboundError, BodyError):
        pass  # The status is the news; a body that cannot be read just goes unquoted.
    text = " ".join(snippet.decode("utf-8", "replace").split())
    if len(text) > _SNIPPET_CHARS:
        text = text[:_SNIPPET_CHARS] + "…"
    return f"{message}: {text}" if text else message


async def _read_capped(response: OutboundResponse, max_bytes: int) -> bytes:
    try:
        return await read_body(response, max_bytes)
    except BodyTooLarge:
        _fail(_too_large(max_bytes))


def _answer(value: Any) -> WebhookAnswer:
    """A decoded answer as a result or an input request (``InvalidResult`` for a bad one of either)."""
    if is_input_required(value):
        return parse_input_required(value)
    return to_call_tool_result(value)


def _json_body_result(raw: bytes, media_type: str) -> WebhookAnswer:
    if not raw.strip():
        return {"content": [], "isError": False}
    try:
        value = _loads(raw)
    except (ValueError, RecursionError) as exc:
        _fail(f"webhook returned invalid JSON ({media_type or 'no Content-Type'}): {exc}")
    try:
        return _answer(value)
    except InvalidResult as exc:
        what = "input request" if is_input_required(value) else "CallToolResult"
        _fail(f"webhook returned an invalid {what}: {exc}")


# --------------------------------------------------------------------------- NDJSON streaming


async def _read_ndjson(response: OutboundResponse, max_bytes: int, relay: NotificationRelay) -> WebhookAnswer:
    buffer = bytearray()
    line_number = 0
    try:
        async for chunk in iter_body(response, max_bytes):
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                line_number += 1
                result = await _ndjson_event(bytes(buffer[start:end]), line_number, relay.progress, relay.log)
                if result is not None:
                    return result
                start = end + 1
            del buffer[:start]
    except BodyTooLarge:
        _fail(_too_large(max_bytes))
    if buffer.strip():
        result = await _ndjson_event(bytes(buffer), line_number + 1, relay.progress, relay.log)
        if result is not None:
            return result
    _fail("webhook NDJSON stream ended without a result")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def _ndjson_event(
    line: bytes,
    line_number: int,
    on_progress: ProgressCallback | None,
    on_log: LogCallback | None,
) -> WebhookAnswer | None:
    """Act on one NDJSON line; return the mapped result if it was the ``result`` line (or an
    ``input_required`` line)."""
    if not line.strip():
        return None
    try:
        event = _loads(line)
    except (ValueError, RecursionError) as exc:
        _fail(f"webhook NDJSON line {line_number} is not valid JSON: {exc}")
    if not isinstance(event, dict):
        _fail(f"webhook NDJSON line {line_number} is not a JSON object")
    if "result" in event:
        try:
            return to_call_tool_result(event["result"])
        except InvalidResult as exc:
            _fail(f"webhook returned an invalid CallToolResult: {exc}")
    if "input_required" in event:
        try:
            return parse_input_required(event)
        except InvalidResult as exc:
            _fail(f"webhook returned an invalid input request: {exc}")
    if "progress" in event:
        progress, total, message = event["progress"], event.get("total"), event.get("message")
        if not _is_number(progress) or not (total is None or _is_number(total)):
            _fail(f"webhook NDJSON line {line_number}: 'progress' and 'total' must be numbers")
        if not (message is None or isinstance(message, str)):
            _fail(f"webhook NDJSON line {line_number}: 'message' must be a string")
        if on_progress is not None:
            await on_progress(progress, total, message)
    elif "log" in event:
        log = event["log"]
        level = log.get("level") if isinstance(log, dict) else None
        if not isinstance(level, str) or level not in LOG_LEVELS:
            _fail(
                f"webhook NDJSON line {line_number}: 'log' must be an object with a 'level' "
                f"among {', '.join(sorted(LOG_LEVELS))}"
            )
        if on_log is not None:
            await on_log(level, log.get("data"))
    return None
