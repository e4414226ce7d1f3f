"""In-process "webhooks": tools whose URL is ``builtin://NAME`` run a Python function instead.

They exist for the registry's own tools and for conformance fixtures that must not depend on a
network service. A hook gets the same JSON payload an HTTP webhook would and reports progress and
log messages through a :class:`HookContext` that forwards to the same callbacks, so built-in and
HTTP tools are indistinguishable to the MCP client.

Adding one is a decorated function::

    @builtin("shout")
    async def shout(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        await ctx.log("info", "shouting")
        return text_result(str(arguments["text"]).upper())

It returns a ``CallToolResult`` dict, or any other JSON object which is wrapped the same way a
plain-JSON webhook response is. Raise :class:`HookError` for a failure the model should read
verbatim; any other exception is reported as a failed call too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, TypeVar
from urllib.parse import urlsplit

from ._types import LOG_LEVELS, JSONObject, LogCallback, ProgressCallback
from .results import text_result

__all__ = [
    "BUILTINS",
    "BUILTIN_SCHEME",
    "BuiltinRegistry",
    "Hook",
    "HookContext",
    "HookError",
    "builtin",
    "builtin_name",
]

BUILTIN_SCHEME: Final = "builtin"
_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_-]*$")


class HookError(Exception):
    """A built-in hook's failure whose message is meant for the model (returned as ``isError``)."""


@dataclass(frozen=True)
class HookContext:
    """What a built-in hook may do besides returning: report progress and emit log messages, and
    ask for input (see :mod:`.input_required`): ``client_capabilities`` says which of
    ``elicitation``/``sampling``/``roots`` the caller's client can answer, and a call made after
    such a request carries the answers (``input_responses``) and the hook's ``state``.
    ``services`` is whatever the caller hands built-ins (the MCP server: its catalog), or None."""

    on_progress: ProgressCallback | None = None
    on_log: LogCallback | None = None
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    input_responses: dict[str, Any] | None = None
    state: str | None = None
    services: Any = None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress (a ``notifications/progress`` if the caller asked for it)."""
        if self.on_progress is not None:
            await self.on_progress(progress, total, message)

    async def log(self, level: str, data: Any) -> None:
        """Emit a log message (a ``notifications/message``); ``level`` is an MCP logging level."""
        if not isinstance(level, str) or level not in LOG_LEVELS:
            raise HookError(f"invalid log level {level!r}")
        if self.on_log is not None:
            await self.on_log(level, data)

    def response(self, key: str) -> dict[str, Any] | None:
        """The client's answer to input request ``key``, if this call carries one."""
        value = (self.input_responses or {}).get(key)
        return value if isinstance(value, dict) else None

    @staticmethod
    def input_required(requests: dict[str, dict[str, Any]], state: str | None = None) -> JSONObject:
        """The answer asking for input: ``{"input_required": {"requests": ..., "state": ...}}``."""
        body: JSONObject = {"requests": requests}
        if state is not None:
            body["state"] = state
        return {"input_required": body}


Hook: TypeAlias = Callable[[JSONObject, HookContext], Awaitable[JSONObject]]
HookT = TypeVar("HookT", bound=Hook)


class BuiltinRegistry:
    """Name → hook. A class rather than a bare dict so duplicates are caught and tests can
    register a hook and take it away again."""

    def __init__(self) -> None:
        self._hooks: dict[str, Hook] = {}

    def register(self, name: str, hook: Hook, *, replace: bool = False) -> None:
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"invalid built-in hook name {name!r}: use lowercase letters, digits, '_' and '-'")
        if name in self._hooks and not replace:
            raise ValueError(f"built-in hook {name!r} is already registered")
        self._hooks[name] = hook

    def unregister(self, name: str) -> None:
        self._hooks.pop(name, None)

    def get(self, name: str) -> Hook | None:
        return self._hooks.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._hooks))

    def __contains__(self, name: object) -> bool:
        return name in self._hooks


#: The registry ``builtin://`` URLs are looked up in.
BUILTINS: Final = BuiltinRegistry()


def builtin(name: str, *, replace: bool = False) -> Callable[[HookT], HookT]:
    """Decorator registering ``async def hook(arguments, ctx) -> dict`` as ``builtin://NAME``."""

    def decorator(hook: HookT) -> HookT:
        BUILTINS.register(name, hook, replace=replace)
        return hook

    return decorator


def builtin_name(url: str) -> str | None:
    """``NAME`` for a ``builtin://NAME`` URL (case-insensitive scheme, optional trailing ``/``),
    else None. Whether NAME is registered is the caller's question."""
    parts = urlsplit(url)
    if parts.scheme.lower() != BUILTIN_SCHEME:
        return None
    return parts.netloc + parts.path.rstrip("/")


# --------------------------------------------------------------------------- the built-ins


def _string_argument(arguments: JSONObject, key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str):
        raise HookError(f"argument {key!r} must be a string")
    return value


def _number_argument(arguments: JSONObject, key: str) -> int | float:
    value = arguments.get(key)
    # bool is an int subclass, but true + false is not a sum anyone means.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HookError(f"argument {key!r} must be a number")
    return value


def _format_number(value: int | float) -> str:
    """``repr`` of the int when the value is integral (``100``, not ``100.0``), else of the float."""
    if isinstance(value, float) and value.is_integer():
        return repr(int(value))
    return repr(value)


@builtin("echo")
async def echo(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``{"message": s}`` → ``Echo: s``."""
    return text_result(f"Echo: {_string_argument(arguments, 'message')}")


@builtin("add")
async def add(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``{"a": 42, "b": 58}`` → ``42 + 58 = 100``."""
    a = _number_argument(arguments, "a")
    b = _number_argument(arguments, "b")
    return text_result(f"{_format_number(a)} + {_format_number(b)} = {_format_number(a + b)}")


@builtin("echo_text")
async def echo_text(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``{"text": s}`` → exactly ``s``."""
    return text_result(_string_argument(arguments, "text"))
