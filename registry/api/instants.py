"""Instants in query parameters (``since``, ``until``): one schema, one parser, one refusal.

RFC 3339 date-times only: the schema says ``format: date-time`` and a pattern, so a number (a
Unix time) or a date alone is refused, as the contract fuzzer expects. Parsed into UTC; offsets
that push year 1 or 9999 out of range are clamped to the ends of time instead of failing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fastapi import Query

from registry.api.problems import InvalidParameter

#: Longest instant accepted (a fraction of a second may carry many digits; Python keeps six).
INSTANT_CHARS = 64
_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
_PARTS = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)
_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)


def instant_query(description: str, example: str = "2026-12-01T00:00:00Z") -> Any:
    """The ``Query(...)`` of an optional RFC 3339 instant parameter."""
    return Query(
        max_length=INSTANT_CHARS,
        pattern=_PATTERN,
        description=f"{description} (RFC 3339)",
        json_schema_extra={"format": "date-time"},
        examples=[example],
    )


def parse_instant(value: str | None, parameter: str) -> datetime | None:
    """``value`` in UTC (None stays None); a 422 naming ``parameter`` for what is no real instant
    (a 30th of February, an hour 25)."""
    if value is None:
        return None
    found = _PARTS.fullmatch(value)
    try:
        if found is None:
            raise ValueError(value)
        day, clock, fraction, zone = found.groups()
        fraction = (fraction or "")[:7]  # microseconds at most
        parsed = datetime.fromisoformat(f"{day}T{clock}{fraction}{'+00:00' if zone in 'Zz' else zone}")
    except ValueError:
        message = f"{parameter} must be an RFC 3339 date-time, e.g. 2026-12-01T10:00:00Z"
        raise InvalidParameter(message, errors=[{"loc": f"query.{parameter}", "msg": message}]) from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset
        return _MIN if parsed.year < 5000 else _MAX
