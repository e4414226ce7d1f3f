"""Finished prompt renders, reused when the same prompt version is asked with the same arguments.

Agents ask for the same few prompts with the same arguments over and over; a render that depends
on nothing but its template and its arguments (``PromptRenderer.renders_inline``: literal text with
bare ``{{ name }}``, no embedded resource, so no snapshot, team or clock enters it) gives the same
result every time, and binding plus rendering it is most of a ``prompts/get``. Keys hold the
renderer itself, which belongs to one immutable prompt version, so an edit can never be served
from the cache: the new version has a new renderer. Only successful renders are kept (a refused
argument is refused again, by the renderer), and the cache is bounded by bytes, least recently
used first out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from registry.catalog.rendering import PromptRenderer

#: Bytes of rendered text the cache may hold (an estimate: the texts plus a fixed overhead each).
MAX_BYTES = 16 * 1024 * 1024
#: A single result larger than this is not kept (it would push out many small ones).
MAX_ENTRY_BYTES = 256 * 1024
_OVERHEAD = 300

_Key = tuple[PromptRenderer, tuple[tuple[str, str], ...]]


class RenderCache:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[_Key, tuple[dict[str, Any], int]] = OrderedDict()

    @staticmethod
    def key(renderer: PromptRenderer, arguments: dict[str, Any]) -> _Key | None:
        """None when the arguments are not all strings, or more than the prompt declares (then the
        renderer decides, every time: a flood of undeclared names is refused without being hashed)."""
        if len(arguments) > len(renderer.declared):
            return None
        items = tuple(arguments.items())
        for _, value in items:
            if type(value) is not str:
                return None
        return renderer, items

    def get(self, key: _Key) -> dict[str, Any] | None:
        """The result (shared: callers must not change it; the stateless era stamps a copy)."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        self._entries.move_to_end(key)
        return hit[0]

    def put(self, key: _Key, result: dict[str, Any]) -> None:
        size = _OVERHEAD + sum(len(name) + len(value) for name, value in key[1])
        for message in result.get("messages", ()):
            content = message.get("content", {})  # text, or an image's or audio clip's data
            size += _OVERHEAD + len(content.get("text", "")) + len(content.get("data", ""))
        if size > MAX_ENTRY_BYTES or key in self._entries:
            return
        self._entries[key] = (result, size)
        self.size += size
        while self.size > self.max_bytes:
            self.size -= self._entries.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._entries)
