"""Definitions as a reader compares them: YAML with readable multi-line templates, and unified diffs
of two versions, whole and field by field."""

from __future__ import annotations

import difflib
import json
from typing import Any

import yaml


class _BlockDumper(yaml.SafeDumper):
    """YAML that keeps multi-line templates readable (literal blocks) for diffs and bundles."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _str_representer)


def to_yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


def version_diff(kind: str, name: str, from_version: int, to_version: int, old: Any, new: Any) -> dict[str, Any]:
    """How version ``to_version`` (``new``, as shown) differs from ``from_version`` (``old``): the
    fields that changed, a unified diff per field, and one of the whole definition as YAML."""
    sections: dict[str, str] = {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            old_text, new_text = field_text(old.get(key)), field_text(new.get(key))
            if old_text == new_text:  # they differ in a final newline only: show both as JSON strings
                old_text, new_text = json.dumps(old.get(key)) + "\n", json.dumps(new.get(key)) + "\n"
            sections[key] = _unified_text(old_text, new_text, f"v{from_version}/{key}", f"v{to_version}/{key}")
    return {
        "kind": kind,
        "name": name,
        "from": from_version,
        "to": to_version,
        "changed": sorted(sections),
        "fields": sections,
        "diff": _unified(old, new, f"{name}@v{from_version}", f"{name}@v{to_version}"),
    }


def _unified(old: Any, new: Any, from_name: str, to_name: str) -> str:
    old_text = "" if old is None else to_yaml(old)
    new_text = "" if new is None else to_yaml(new)
    return _unified_text(old_text, new_text, from_name, to_name)


def field_text(value: Any) -> str:
    """One field as a reader compares it: text as itself (a template line by line), objects and
    lists as YAML, other scalars as JSON; never YAML's ``...`` document end marker, which a bare
    scalar would get."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict | list):
        text = to_yaml(value)
    else:
        text = json.dumps(value)
    return text if text.endswith("\n") or not text else text + "\n"


def _unified_text(old_text: str, new_text: str, from_name: str, to_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=from_name, tofile=to_name
        )
    )
