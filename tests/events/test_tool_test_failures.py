"""A failed tool test is recorded (audit trail, ``tool.test.failed`` event) by category only: the
result's text quotes argument values and the receiver's answer."""

from __future__ import annotations

import pytest

from registry.db.models import Change
from registry.events.service import record_tool_test_failed
from registry.runtime import Registry
from registry.webhooks import error_result


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("invalid arguments for tool t: a: 'hunter2' is not of type 'number'", "invalid arguments"),
        ("webhook returned HTTP 500 Internal Server Error: password=hunter2", "webhook answered HTTP 500"),
        ("webhook call to hooks.example.com timed out after 5 s", "timeout"),
        (
            "tool t returned structuredContent that violates its outputSchema: 'hunter2' is bad",
            "the result failed its outputSchema",
        ),
        ("hunter2 is what the tool said", "the tool returned an error result"),
    ],
)
def test_a_failed_tool_test_is_recorded_by_category_only(registry: Registry, text: str, category: str) -> None:
    record_tool_test_failed(registry.db, "t", 1, error_result(text), actor="t")
    with registry.db.session() as session:
        (row,) = session.query(Change).filter(Change.kind == "tool_test")
        note = row.note or ""
    assert "hunter2" not in note
    assert note == category
