"""Webhook tools that ask the user or the model mid-call, in both protocol eras.

A webhook answers ``{"input_required": {"requests": {...}, "state": ...}}`` (see
:mod:`registry.webhooks.input_required`); the registry gets the answers and calls it again with
``input_responses`` and ``state``. How it gets the answers depends on the era:

* **2026-07-28** (stateless, ``ctx.modern``): the call ends with an ``InputRequiredResult``
  (``resultType: "input_required"``, ``inputRequests``, ``requestState``) and the client retries
  the same ``tools/call`` with ``inputResponses`` and the ``requestState``. The registry keeps
  nothing between the two: ``requestState`` is its own token wrapping the webhook's state,
  HMAC-SHA256-signed with a key derived from the registry's secret key and bound to the tool
  (name, version, label), the caller (principal, token) and a digest of the arguments, with an
  expiry and the round number. A client can read it (webhooks must not put secrets in their
  state) but cannot forge, alter or replay it: each state answers one retry, recorded in the
  database every replica shares (:mod:`registry.mcp.spent_states`).
* **session era**: the registry sends each request to the client itself, as a server-to-client
  request related to the call (``ctx.ask``, :mod:`registry.mcp.client_requests`), and continues
  when they are answered.

Both are bounded: at most :data:`MAX_ROUNDS` webhook requests for input per call and
:data:`MAX_TOTAL_S` from the first call to the last. A client that lacks a capability a request
needs is never sent that request: -32021 in the stateless era, an ``isError`` result in the
session era.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from registry.mcp.client_requests import AskFailed
from registry.mcp.protocol import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, JsonRpcError
from registry.webhooks import InputRequest, InputRequired, WebhookAnswer, error_result

__all__ = [
    "MAX_ROUNDS",
    "MAX_TOTAL_S",
    "Binding",
    "RequestStateSigner",
    "input_required_result",
    "missing_capabilities",
    "parse_input_responses",
    "run_stateless",
    "run_with_session",
]

#: Most times one tool call may ask for input (webhook rounds beyond the first).
MAX_ROUNDS: Final = 10
#: Longest a tool call may take from its first webhook call to its last, answers included.
MAX_TOTAL_S: Final = 900.0
#: How long a ``requestState`` stays valid after it is issued.
STATE_TTL_S: Final = 600.0
#: Longest ``requestState`` accepted (one this server made is far shorter).
MAX_REQUEST_STATE_CHARS: Final = 16 * 1024
#: Most ``inputResponses`` entries accepted in one retry.
MAX_INPUT_RESPONSES: Final = 16
#: The purpose the signing key is derived for (changing it invalidates every outstanding state).
KEY_PURPOSE: Final = "mcp-registry/requestState/v1"
_ELICIT_ACTIONS: Final = frozenset({"accept", "decline", "cancel"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """A short digest of the arguments, so a state cannot be replayed with other arguments."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _b64(hashlib.sha256(canonical.encode()).digest()[:16])


@dataclass(frozen=True, slots=True)
class Binding:
    """What a ``requestState`` is valid for: this call of this tool version by this caller."""

    kind: str
    name: str
    version: int
    label: str
    principal: str
    token_id: int | None
    arguments: str

    def as_list(self) -> list[Any]:
        return [self.kind, self.name, self.version, self.label, self.principal, self.token_id, self.arguments]


@dataclass(frozen=True, slots=True)
class RoundState:
    """A verified ``requestState``: which round, when the call began, what was asked, the hook's state."""

    round: int
    started: float
    requested: dict[str, str]
    state: str | None
    #: When the token carrying it expires (epoch seconds; 0 for a state not yet signed).
    expires: float = 0.0


