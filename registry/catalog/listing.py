"""What MCP list results show of an entry: its list item, computed from the stored definition.

One function per kind turns a stored version (``dump_spec`` output, as versions keep it) into
the item ``prompts/list``, ``resources/list``, ``resources/templates/list`` or ``tools/list``
returns. It lives in the catalog layer, not in the MCP one, because two places need the same
answer: the served snapshot lists these items, and a write compares the item of the version a
label served before with the one it serves now to record whether the list changed (so
``*/list_changed`` goes out only when what a client would list is different, not for a
template or content edit).

The functions read the stored mapping directly, without building the pydantic model: a
snapshot of 100,000 entries builds its listings in a fraction of the time, and keeps only these
small dicts (values shared with nothing else) instead of a model per entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The resource keys a list item shows when set (besides the name and the URI or URI template).
_RESOURCE_FIELDS = ("title", "description", "mimeType", "annotations")


def prompt_listing(stored: Mapping[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {"name": stored["name"]}
    if stored.get("title"):
        item["title"] = stored["title"]
    if stored.get("description"):
        item["description"] = stored["description"]
    arguments = []
    for arg in stored.get("arguments") or ():
        entry: dict[str, Any] = {"name": arg["name"]}
        if arg.get("title"):
            entry["title"] = arg["title"]
        if arg.get("description"):
            entry["description"] = arg["description"]
        entry["required"] = bool(arg.get("required", False))
        arguments.append(entry)
    item["arguments"] = arguments
    return item


def resource_listing(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A resource's item; a template resource's goes to ``resources/templates/list``."""
    item: dict[str, Any] = {"name": stored["name"]}
    if stored.get("uriTemplate"):
        item["uriTemplate"] = stored["uriTemplate"]
    else:
        item["uri"] = stored.get("uri")
    for key in _RESOURCE_FIELDS:
        value = stored.get(key)
        if value:
            item[key] = value
    return item


def tool_listing(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's item (its webhook, with the write-only values, is never part of it)."""
    item: dict[str, Any] = {"name": stored["name"]}
    if stored.get("title"):
        item["title"] = stored["title"]
    item["description"] = stored.get("description") or stored.get("title") or stored["name"]
    item["inputSchema"] = stored.get("inputSchema", {"type": "object", "properties": {}})
    if stored.get("outputSchema"):
        item["outputSchema"] = stored["outputSchema"]
    annotations = stored.get("annotations")
    if annotations is not None:
        item["annotations"] = {key: value for key, value in annotations.items() if value is not None}
    return item


LISTINGS = {"prompt": prompt_listing, "resource": resource_listing, "tool": tool_listing}


def listing(kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The list item of a stored ``kind`` definition."""
    return LISTINGS[kind](stored)


def listing_changed(
    kind: str,
    labels: Iterable[str],
    before: Mapping[str, Mapping[str, Any] | None],
    after: Mapping[str, Any] | None,
) -> list[str]:
    """The labels among ``labels`` whose list shows something different after a change.

    ``before[label]`` is the stored definition the label served (missing or None: the entry was
    not in its lists) and ``after`` the one it serves now (None: the entry left its lists). An
    entry that appears or disappears changes the list; one whose item stays equal does not.
    """
    new = None if after is None else listing(kind, after)
    changed = []
    for label in sorted(set(labels)):
        old_spec = before.get(label)
        old = None if old_spec is None else listing(kind, old_spec)
        if old != new:
            changed.append(label)
    return changed
