"""Running a tool: the one code path behind MCP ``tools/call`` and the admin API's tool test.

A test run from the admin API (``POST /api/v1/tools/{name}/test``) must behave exactly as an
agent's call: the same argument validation against ``inputSchema`` (a failure is an ``isError``
result naming the problem, so a model can correct itself), the same webhook call (signed, under
the SSRF guard of the client it is given, within the tool's timeout, progress and logs relayed at
the bounded rate), the same result mapping and the same ``outputSchema`` check. Both callers go
through :func:`call_tool`; they differ only in where progress and log notifications go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from jsonschema.protocols import Validator

from registry.catalog.schemas import safe_validator
from registry.catalog.specs import ToolSpec
from registry.limits import DEFAULT_LIMITS, Limits
from registry.webhooks import LogCallback, ProgressCallback, WebhookTarget, call_webhook, error_result

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


async def call_tool(
    name: str,
    tool: CallableTool,
    arguments: Mapping[str, Any],
    *,
    client: httpx.AsyncClient,
    limits: Limits = DEFAULT_LIMITS,
    request_id: str | int | None = None,
    session_id: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_log: LogCallback | None = None,
) -> dict[str, Any]:
    """Validate ``arguments``, call the tool's webhook and check its answer: a ``CallToolResult``.

    ``client`` carries the SSRF guard (``registry.webhooks.make_guarded_client``). Tool failures
    of every kind are ``isError`` results; only cancellation and the callbacks' own exceptions
    propagate.
    """
    errors = sorted(tool.input_validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if errors:
        problems = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
            for e in errors[:MAX_ARGUMENT_PROBLEMS]
        )
        return error_result(f"invalid arguments for tool {name}: {problems}")
    payload = {"tool": name, "arguments": dict(arguments), "request_id": request_id, "session": session_id}
    result = await call_webhook(
        tool.target,
        payload,
        client=client,
        on_progress=on_progress,
        on_log=on_log,
        notifications_per_second=limits.progress_per_second,
    )
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
