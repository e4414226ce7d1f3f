"""Completion suggestions: what a prompt argument or URI-template variable may be set to.

Suggestions come from the catalog (declared enums and defaults) and from the values *this caller*
used before. History is kept per caller, a caller being an agent token (or, without one, a single
session or stdio client) together with the label it is served, so a value one agent typed (a
password in a ``summarize`` text) is never offered to another agent, to an anonymous session or
under another label. Only declared arguments and template variables are remembered, and memory is
bounded three ways (``Limits``): values per argument (``completion_values``), bytes per caller
(``completion_bytes``, least recently used values go first) and callers kept
(``completion_callers``, least recently active callers forget theirs).
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from collections.abc import Container
from typing import Any

from registry.limits import Limits
from registry.mcp.sessions import ClientState, Session

#: ("ref/prompt", prompt name) or ("ref/resource", URI template).
Ref = tuple[str, str]
#: (ref type, ref name, argument name).
_Key = tuple[str, str, str]

#: Rough per-entry cost of the containers around a value or a key (dict slots, tuple), in bytes;
#: ``sys.getsizeof`` of the strings themselves is added to it.
_VALUE_OVERHEAD = 100
_KEY_OVERHEAD = 200
#: A request's values are remembered as its caller's "last" (to skip repeats) up to this many,
#: each at most this long.
_MEMO_ITEMS = 16
_MEMO_CHARS = 256


def caller_of(client: ClientState) -> tuple[str, object, str]:
    """Whose history a request reads and writes: (kind of caller, its identity, label).

    Agent tokens are identified by their id (all sessions of a token share history), signed-in
    users by their subject; anonymous callers have no identity beyond their session, so each
    session is its own caller. (A tuple of the parts, not a formatted string: it is made on
    every ``prompts/get``.)
    """
    if client.token_id is not None:
        return "token", client.token_id, client.label
    if client.user is not None:
        return "user", client.user, client.label
    if isinstance(client, Session) and client.id:
        return "session", client.id, client.label
    return "client", client.history_id, client.label


@functools.lru_cache(maxsize=4096)
def _key_cost(key: _Key) -> int:
    """Memoised: an agent cycling through more prompts than its bytes hold adds and evicts keys on
    most requests, and the same few thousand keys come back."""
    return _KEY_OVERHEAD + sys.getsizeof(key[0]) + sys.getsizeof(key[1]) + sys.getsizeof(key[2])


class _CallerHistory:
    """One caller's values, most recent last per argument, with a byte count of what it holds.

    An agent cycling through more prompts than its bytes hold evicts and re-adds on most
    requests, so this is on the ``prompts/get`` path: one ordered dict (arguments in order of
    last use) of dicts (values in order of use, each with its cost)."""

    __slots__ = ("last", "size", "values")

    def __init__(self) -> None:
        #: Arguments in order of last use (the byte bound evicts from the least recently used),
        #: each with its values in order of use (plain dicts keep insertion order, and cost less
        #: to make than ordered ones) and what each costs.
        self.values: OrderedDict[_Key, dict[str, int]] = OrderedDict()
        self.size = 0
        #: The last (ref, values) remembered: the same again changes nothing (every value is
        #: already the most recent of its argument, in the same order), so it is not redone.
        self.last: tuple[Ref, tuple[tuple[str, Any], ...]] | None = None

    def add(self, key: _Key, value: str, cost: int, per_key: int, max_bytes: int) -> None:
        """``cost``: what ``value`` counts against ``max_bytes`` (the caller worked it out)."""
        history = self.values
        values = history.get(key)
        if values is None:
            values = history[key] = {}
            self.size += _key_cost(key)
        else:
            history.move_to_end(key)
            if value in values:
                values[value] = values.pop(value)  # most recent last
                return
        values[value] = cost
        self.size += cost
        if len(values) > per_key:
            self.size -= values.pop(next(iter(values)))
        while self.size > max_bytes and history:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        key, values = next(iter(self.values.items()))
        if values:
            self.size -= values.pop(next(iter(values)))
        if not values:
            del self.values[key]
            self.size -= _key_cost(key)

    def recall(self, key: _Key) -> list[str]:
        return list(reversed(self.values.get(key, {})))


class CompletionHistory:
    """Values each caller used before, per declared prompt argument or URI-template variable."""

    def __init__(self, limits: Limits) -> None:
        self.per_key = limits.completion_values
        self.max_bytes = limits.completion_bytes
        self.max_callers = limits.completion_callers
        #: A single value may take at most this share of a caller's bytes, so one long value cannot
        #: wipe the rest (and values that long are no use as suggestions anyway).
        self.max_value_bytes = max(1, self.max_bytes // max(1, self.per_key))
        self._callers: OrderedDict[tuple[str, object, str], _CallerHistory] = OrderedDict()

    def remember(self, client: ClientState, ref: Ref, argument: str, value: str) -> None:
        """Note a value the caller used. The caller must have checked that ``argument`` is declared."""
        self.remember_all(client, ref, {argument: value})

    def remember_all(
        self, client: ClientState, ref: Ref, values: dict[str, Any], declared: Container[str] | None = None
    ) -> None:
        """Note the values of one request, in order: the text ones of arguments in ``declared``
        (None: the caller checked that every one is declared)."""
        caller = caller_of(client)
        history = self._callers.get(caller)
        if history is None:
            history = self._callers[caller] = _CallerHistory()
            while len(self._callers) > self.max_callers:
                self._callers.popitem(last=False)
        else:
            self._callers.move_to_end(caller)
        items = tuple(values.items())
        if history.last is not None and history.last == (ref, items):  # a repeat: nothing to reorder
            return
        small = len(items) <= _MEMO_ITEMS  # the memo is held per caller, beside what the bounds count
        kind, name = ref
        for argument, value in items:
            if type(value) is not str:
                small = False
                continue
            if len(value) > _MEMO_CHARS:
                small = False
            if not value or (declared is not None and argument not in declared):
                continue
            cost = _VALUE_OVERHEAD + sys.getsizeof(value)
            if cost <= self.max_value_bytes:
                history.add((kind, name, argument), value, cost, self.per_key, self.max_bytes)
        history.last = (ref, items) if small else None

    def recall(self, client: ClientState, ref: Ref, argument: str) -> list[str]:
        """This caller's earlier values for the argument, most recent first."""
        history = self._callers.get(caller_of(client))
        return history.recall((*ref, argument)) if history is not None else []

    @property
    def callers(self) -> int:
        return len(self._callers)

    def size(self) -> int:
        """Bytes held, as counted against ``completion_bytes`` (all callers)."""
        return sum(history.size for history in self._callers.values())


def suggestions(candidates: list[str], prefix: str, limit: int = 100) -> dict[str, object]:
    """The ``completion`` object of a ``completion/complete`` answer: candidates starting with the
    typed prefix (case-insensitive), duplicates removed, at most ``limit`` (the spec's cap)."""
    lowered = prefix.lower()
    values = [v for v in dict.fromkeys(candidates) if v.lower().startswith(lowered)]
    return {"values": values[:limit], "total": len(values), "hasMore": len(values) > limit}
