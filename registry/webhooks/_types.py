"""Type aliases shared by the webhook modules.

Kept in one place so the HTTP client and the in-process built-ins promise the caller exactly the
same callback shapes: a tool behaves the same whether it is served over the network or in-process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

#: ``await on_progress(progress, total, message)``: forwarded as an MCP ``notifications/progress``.
ProgressCallback: TypeAlias = Callable[[float, float | None, str | None], Awaitable[None]]

#: ``await on_log(level, data)``: forwarded as an MCP ``notifications/message``.
LogCallback: TypeAlias = Callable[[str, Any], Awaitable[None]]

#: A decoded JSON object, and the shape of an MCP ``CallToolResult``.
JSONObject: TypeAlias = dict[str, Any]

#: The MCP logging levels (RFC 5424 severities). Anything else would be a protocol error downstream,
#: so hooks are held to this set rather than trusted.
LOG_LEVELS: Final = frozenset({"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"})
