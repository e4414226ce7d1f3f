"""Turning whatever a webhook (or built-in hook) answered into an MCP ``CallToolResult`` dict.

Webhooks may speak MCP natively (return a ``CallToolResult``) or be plain JSON APIs; both are
accepted so existing HTTP services can be registered as tools unchanged. Results are validated only
as far as the MCP client needs to trust their shape: content items must be objects with a ``type``.
"""

from __future__ import annotations

import json
from typing import Any

from ._types import JSONObject

__all__ = ["InvalidResult", "error_result", "text_result", "to_call_tool_result"]


class InvalidResult(ValueError):
    """A body that claims to be a ``CallToolResult`` but is not a valid one."""


def text_result(text: str, *, is_error: bool = False) -> JSONObject:
    """A ``CallToolResult`` with a single text item."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def error_result(message: str) -> JSONObject:
    """A ``CallToolResult`` reporting a failure to the model (tool errors are results, not protocol
    errors, so the model can see them and react)."""
    return text_result(message, is_error=True)


def _looks_like_call_tool_result(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("content"), list)


def _validated_passthrough(value: JSONObject) -> JSONObject:
    content = value["content"]
    for index, item in enumerate(content):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise InvalidResult(f"content[{index}] must be an object with a string 'type'")
    is_error = value.get("isError")
    if is_error is None:
        is_error = False
    elif not isinstance(is_error, bool):
        raise InvalidResult("'isError' must be a boolean")
    result: JSONObject = {"content": content, "isError": is_error}
    structured = value.get("structuredContent")
    if structured is not None:
        if not isinstance(structured, dict):
            raise InvalidResult("'structuredContent' must be an object")
        result["structuredContent"] = structured
    return result


def to_call_tool_result(value: Any) -> JSONObject:
    """Map a decoded JSON answer to a ``CallToolResult``.

    * An object with a ``content`` list is taken to be a ``CallToolResult`` and passed through
      (``content``, ``structuredContent``, ``isError`` defaulting to false); raises
      :class:`InvalidResult` if it is malformed.
    * Any other value becomes one text item holding its JSON, plus ``structuredContent`` when it
      is an object, so clients that understand structured output get it unparsed.
    """
    if _looks_like_call_tool_result(value):
        return _validated_passthrough(value)
    result = text_result(json.dumps(value))
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result
