"""JSON Merge Patch (RFC 7396): how ``PATCH /{kind}/{name}`` edits part of an entry.

A patch is a JSON document shaped like the entry: members it names replace the entry's, nested
objects merge recursively, ``null`` removes a member, and arrays (and every other value) replace
whole. So ``{"description": "new"}`` changes the description and keeps everything else, which a
full-replace ``PUT`` of the same body would have dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied, per RFC 7396 section 2 (neither argument is modified)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result
