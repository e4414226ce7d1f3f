"""Completion suggestions: what a prompt argument or URI-template variable may be set to.

Suggestions come from the catalog (declared enums and defaults) and from the values *this caller*
used before. History is kept per caller, a caller being an agent token (or, without one, a single
session or stdio client) together with the label it is served, so a value one agent typed (a
password in a ``summarize`` text) is never offered to another agent, to an anonymous session or
under another label. Only declared arguments and template variables are remembered. Memory is
bounded by bytes per caller (``completion_bytes``: the least recently used uses go first) and by
callers kept (``completion_callers``: the least recently active forget theirs); a completion
offers at most ``completion_values`` earlier values per argument, the newest first.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from collections.abc import Container
from typing import Any

from registry.limits import Limits
from registry.mcp.sessions import ClientState, Session

getsizeof = sys.getsizeof

#: ("ref/prompt", prompt name) or ("ref/resource", URI template).
Ref = tuple[str, str]

#: Rough cost of the containers around one remembered use (the record, its tuples, the ordered
#: dict's slot) and around each value in it, in bytes; ``sys.getsizeof`` of the strings
#: themselves (names and values) is added to them.
_USE_OVERHEAD = 250
_VALUE_OVERHEAD = 100


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
def _use_cost(ref: Ref) -> int:
    """Memoised: an agent cycling through many prompts evicts and adds a use on most requests,
    and the same few thousand come back."""
    return _USE_OVERHEAD + sys.getsizeof(ref[0]) + sys.getsizeof(ref[1])


@functools.lru_cache(maxsize=4096)
def _name_cost(argument: str) -> int:
    return sys.getsizeof(argument)


#: Distinct uses whose kept values and cost are remembered, and the most characters of argument
#: names and text values one may hold (they are the agents': the memo holds about 1 MiB of them).
_USES_MEMO = 1024
_MEMO_CHARS = 1024

#: One remembered use: the entry, and the values it was given (declared text arguments, in order).
_Use = tuple[Ref, tuple[tuple[str, str], ...]]


class _CallerHistory:
    """One caller's distinct uses (an entry with the values it was given), least recently used
    first, each with what it counts against the byte bound.

    This is written on every ``prompts/get`` and read only by ``completion/complete``, so the
    write is one ordered-dict step (a repeat moves to the end; a new use is added and the least
    recently used ones go while over the bound) and the read walks the uses, newest first."""

    __slots__ = ("size", "uses")

    def __init__(self) -> None:
        self.uses: OrderedDict[_Use, int] = OrderedDict()
        self.size = 0

    def add(self, use: _Use, cost: int, max_bytes: int) -> None:
        uses = self.uses
        if use in uses:
            uses.move_to_end(use)
            return
        uses[use] = cost
        self.size += cost
        while self.size > max_bytes:
            self.size -= uses.popitem(last=False)[1]

    def recall(self, ref: Ref, argument: str, limit: int) -> list[str]:
        found: dict[str, None] = {}
        for used, values in reversed(self.uses):
            if used != ref:
                continue
            for name, value in values:
                if name == argument:
                    found[value] = None
            if len(found) >= limit:
                break
        return list(found)[:limit]


class CompletionHistory:
    """Values each caller used before, per declared prompt argument or URI-template variable."""

    def __init__(self, limits: Limits) -> None:
        self.per_key = limits.completion_values
        self.max_bytes = limits.completion_bytes
        self.max_callers = limits.completion_callers
        #: A single value may take at most this share of a caller's bytes, so one long value cannot
        #: wipe the rest (and values that long are no use as suggestions anyway).
        self.max_value_bytes = max(1, self.max_bytes // max(1, self.per_key))
        #: Nor may one request's values take more than half of them (the values past that are not
        #: kept), so a single request never wipes a caller's history.
        self.max_use_bytes = self.max_bytes // 2
        self._callers: OrderedDict[tuple[str, object, str], _CallerHistory] = OrderedDict()
        #: What recent uses keep and cost (see ``remember_all``), at most ``_USES_MEMO`` of them.
        self._uses: dict[tuple[Ref, tuple[tuple[str, Any], ...], Container[str] | None], tuple[Any, int]] = {}

    def remember(self, client: ClientState, ref: Ref, argument: str, value: str) -> None:
        """Note a value the caller used. The caller must have checked that ``argument`` is declared."""
        self.remember_all(client, ref, {argument: value})

    def remember_all(
        self, client: ClientState, ref: Ref, values: dict[str, Any], declared: Container[str] | None = None
    ) -> None:
        """Note the values of one request: the text ones of arguments in ``declared`` (None: the
        caller checked that every one is declared), as one use of ``ref``."""
        # Agents repeat the same uses: what a use keeps, and what it costs, is worked out once per
        # distinct one (only text values are kept, so only they are part of the key).
        texts = tuple((name, value) for name, value in values.items() if type(value) is str)
        key = (ref, texts, declared)
        try:
            use = self._uses.get(key)
            memo = True
        except TypeError:  # a ``declared`` that cannot be hashed: no memo
            use, memo = None, False
        if use is None:
            use = self._use(ref, values, declared)
            # Only short uses are remembered this way: the memo stays small whatever agents send.
            if memo and sum(len(name) + len(value) for name, value in texts) <= _MEMO_CHARS:
                if len(self._uses) >= _USES_MEMO:
                    del self._uses[next(iter(self._uses))]  # the oldest
                self._uses[key] = use
        kept, cost = use
        if not kept:
            return
        caller = caller_of(client)
        history = self._callers.get(caller)
        if history is None:
            history = self._callers[caller] = _CallerHistory()
            while len(self._callers) > self.max_callers:
                self._callers.popitem(last=False)
        else:
            self._callers.move_to_end(caller)
        history.add((ref, kept), cost, self.max_bytes)

    def _use(
        self, ref: Ref, values: dict[str, Any], declared: Container[str] | None
    ) -> tuple[tuple[tuple[str, str], ...], int]:
        """What one use of ``ref`` with ``values`` keeps (the declared, non-empty text values, within
        the byte bounds), and what it counts against ``completion_bytes``."""
        cost = _use_cost(ref)
        kept = []
        max_value, max_use = self.max_value_bytes, self.max_use_bytes
        for argument, value in values.items():
            if type(value) is not str or not value or (declared is not None and argument not in declared):
                continue
            value_cost = _VALUE_OVERHEAD + getsizeof(value)
            if value_cost > max_value:
                continue
            added = value_cost + _name_cost(argument)
            if cost + added <= max_use:
                kept.append((argument, value))
                cost += added
        return tuple(kept), cost

    def recall(self, client: ClientState, ref: Ref, argument: str) -> list[str]:
        """This caller's earlier values for the argument, most recent first."""
        history = self._callers.get(caller_of(client))
        return history.recall(ref, argument, self.per_key) if history is not None else []

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
