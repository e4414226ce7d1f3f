"""Side-by-side diffs of two versions, field by field, rendered on the server.

Why not a JavaScript diff viewer: the diff page must read with JavaScript off, and the catalog
already knows what a field looks like as text. Python's ``difflib`` (standard library) pairs the
lines; this module only shapes its opcodes into rows for a two-column table: unchanged runs are
folded to a few lines of context around each change, and a changed line pair is diffed again by
characters so the exact edit is marked. Both sides are masked versions (write-only values show
as ``********``), so a diff never reveals a secret; a replaced secret does not show as a change.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.catalog.diffs import field_text

#: Unchanged lines kept around each change; longer unchanged runs fold into one "n lines" row.
CONTEXT_LINES = 3
#: Lines longer than this are not diffed by character (quadratic in the worst case); they are
#: marked as changed whole.
INTRALINE_CHARS = 2000
#: Past this many lines on a side, a field is compared by lines without the extra effort of
#: ``difflib``'s junk heuristics being turned off (which is quadratic for large inputs).
LARGE_FIELD_LINES = 5000
#: Words, runs of spaces, and single other characters: what a changed line is diffed by.
_WORDS = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class Segment:
    text: str
    changed: bool = False


@dataclass(frozen=True)
class Row:
    """One row of the table: ``kind`` is equal, delete, insert, replace or fold."""

    kind: str
    left_no: int | None = None
    left: tuple[Segment, ...] = ()
    right_no: int | None = None
    right: tuple[Segment, ...] = ()
    #: For ``fold`` rows: how many unchanged lines are not shown.
    folded: int = 0


@dataclass
class FieldDiff:
    name: str
    rows: list[Row] = field(default_factory=list)
    added: int = 0
    removed: int = 0


def _intraline(old: str, new: str) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """A changed line pair, diffed by words (a character diff of "first" and "second" marks
    scattered letters; people read edits as words)."""
    if len(old) > INTRALINE_CHARS or len(new) > INTRALINE_CHARS:
        return (Segment(old, True),), (Segment(new, True),)
    old_words, new_words = _WORDS.findall(old), _WORDS.findall(new)
    matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=False)
    left: list[Segment] = []
    right: list[Segment] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        changed = tag != "equal"
        if i2 > i1:
            left.append(Segment("".join(old_words[i1:i2]), changed))
        if j2 > j1:
            right.append(Segment("".join(new_words[j1:j2]), changed))
    return tuple(left), tuple(right)


def _rows(old_lines: list[str], new_lines: list[str]) -> Iterator[Row]:
    large = max(len(old_lines), len(new_lines)) > LARGE_FIELD_LINES
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=large)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(i2 - i1):
                yield Row(
                    "equal",
                    i1 + offset + 1,
                    (Segment(old_lines[i1 + offset]),),
                    j1 + offset + 1,
                    (Segment(new_lines[j1 + offset]),),
                )
        elif tag == "delete":
            for i in range(i1, i2):
                yield Row("delete", i + 1, (Segment(old_lines[i], True),))
        elif tag == "insert":
            for j in range(j1, j2):
                yield Row("insert", right_no=j + 1, right=(Segment(new_lines[j], True),))
        else:  # replace: pair the lines up, the rest are deletions or insertions
            pairs = min(i2 - i1, j2 - j1)
            for k in range(pairs):
                left, right = _intraline(old_lines[i1 + k], new_lines[j1 + k])
                yield Row("replace", i1 + k + 1, left, j1 + k + 1, right)
            for i in range(i1 + pairs, i2):
                yield Row("delete", i + 1, (Segment(old_lines[i], True),))
            for j in range(j1 + pairs, j2):
                yield Row("insert", right_no=j + 1, right=(Segment(new_lines[j], True),))


def _fold(rows: list[Row], context: int) -> list[Row]:
    """Keep ``context`` unchanged rows around each change; fold longer unchanged runs."""
    changed = [i for i, row in enumerate(rows) if row.kind != "equal"]
    if not changed:
        return []
    keep = [False] * len(rows)
    for i in changed:
        for j in range(max(0, i - context), min(len(rows), i + context + 1)):
            keep[j] = True
    folded: list[Row] = []
    skipped: list[Row] = []

    def flush() -> None:
        if len(skipped) == 1:  # folding one line saves no space: show it instead
            folded.extend(skipped)
        else:
            folded.append(Row("fold", folded=len(skipped)))
        skipped.clear()

    for i, row in enumerate(rows):
        if keep[i]:
            if skipped:
                flush()
            folded.append(row)
        else:
            skipped.append(row)
    if skipped:
        flush()
    return folded


def diff_texts(name: str, old: str, new: str, *, context: int = CONTEXT_LINES) -> FieldDiff:
    rows = list(_rows(old.splitlines(), new.splitlines()))
    result = FieldDiff(name, _fold(rows, context))
    result.added = sum(1 for r in rows if r.kind in ("insert", "replace"))
    result.removed = sum(1 for r in rows if r.kind in ("delete", "replace"))
    return result


def diff_specs(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[FieldDiff], list[str]]:
    """(the fields that differ, each as rows; the names of the fields that are the same)."""
    changed: list[FieldDiff] = []
    same: list[str] = []
    for key in _field_order(old, new):
        if old.get(key) == new.get(key):
            same.append(key)
            continue
        old_text, new_text = field_text(old.get(key)), field_text(new.get(key))
        if old_text == new_text:  # differ only in a final newline: compare them as JSON strings
            old_text, new_text = json.dumps(old.get(key)) + "\n", json.dumps(new.get(key)) + "\n"
        changed.append(diff_texts(key, old_text, new_text))
    return changed, same


def _field_order(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The definition's own order (name, title, description, ... as saved), then any others."""
    ordered = list(new)
    ordered.extend(k for k in old if k not in new)
    return ordered
