"""Bodies of catalog entries for tests: one place that knows what a prompt or a tool needs.

Each test states only what matters to it (a name, a template, a team, a webhook URL); the rest is
a valid default. Fields given as None are left out, so a test can pass ``title=maybe``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A tool's default input: one optional string.
TEXT_INPUT: Mapping[str, Any] = {"text": {"type": "string"}}


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def prompt_body(
    name: str, template: str = "Hi {{ who }}", *, arguments: Iterable[str | dict[str, Any]] = ("who",), **fields: Any
) -> dict[str, Any]:
    """A prompt; ``arguments`` as names (optional arguments) or whole argument objects."""
    body: dict[str, Any] = {"name": name, "template": template, **_present(fields)}
    declared = [argument if isinstance(argument, dict) else {"name": argument} for argument in arguments]
    if declared:
        body["arguments"] = declared
    return body


def tool_body(
    name: str,
    url: str = "builtin://echo",
    *,
    properties: Mapping[str, Any] | None = TEXT_INPUT,
    required: Iterable[str] = (),
    webhook: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A webhook tool calling ``url``; ``properties`` of its object input schema (None: no
    schema), ``webhook`` the hook's other fields (headers, secret, timeout_s ...)."""
    body: dict[str, Any] = {"name": name, "description": f"{name} test tool", **_present(fields)}
    if properties is not None:
        schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
        if required:
            schema["required"] = list(required)
        body["inputSchema"] = schema
    body["webhook"] = {"url": url, **_present(webhook or {})}
    return body
