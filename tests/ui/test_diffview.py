"""The side-by-side diff rows (registry/ui/diffview.py): folding, word marks, field order."""

from __future__ import annotations

from registry.ui.diffview import CONTEXT_LINES, diff_specs, diff_texts, field_text


def _text(segments: tuple[object, ...]) -> str:
    return "".join(s.text for s in segments)  # type: ignore[attr-defined]


def test_unchanged_runs_fold_to_context_around_each_change() -> None:
    old = "".join(f"line {i}\n" for i in range(40))
    new = old.replace("line 20\n", "line twenty\n")
    rows = diff_texts("text", old, new).rows
    kinds = [r.kind for r in rows]
    assert kinds == ["fold", *["equal"] * CONTEXT_LINES, "replace", *["equal"] * CONTEXT_LINES, "fold"]
    assert rows[0].folded == 20 - CONTEXT_LINES and rows[-1].folded == 19 - CONTEXT_LINES
    changed = rows[1 + CONTEXT_LINES]
    assert (changed.left_no, changed.right_no) == (21, 21)
    assert [s.text for s in changed.left if s.changed] == ["20"]
    assert [s.text for s in changed.right if s.changed] == ["twenty"]


def test_a_single_unchanged_line_is_shown_not_folded() -> None:
    old = "a\nb\nc\nd\ne\nf\ng\nh\ni\n"
    new = "A\nb\nc\nd\ne\nf\ng\nh\nI\n"
    rows = diff_texts("text", old, new).rows
    assert "fold" not in [r.kind for r in rows] and len(rows) == 9


def test_added_and_removed_lines_have_an_empty_other_side() -> None:
    result = diff_texts("text", "keep\ngone\n", "keep\nnew one\nnew two\n")
    assert [r.kind for r in result.rows] == ["equal", "replace", "insert"]
    assert result.rows[2].left_no is None and _text(result.rows[2].right) == "new two"
    assert (result.added, result.removed) == (2, 1)


def test_fields_compare_as_text_yaml_or_json_in_the_definitions_order() -> None:
    old = {"name": "p", "description": "old", "arguments": [{"name": "a"}], "timeout": 1}
    new = {"name": "p", "description": "new", "arguments": [{"name": "a"}, {"name": "b"}], "timeout": 2}
    changed, same = diff_specs(old, new)
    assert [f.name for f in changed] == ["description", "arguments", "timeout"] and same == ["name"]
    assert field_text([{"name": "a"}]) == "- name: a\n" and field_text(2) == "2\n" and field_text(None) == ""


def test_a_change_of_the_final_newline_only_is_still_shown() -> None:
    changed, _ = diff_specs({"text": "x"}, {"text": "x\n"})
    assert len(changed) == 1 and changed[0].rows
