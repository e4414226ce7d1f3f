"""Running a tool: the one code path behind MCP ``tools/call`` and the tool test calls.

A test run (the admin API's ``POST /api/v1/tools/{name}/test``, the web UI's
``/ui/tools/{name}/test``) must behave exactly as an agent's call: the same argument validation
against ``inputSchema`` (a failure is an ``isError`` result naming the problem, so a model can
correct itself), the same webhook call (signed, under the SSRF guard of the client it is given,
within the tool's timeout, progress and logs relayed at the bounded rate), the same result mapping
and the same ``outputSchema`` check. Every caller goes through :func:`call_tool`; they differ only
in where progress and log notifications go.

The two test surfaces share more than that: :func:`resolve_tool_test` picks the version a test
runs (the ``production`` label's unless told otherwise) and :func:`run_tool_test` runs it with a
fresh guarded client, handing each notification, shaped as the MCP notification an agent would
get, to a callback. The REST endpoint collects them into a list; the web UI streams them to the
browser as they come.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jsonschema.protocols import Validator

from registry.catalog.access import Access
from registry.catalog.schemas import safe_validator
from registry.catalog.specs import ToolSpec
from registry.limits import DEFAULT_LIMITS, Limits
from registry.webhooks import (
    INPUT_METHODS,
    InputRequired,
    IPNetwork,
    LogCallback,
    OutboundClient,
    ProgressCallback,
    WebhookAnswer,
    WebhookTarget,
    call_webhook,
    error_result,
    make_guarded_client,
)

if TYPE_CHECKING:
    from registry.catalog.service import CatalogService

#: At most this many argument problems are named in one result (a model reads them all).
MAX_ARGUMENT_PROBLEMS = 5


class CallableTool(Protocol):
    """What calling a tool needs (the MCP snapshot's entries and :class:`PreparedTool` both fit)."""

    @property
    def input_validator(self) -> Validator: ...

    @property
    def output_validator(self) -> Validator | None: ...

    @property
    def target(self) -> WebhookTarget: ...


@dataclass(frozen=True, slots=True)
class PreparedTool:
    input_validator: Validator
    output_validator: Validator | None
    target: WebhookTarget


def webhook_target(tool: ToolSpec) -> WebhookTarget:
    """Where and how to call ``tool`` (its definition with write-only values decrypted)."""
    hook = tool.webhook
    return WebhookTarget(
        url=hook.url, method=hook.method, headers=dict(hook.headers), timeout_s=hook.timeout_s, secret=hook.secret
    )


def prepare_tool(tool: ToolSpec, limits: Limits = DEFAULT_LIMITS) -> PreparedTool:
    """Validators and call target for ``tool`` (write-only values decrypted), as agents' calls use them."""
    return PreparedTool(
        input_validator=safe_validator(tool.inputSchema, limits),
        output_validator=safe_validator(tool.outputSchema, limits) if tool.outputSchema else None,
        target=webhook_target(tool),
    )


def input_capabilities(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a client's capabilities a webhook asking for input cares about."""
    wanted = set(INPUT_METHODS.values())
    return {key: value for key, value in capabilities.items() if key in wanted and isinstance(value, dict)}


async def call_tool(
    name: str,
    tool: CallableTool,
    arguments: Mapping[str, Any],
    *,
    client: OutboundClient,
    caller: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    request_id: str | int | None = None,
    session_id: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_log: LogCallback | None = None,
    client_capabilities: Mapping[str, Any] | None = None,
    input_responses: Mapping[str, Any] | None = None,
    state: str | None = None,
    hook_services: Any = None,
) -> WebhookAnswer:
    """Validate ``arguments``, call the tool's webhook and check its answer: a ``CallToolResult``,
    or the webhook's request for input (``InputRequired``), which the caller answers by calling
    again with ``input_responses`` and the webhook's ``state``.

    ``client`` carries the SSRF guard and the outbound caps (``registry.webhooks.make_guarded_client``);
    ``caller`` (``registry.webhooks.caller_key``) is whose call it is, for the per-caller cap. Tool failures
    of every kind are ``isError`` results; only cancellation and the callbacks' own exceptions
    propagate.

    The webhook's body is ``{"tool", "arguments", "request_id", "session", "client_capabilities"}``
    (the ``elicitation``/``sampling``/``roots`` part of what the client declared), plus
    ``input_responses`` and ``state`` on a call that carries answers.
    """
    errors = sorted(tool.input_validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if errors:
        problems = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
            for e in errors[:MAX_ARGUMENT_PROBLEMS]
        )
        return error_result(f"invalid arguments for tool {name}: {problems}")
    payload: dict[str, Any] = {
        "tool": name,
        "arguments": dict(arguments),
        "request_id": request_id,
        "session": session_id,
        "client_capabilities": input_capabilities(client_capabilities or {}),
    }
    if input_responses is not None:
        payload["input_responses"] = dict(input_responses)
        payload["state"] = state
    result = await call_webhook(
        tool.target,
        payload,
        client=client,
        caller=caller,
        on_progress=on_progress,
        on_log=on_log,
        notifications_per_second=limits.progress_per_second,
        hook_services=hook_services,
    )
    if isinstance(result, InputRequired):
        return result
    if tool.output_validator is not None and not result.get("isError"):
        structured = result.get("structuredContent")
        if structured is None:
            return error_result(f"tool {name} declares an outputSchema but returned no structuredContent")
        problems_out = list(tool.output_validator.iter_errors(structured))
        if problems_out:
            return error_result(
                f"tool {name} returned structuredContent that violates its outputSchema: {problems_out[0].message}"
            )
    result.setdefault("isError", False)
    return result


# ------------------------------------------------------------------ test calls (admin API, web UI)

#: The ``progressToken`` a test call's progress notifications carry (there is no agent to pick one).
TEST_PROGRESS_TOKEN = "test"
#: Connect/read timeout of a test call's client; the tool's own ``timeout_s`` bounds the whole call.
TEST_CLIENT_TIMEOUT_S = 30.0

#: ``await on_notification(notification)``: one ``notifications/progress`` or ``notifications/message``
#: (``{"method": ..., "params": ...}``), as it happens.
NotificationCallback = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolTest:
    """A tool picked for a test call: which version runs, the label that picked it (None: picked
    by version number), its ``inputSchema`` (the web UI builds its form from it) and how to call it
    (write-only values decrypted; never shown)."""

    name: str
    version: int
    label: str | None
    input_schema: dict[str, Any]
    tool: PreparedTool


def resolve_tool_test(
    catalog: CatalogService,
    name: str,
    *,
    version: int | None = None,
    label: str | None = None,
    access: Access | None = None,
) -> ToolTest:
    """The version of tool ``name`` a test call runs: ``version``, else ``label``'s, else
    ``production``'s (what agents call). Blocking (reads the database): call it off the event loop.
    ``NotFound`` for a tool, version or label that does not exist (or hidden from ``access``);
    ``Forbidden`` when ``access`` is not an editor of its team; ``Invalid`` for both given."""
    number, picked_by, revealed = catalog.tool_to_call(name, version=version, label=label, access=access)
    spec = ToolSpec.model_validate(revealed)
    return ToolTest(name, number, picked_by, dict(spec.inputSchema), prepare_tool(spec, catalog.limits))


async def run_tool_test(
    test: ToolTest,
    arguments: Mapping[str, Any],
    *,
    allowed_networks: Iterable[IPNetwork],
    limits: Limits = DEFAULT_LIMITS,
    on_notification: NotificationCallback | None = None,
    caller: str | None = None,
    on_failed: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``test`` with ``arguments`` as ``tools/call`` would: its ``CallToolResult``.

    The webhook gets a ``test-...`` request id and no session. ``on_notification`` receives the
    call's progress and log notifications in the shape MCP sends them (at the relay's bounded
    rate), while the call runs; cancelling the caller cancels the webhook call. ``caller``
    (``registry.webhooks.caller_key``: the token or signed-in user running the test) counts the
    call against the same per-process outbound caps as agents' calls. ``on_failed`` is told of an
    error result, in a thread (it records the ``tool.test.failed`` event).
    """
    name = test.name

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        params: dict[str, Any] = {"progressToken": TEST_PROGRESS_TOKEN, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        if on_notification is not None:
            await on_notification({"method": "notifications/progress", "params": params})

    async def on_log(level: str, data: Any) -> None:
        if on_notification is not None:
            await on_notification(
                {"method": "notifications/message", "params": {"level": level, "logger": name, "data": data}}
            )

    async with make_guarded_client(allowed_networks, timeout=TEST_CLIENT_TIMEOUT_S, limits=limits) as client:
        answer = await call_tool(
            name,
            test.tool,
            arguments,
            client=client,
            caller=caller,
            limits=limits,
            request_id=f"test-{secrets.token_hex(8)}",
            on_progress=on_progress,
            on_log=on_log,
        )
    if isinstance(answer, InputRequired):  # there is nobody to ask
        methods = ", ".join(sorted({r.method for r in answer.requests.values()}))
        answer = error_result(f"tool {name} asked for input ({methods}), which a test call cannot provide")
    if on_failed is not None and answer.get("isError"):
        # The audit trail's (and the tool.test.failed event's) record of it: blocking, so off the loop.
        await asyncio.to_thread(on_failed, answer)
    return answer