class RequestStateSigner:
    """Makes and checks ``requestState`` tokens: ``base64url(JSON) "." base64url(HMAC-SHA256)``."""

    def __init__(self, key: bytes, *, ttl_s: float = STATE_TTL_S, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self.ttl_s = ttl_s
        self._clock = clock

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def sign(self, binding: Binding, round_state: RoundState) -> str:
        payload = {
            "b": binding.as_list(),
            "r": round_state.round,
            "o": int(round_state.started),
            "e": int(self._clock() + self.ttl_s),
            "q": round_state.requested,
            "s": round_state.state,
            # Unique per state: two calls alike in the same second are two states, each spent once.
            "n": _b64(secrets.token_bytes(12)),
        }
        body = _b64(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
        return f"{body}.{self._mac(body)}"

    def verify(self, token: Any, binding: Binding) -> RoundState:
        """The state ``token`` carries; -32602 if it was not made by this server for this call or
        has expired."""
        if not isinstance(token, str) or len(token) > MAX_REQUEST_STATE_CHARS:
            raise JsonRpcError(INVALID_PARAMS, "requestState must be a string this server issued")
        body, _, mac = token.partition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            raise JsonRpcError(INVALID_PARAMS, "requestState integrity check failed")
        try:
            payload = json.loads(_unb64(body))
            bound, round_, started, expires = payload["b"], payload["r"], payload["o"], payload["e"]
            requested, state = payload["q"], payload["s"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise JsonRpcError(INVALID_PARAMS, "requestState integrity check failed") from None
        if bound != binding.as_list():
            raise JsonRpcError(INVALID_PARAMS, "requestState belongs to another call (tool, arguments or caller)")
        if self._clock() > expires:
            raise JsonRpcError(INVALID_PARAMS, "requestState has expired; call the tool again without it")
        return RoundState(int(round_), float(started), dict(requested), state, float(expires))


def parse_input_responses(params: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The retry's ``inputResponses`` (None when absent); -32602 for a malformed one."""
    if "inputResponses" not in params:
        return None
    responses = params["inputResponses"]
    if not isinstance(responses, dict):
        raise JsonRpcError(INVALID_PARAMS, '"inputResponses" must be an object of results keyed like inputRequests')
    if len(responses) > MAX_INPUT_RESPONSES:
        raise JsonRpcError(
            INVALID_PARAMS, f'"inputResponses" has {len(responses)} entries; at most {MAX_INPUT_RESPONSES}'
        )
    for key, value in responses.items():
        if not isinstance(value, dict):
            raise JsonRpcError(INVALID_PARAMS, f'inputResponses["{key[:64]}"] must be an object (the client\'s result)')
    return responses


def check_response(key: str, method: str, value: dict[str, Any]) -> None:
    """-32602 unless ``value`` has the shape of ``method``'s result."""
    where = f'inputResponses["{key[:64]}"]'
    if method == "elicitation/create":
        if value.get("action") not in _ELICIT_ACTIONS:
            raise JsonRpcError(INVALID_PARAMS, f'{where}.action must be "accept", "decline" or "cancel"')
        if "content" in value and value["content"] is not None and not isinstance(value["content"], dict):
            raise JsonRpcError(INVALID_PARAMS, f"{where}.content must be an object")
    elif method == "sampling/createMessage":
        if not isinstance(value.get("role"), str) or not isinstance(value.get("content"), dict | list):
            raise JsonRpcError(INVALID_PARAMS, f"{where} must be a CreateMessageResult (role, content, model)")
    elif method == "roots/list":
        roots = value.get("roots")
        if not isinstance(roots, list) or not all(isinstance(r, dict) and isinstance(r.get("uri"), str) for r in roots):
            raise JsonRpcError(INVALID_PARAMS, f"{where}.roots must be a list of roots with a uri")


def _has(capabilities: Mapping[str, Any], capability: str, detail: str | None) -> bool:
    declared = capabilities.get(capability)
    if not isinstance(declared, dict):
        return False
    if capability != "elicitation":
        return True
    if detail == "url":
        return "url" in declared
    return not declared or "form" in declared  # {} means form only


def missing_capabilities(request: InputRequired, capabilities: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The capabilities ``request`` needs that ``capabilities`` lacks, keyed like ClientCapabilities."""
    missing: dict[str, dict[str, Any]] = {}
    for capability, details in request.needed_capabilities().items():
        wanted: list[str | None] = [*details] or [None]
        for detail in wanted:
            if not _has(capabilities, capability, detail):
                entry = missing.setdefault(capability, {})
                if detail is not None:
                    entry[detail] = {}
    return missing


def capability_error(missing: dict[str, dict[str, Any]], what: str) -> JsonRpcError:
    names = " and ".join(sorted(missing))
    return JsonRpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} requires the {names} capability, which this request's clientCapabilities do not declare",
        {"requiredCapabilities": missing},
    )


def capability_result(missing: dict[str, dict[str, Any]], what: str) -> dict[str, Any]:
    names = " and ".join(sorted(missing))
    return error_result(
        f"{what} needs to ask the client ({names}), but this client did not declare the {names} "
        "capability when it initialized"
    )


def input_required_result(requests: Mapping[str, InputRequest], request_state: str) -> dict[str, Any]:
    return {
        "resultType": "input_required",
        "inputRequests": {key: request.as_dict() for key, request in requests.items()},
        "requestState": request_state,
    }


def too_many_rounds(what: str) -> dict[str, Any]:
    return error_result(f"{what} asked for input more than {MAX_ROUNDS} times; the call was stopped")


def out_of_time(what: str) -> dict[str, Any]:
    return error_result(f"{what} did not finish within {MAX_TOTAL_S:g} s of asking for input; the call was stopped")


#: ``await step(input_responses, state)``: one webhook call (None, None on the first).
Step = Callable[[dict[str, Any] | None, str | None], Awaitable[WebhookAnswer]]
#: ``await spend(request_state, expires)``: record a state as used (False: it already was), in
#: the database every replica shares (registry/mcp/spent_states.py).
Spend = Callable[[str, float], Awaitable[bool]]
#: The -32602 message for a ``requestState`` sent a second time.
REPLAYED_MESSAGE: Final = (
    "requestState was already used: each one answers one retry; retry with the requestState of the "
    "latest answer, or call the tool again without one"
)
#: ``await ask(method, params)``: the client's result (session era).
AskFn = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def run_stateless(
    step: Step,
    params: Mapping[str, Any],
    capabilities: Mapping[str, Any],
    binding: Binding,
    signer: RequestStateSigner,
    what: str,
    spend: Spend,
) -> dict[str, Any]:
    """One 2026-07-28 ``tools/call``: the result, or an ``InputRequiredResult`` the client answers
    by retrying with ``inputResponses`` and the ``requestState``.

    A retry's state is spent (``spend``) once it has passed every check and just before the
    webhook is called: a state answers one retry, on whichever replica, so a replayed answer
    never runs the webhook twice and rounds cannot be restarted past :data:`MAX_ROUNDS`."""
    responses = parse_input_responses(params)
    token = params.get("requestState")
    round_state = RoundState(0, time.time(), {}, None)
    if token is not None:
        round_state = signer.verify(token, binding)
        if time.time() - round_state.started > MAX_TOTAL_S:
            return out_of_time(what)
        # Only the answers to what was asked go to the webhook; unknown keys are ignored.
        answers = {k: v for k, v in (responses or {}).items() if k in round_state.requested}
        for key, value in answers.items():
            check_response(key, round_state.requested[key], value)
        responses = answers
        if not await spend(token, round_state.expires):
            raise JsonRpcError(INVALID_PARAMS, REPLAYED_MESSAGE)
    answer = await step(responses, round_state.state if token is not None else None)
    if not isinstance(answer, InputRequired):
        return answer
    missing = missing_capabilities(answer, capabilities)
    if missing:
        raise capability_error(missing, what)
    if round_state.round >= MAX_ROUNDS:
        return too_many_rounds(what)
    requested = {key: request.method for key, request in answer.requests.items()}
    next_state = RoundState(round_state.round + 1, round_state.started, requested, answer.state)
    return input_required_result(answer.requests, signer.sign(binding, next_state))


async def run_with_session(step: Step, ask: AskFn | None, capabilities: Mapping[str, Any], what: str) -> dict[str, Any]:
    """One session-era ``tools/call``: each request the webhook makes is sent to the client
    (``ask``) and the webhook is called again with the answers, until it returns a result."""
    responses: dict[str, Any] | None = None
    state: str | None = None
    try:
        async with asyncio.timeout(MAX_TOTAL_S):
            for round_ in range(MAX_ROUNDS + 1):
                answer = await step(responses, state)
                if not isinstance(answer, InputRequired):
                    return answer
                if round_ >= MAX_ROUNDS:
                    return too_many_rounds(what)
                if ask is None:
                    return error_result(
                        f"{what} needs to ask the client, which this connection cannot carry "
                        "(a POST that accepts only application/json has no stream for requests)"
                    )
                missing = missing_capabilities(answer, capabilities)
                if missing:
                    return capability_result(missing, what)
                responses = {}
                for key, request in answer.requests.items():
                    try:
                        responses[key] = await ask(request.method, request.params)
                    except AskFailed as exc:
                        return error_result(f"{what}: {exc}")
                state = answer.state
    except TimeoutError:
        return out_of_time(what)
    return too_many_rounds(what)  # not reached: the loop returns


#: The input request key under which a prompt asks for its missing required arguments.
PROMPT_ARGUMENTS_KEY: Final = "prompt_arguments"


def prompt_arguments(
    name: str,
    declared: list[Any],
    arguments: dict[str, Any],
    params: Mapping[str, Any],
    capabilities: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A stateless ``prompts/get``'s arguments, completed from the user's answer when the retry
    carries one; and, while required ones are still missing and the client can elicit, the
    ``InputRequiredResult`` asking for them (else None: rendering refuses the missing ones).
    ``declared`` are the prompt's arguments (``name``, ``description``, ``required``)."""
    responses = parse_input_responses(params) or {}
    answer = responses.get(PROMPT_ARGUMENTS_KEY)
    merged = dict(arguments)
    if answer is not None:
        check_response(PROMPT_ARGUMENTS_KEY, "elicitation/create", answer)
        content = answer.get("content") if answer.get("action") == "accept" else None
        known = {a.name for a in declared}
        for key, value in (content or {}).items():
            if key in known and key not in merged and isinstance(value, str):
                merged[key] = value
    missing = [a for a in declared if a.required and a.default is None and a.name not in merged]
    if not missing or not _has(capabilities, "elicitation", None):
        return merged, None
    properties = {
        a.name: {"type": "string", **({"description": a.description} if a.description else {})} for a in missing
    }
    request = InputRequest(
        "elicitation/create",
        {
            "message": f"Prompt {name} needs: {', '.join(a.name for a in missing)}",
            "requestedSchema": {"type": "object", "properties": properties, "required": [a.name for a in missing]},
        },
    )
    return merged, {"resultType": "input_required", "inputRequests": {PROMPT_ARGUMENTS_KEY: request.as_dict()}}
