"""One JSON loader for everything callers send: structure limits checked before any parser runs.

Why a pre-scan: Python's ``json`` recurses once per nesting level, so ``[`` x 100,000 raises
``RecursionError`` (an HTTP 500 with a traceback), and even a shallow document of a million tiny
items costs far more memory as Python objects than as bytes. orjson refuses depth > 1024 on its
own, but the fallback to ``json`` (integers beyond 64 bits, the authoritative error message) does
not. So the bytes are measured first, with C-speed operations only (``bytes.count``,
``translate``, one non-backtracking regular expression, ``itertools.accumulate``), and nothing is
parsed unless the document is within ``limits.json_depth`` and ``limits.json_elements``.

The scan is exact for valid JSON; invalid JSON that it cannot measure cheaply (unbalanced
brackets, not UTF-8) is refused as invalid, so no parser ever recurses deeper than the limit.
The admin API uses ``check_structure`` alone (FastAPI parses the body itself, afterwards); the
MCP transports use ``loads``.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

import orjson

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

#: A JSON string, escape-aware; an unterminated one runs to the end. Every alternative either
#: consumes input or ends the match, so it cannot backtrack (it always matches from a quote).
_STRING = re.compile(rb'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:"|\\?\Z)')
_WHITESPACE = b" \t\r\n"
#: Brackets only, openers as ``(`` and closers as ``)``: nesting is all that is left to measure.
_BRACKET_TABLE = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: A run of digits that may be an integer beyond 64 bits (which orjson turns into a float): such a
#: document is parsed by ``json``, which keeps integers exact. A run inside a string or a long
#: fraction only costs the slower parser. In bytes it is looked for with every digit turned into
#: "0" and every other byte into a space: two C loops, four times faster than a regular expression
#: on a request-sized body (where the expression took 1.3 of the parse's 3 µs), ten on a large one.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGITS = b"0" * 19
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")
_DEPTH_STEP = tuple(1 if b == ord("(") else -1 if b == ord(")") else 0 for b in range(256))


class JsonStructureError(LimitExceeded):
    """A JSON document over ``json_depth`` or ``json_elements`` (refused before it was parsed)."""


def check_structure(data: bytes | bytearray | str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse ``data`` if it nests deeper than ``limits.json_depth`` or holds more than
    ``limits.json_elements`` array items plus object members; also refuse bytes that are not UTF-8.

    Raises ``JsonStructureError`` (a ``LimitExceeded``, so a ``ValueError``) naming the limit, or
    ``ValueError`` for input that cannot be JSON and would be costly to measure (not UTF-8,
    unbalanced brackets). Anything else, valid or not, is left to the parser.
    """
    raw = data if type(data) is bytes else data.encode() if isinstance(data, str) else bytes(data)
    if b"\x00" in raw:
        # Never in JSON text (control characters in strings must be escaped), and the mark by which
        # Python's json.loads(bytes) would decode UTF-16/32, which the byte scan below cannot read.
        raise ValueError("JSON must be UTF-8 text (found a NUL byte)")
    if not raw.isascii():
        # RFC 8259: JSON between systems is UTF-8. Other encodings would also defeat the byte scan
        # below (a UTF-16 code unit can hold a quote byte), and Python's json would accept them.
        raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
    depth_limit, element_limit = limits.json_depth, limits.json_elements
    opens = raw.count(b"[") + raw.count(b"{")
    # Fast path (nearly every request): even counting brackets and commas inside strings, which
    # can only over-count, the document is within both limits (a document of at most
    # json_elements bytes cannot hold more brackets and commas than that).
    if opens <= depth_limit and (len(raw) <= element_limit or opens + raw.count(b",") <= element_limit):
        return

    # Strings become a placeholder value (their brackets and commas are text, not structure).
    text = _STRING.sub(b"0", raw).translate(None, _WHITESPACE)
    brackets = text.translate(_BRACKET_TABLE, _NOT_BRACKETS)
    if len(brackets) > depth_limit and b"(" * (depth_limit + 1) in brackets:  # the classic attack
        raise _too_deep(depth_limit)
    opens = brackets.count(b"(")
    # Each comma adds one item to a container; each non-empty container has one more than its commas.
    empties = text.count(b"[]") + text.count(b"{}")
    elements = text.count(b",") + opens - empties
    if elements > element_limit:
        raise JsonStructureError(
            "json_elements", f"JSON document with more than {element_limit} array items and object members"
        )
    if opens <= depth_limit:
        return
    if len(brackets) != 2 * opens:
        # Never valid JSON; measuring it could take as long as the input is (stray closers).
        raise ValueError("invalid JSON: brackets do not balance")
    # The deepest nesting, bracket by bracket, at C speed (no Python code runs per byte). Balanced
    # and within json_elements, so at most about 2 x json_elements brackets.
    if max(accumulate(map(_DEPTH_STEP.__getitem__, brackets))) > depth_limit:
        raise _too_deep(depth_limit)


def _too_deep(depth_limit: int) -> JsonStructureError:
    return JsonStructureError("json_depth", f"JSON nested deeper than {depth_limit} levels")


def exact_loads(data: bytes | str) -> Any:
    """Parse JSON already within bounds (stored definitions): orjson, or ``json`` when it may hold
    an integer beyond 64 bits, which orjson would round to a float (a schema's ``maximum``, an
    enum value, a default, served changed)."""
    if not _may_hold_long_integers(data):
        return orjson.loads(data)
    return _strict_json(data)


def _may_hold_long_integers(data: bytes | bytearray | str) -> bool:
    if isinstance(data, str):
        return _LONG_DIGITS_TEXT.search(data) is not None
    return _LONG_DIGITS in data.translate(_DIGITS_AS_ZEROS)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"invalid JSON: {text[:40]} is beyond the range of a number")
    return value


def _strict_json(text: bytes | bytearray | str) -> Any:
    """``json.loads`` refusing what JSON (and orjson) refuses but it takes: NaN, Infinity, and
    numbers too large for a float. (Lone surrogate escapes it still takes; the encoders cope.)"""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def exact_dumps(value: Any) -> bytes:
    """orjson's compact encoding, or the same from ``json`` for what orjson refuses (an integer
    beyond 64 bits: one tool whose schema holds one would otherwise fail every ``tools/list``).
    The fallback escapes non-ASCII (a lone surrogate cannot be UTF-8) and refuses NaN."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def loads(data: bytes | bytearray | str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse JSON a caller sent, within ``limits``.

    Raises ``JsonStructureError`` (over a limit) or ``ValueError`` (not JSON); callers that answer
    both differently must catch ``JsonStructureError`` first. Never raises ``RecursionError``.
    """
    check_structure(data, limits)
    if not _may_hold_long_integers(data):  # see exact_loads
        try:
            return orjson.loads(data)  # several times faster than json
        except orjson.JSONDecodeError:
            pass
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    try:
        # Integers beyond 64 bits (orjson would round them to floats: an id or an account number
        # sent back changed), and the authoritative error message (line and column) otherwise.
        return _strict_json(text)
    except RecursionError:  # only with a json_depth set beyond what the interpreter allows
        raise _too_deep(limits.json_depth) from None
