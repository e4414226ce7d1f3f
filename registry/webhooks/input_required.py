"""The webhook "input required" answer: a tool that needs the user or the model mid-call.

A webhook (or built-in hook) may answer, instead of a result::

    {"input_required": {
        "requests": {"<key>": {"method": "elicitation/create" | "sampling/createMessage" | "roots/list",
                               "params": {...}}},
        "state": "<opaque string, optional>"}}

The registry then gets the answers (from the client, in whichever way the client's protocol era
allows) and calls the webhook again with ``"input_responses": {"<key>": <result>}`` and
``"state"`` added to its usual body. This module only parses and bounds that answer; what to do
with it is the MCP layer's business. Everything here comes from a server the registry does not
control and is sent on to an agent, so it is validated and bounded, and a refusal says which
bound (an :class:`~registry.webhooks.results.InvalidResult`, which becomes an ``isError`` result).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from .results import InvalidResult

__all__ = [
    "INPUT_METHODS",
    "MAX_INPUT_PARAMS_BYTES",
    "MAX_INPUT_REQUESTS",
    "MAX_STATE_CHARS",
    "InputRequest",
    "InputRequired",
    "is_input_required",
    "parse_input_required",
    "required_capability",
]

#: The client methods a hook may ask for, and the client capability each needs.
INPUT_METHODS: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
#: Most input requests in one answer.
MAX_INPUT_REQUESTS: Final = 8
#: Largest ``params`` of all requests of one answer together (serialised JSON bytes).
MAX_INPUT_PARAMS_BYTES: Final = 64 * 1024
#: Longest ``state`` a hook may hand over (it travels to the client and back).
MAX_STATE_CHARS: Final = 8 * 1024
_KEY_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ELICITATION_MODES: Final = frozenset({"form", "url"})


@dataclass(frozen=True, slots=True)
class InputRequest:
    method: str
    params: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params}


@dataclass(frozen=True, slots=True)
class InputRequired:
    """A hook's request for input: keyed requests (in the hook's order) and its opaque state."""

    requests: dict[str, InputRequest]
    state: str | None = None

    def needed_capabilities(self) -> dict[str, dict[str, Any]]:
        """The client capabilities these requests need, keyed like ``ClientCapabilities``."""
        needed: dict[str, dict[str, Any]] = {}
        for request in self.requests.values():
            capability, detail = required_capability(request)
            entry = needed.setdefault(capability, {})
            if detail is not None:
                entry[detail] = {}
        return needed


def required_capability(request: InputRequest) -> tuple[str, str | None]:
    """(capability, sub-capability or None): ``elicitation`` in URL mode needs ``elicitation.url``."""
    capability = INPUT_METHODS[request.method]
    if request.method == "elicitation/create" and request.params.get("mode") == "url":
        return capability, "url"
    return capability, None


def is_input_required(value: Any) -> bool:
    """Whether a decoded hook answer is an input request rather than a result."""
    return isinstance(value, dict) and "input_required" in value and "content" not in value


def _check_params(key: str, method: str, params: dict[str, Any]) -> None:
    where = f"input_required.requests.{key}.params"
    if method == "elicitation/create":
        message = params.get("message")
        if not isinstance(message, str) or not message:
            raise InvalidResult(f"{where}.message must be a non-empty string")
        mode = params.get("mode", "form")
        if mode not in _ELICITATION_MODES:
            raise InvalidResult(f'{where}.mode must be "form" or "url"')
        if mode == "url":
            if not isinstance(params.get("url"), str):
                raise InvalidResult(f"{where}.url must be a string in URL mode")
            return
        schema = params.get("requestedSchema")
        if (
            not isinstance(schema, dict)
            or schema.get("type") != "object"
            or not isinstance(schema.get("properties"), dict)
        ):
            raise InvalidResult(f'{where}.requestedSchema must be an object schema ("type": "object", "properties")')
    elif method == "sampling/createMessage":
        messages = params.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise InvalidResult(f"{where}.messages must be a non-empty list of messages")
        tokens = params.get("maxTokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise InvalidResult(f"{where}.maxTokens must be a positive integer")


def parse_input_required(value: dict[str, Any]) -> InputRequired:
    """The validated input request in a hook's ``{"input_required": ...}`` answer."""
    body = value.get("input_required")
    if not isinstance(body, dict):
        raise InvalidResult("'input_required' must be an object with 'requests'")
    requests = body.get("requests")
    if not isinstance(requests, dict) or not requests:
        raise InvalidResult("'input_required.requests' must be a non-empty object")
    if len(requests) > MAX_INPUT_REQUESTS:
        raise InvalidResult(f"'input_required' has {len(requests)} requests; at most {MAX_INPUT_REQUESTS}")
    parsed: dict[str, InputRequest] = {}
    for key, request in requests.items():
        if not _KEY_RE.fullmatch(key):
            raise InvalidResult(f"input request key {key[:64]!r} must be 1-64 letters, digits, '_', '.' or '-'")
        if not isinstance(request, dict):
            raise InvalidResult(f"input_required.requests.{key} must be an object")
        method = request.get("method")
        if method not in INPUT_METHODS:
            raise InvalidResult(
                f"input_required.requests.{key}.method must be one of {', '.join(INPUT_METHODS)}, not {method!r:.80}"
            )
        params = request.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidResult(f"input_required.requests.{key}.params must be an object")
        _check_params(key, method, params)
        parsed[key] = InputRequest(method, params)
    size = len(json.dumps([r.params for r in parsed.values()], separators=(",", ":")).encode())
    if size > MAX_INPUT_PARAMS_BYTES:
        raise InvalidResult(f"input request params take {size} bytes; at most {MAX_INPUT_PARAMS_BYTES}")
    state = body.get("state")
    if state is not None:
        if not isinstance(state, str):
            raise InvalidResult("'input_required.state' must be a string")
        if len(state) > MAX_STATE_CHARS:
            raise InvalidResult(f"'input_required.state' has {len(state)} characters; at most {MAX_STATE_CHARS}")
    return InputRequired(parsed, state)
