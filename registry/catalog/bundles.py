"""Import and export of YAML bundles: one readable file per entry.

Layout: ``prompts/<name>.yaml``, ``resources/<name>.yaml``, ``tools/<name>.yaml``. Export writes
each entry's latest version in its stored (canonical) form, a prompt with a single user text
message as the ``template:`` shorthand, and write-only values masked. Import compares each file
with the entry's latest version and writes only what differs, so importing a bundle twice, or
re-importing an export, changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from registry.catalog.errors import CatalogError, Invalid
from registry.catalog.secrets import MASK
from registry.catalog.service import CatalogService, ImportPlanItem, to_yaml
from registry.catalog.specs import KIND_BY_COLLECTION, dump_spec
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

COLLECTION_BY_KIND = {kind: collection for collection, kind in KIND_BY_COLLECTION.items()}


@dataclass(frozen=True)
class BundleFile:
    kind: str
    path: Path
    raw: dict[str, Any]


class _BundleLoader(yaml.SafeLoader):
    """Safe YAML without anchors and aliases: entries never need them, and aliases are how a small
    file expands into an enormous document (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in bundles", event.start_mark
            )
        return super().compose_node(parent, index)


def _load_yaml(path: Path, limits: Limits) -> Any:
    size = path.stat().st_size
    if size > limits.body_bytes:
        raise LimitExceeded("body_bytes", f"{path}: {size} bytes is larger than {limits.body_bytes}")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_BundleLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise Invalid(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise Invalid(f"{path}: nested too deeply") from None
    except UnicodeDecodeError:
        raise Invalid(f"{path}: not UTF-8 text") from None


def read_bundle(directory: Path, limits: Limits = DEFAULT_LIMITS) -> list[BundleFile]:
    """The entry files of a bundle folder, each parsed; bounded in file count, file size and total size."""
    if not directory.is_dir():
        raise Invalid(f"bundle folder {directory} does not exist")
    paths: list[tuple[str, Path]] = []
    for collection, kind in KIND_BY_COLLECTION.items():
        folder = directory / collection
        if not folder.is_dir():
            continue
        paths += [(kind, path) for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])]
        if len(paths) > limits.bundle_files:
            too_many = LimitExceeded("bundle_files", f"{directory} holds more than {limits.bundle_files} files")
            raise Invalid(str(too_many))
    total = 0
    files: list[BundleFile] = []
    for kind, path in paths:
        total += path.stat().st_size
        if total > limits.bundle_bytes:
            too_big = LimitExceeded("bundle_bytes", f"{directory} holds more than {limits.bundle_bytes} bytes")
            raise Invalid(str(too_big))
        try:
            raw = _load_yaml(path, limits)
        except LimitExceeded as exc:
            raise Invalid(str(exc)) from None
        if not isinstance(raw, dict):
            raise Invalid(f"{path}: expected a mapping at the top level")
        files.append(BundleFile(kind, path, raw))
    if not files:
        raise Invalid(f"{directory} holds no prompts/, resources/ or tools/ YAML files")
    return files


def _comparable(service: CatalogService, kind: str, stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The stored spec in the incoming file's terms: secrets decrypted, or masked where the file masks them."""
    revealed = service.reveal(kind, stored)
    if kind in ("tool", "resource"):  # a tool's webhook, an http resource's own headers
        hook_in = incoming.get("webhook", {}) if kind == "tool" else incoming
        hook = revealed.get("webhook", {}) if kind == "tool" else revealed
        for header, value in (hook_in.get("headers") or {}).items():
            if value == MASK and header in (hook.get("headers") or {}):
                hook["headers"][header] = MASK
        if hook_in.get("secret") == MASK and hook.get("secret"):
            hook["secret"] = MASK
    return revealed


def plan_import(service: CatalogService, directory: Path) -> list[tuple[ImportPlanItem, BundleFile]]:
    plan: list[tuple[ImportPlanItem, BundleFile]] = []
    seen: set[tuple[str, str]] = set()
    for bundle_file in read_bundle(directory, service.limits):
        try:
            spec = service.parse_spec(bundle_file.kind, bundle_file.raw)
        except CatalogError as exc:
            raise Invalid(f"{bundle_file.path}: {exc.detail}", errors=exc.errors) from None
        key = (bundle_file.kind, spec.name)
        if key in seen:
            raise Invalid(f"{bundle_file.path}: {bundle_file.kind} {spec.name!r} appears twice in the bundle")
        seen.add(key)
        incoming = dump_spec(spec)
        current = service.latest_stored(bundle_file.kind, spec.name)
        if current is None:
            action = "create"
        else:
            entry, stored = current
            same = _comparable(service, bundle_file.kind, stored, incoming) == incoming
            # An archived entry was retired on purpose; a bundle does not bring it back.
            action = "skip-archived" if entry.archived else ("unchanged" if same else "update")
        plan.append((ImportPlanItem(bundle_file.kind, spec.name, action, str(bundle_file.path)), bundle_file))
    return plan


def apply_import(
    service: CatalogService,
    directory: Path,
    *,
    actor: str,
    labels: list[str] | None = None,
    only_missing: bool = False,
) -> list[ImportPlanItem]:
    """Write the plan. ``only_missing`` (used for seeding at start-up) creates new entries but never
    overwrites an existing one, so a restart does not undo what admins edited since."""
    plan = plan_import(service, directory)
    note = f"imported from {directory.name}"
    done: list[ImportPlanItem] = []
    for item, bundle_file in plan:
        if item.action == "create":
            service.create(item.kind, bundle_file.raw, actor=actor, note=note, labels=labels)
        elif item.action == "update" and not only_missing:
            service.update(item.kind, item.name, bundle_file.raw, actor=actor, note=note, labels=labels)
        elif item.action == "update":
            item = ImportPlanItem(item.kind, item.name, "kept", item.source)
        done.append(item)
    return done


def _export_form(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    if kind == "prompt":
        messages = spec.get("messages", [])
        if len(messages) == 1 and messages[0]["role"] == "user" and messages[0]["content"].get("type") == "text":
            spec = {k: v for k, v in spec.items() if k != "messages"}
            spec["template"] = messages[0]["content"]["text"]
    return spec


def _write_new_text(path: Path, text: str) -> None:
    """Write ``path`` without following a symbolic link there: an export folder someone else could
    write to must not be able to redirect the export (which holds the catalog) onto another file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if path.is_symlink():
            raise Invalid(f"refusing to export to {path}: it is a symbolic link") from None
        raise Invalid(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def export_bundle(service: CatalogService, directory: Path) -> list[Path]:
    """Write every live entry's latest version; returns the files written."""
    written: list[Path] = []
    for kind, collection in COLLECTION_BY_KIND.items():
        offset = 0
        while True:
            page = service.list_entries(kind, limit=500, offset=offset)
            for item in page.items:
                view = service.get(kind, item["name"])
                folder = directory / collection
                if folder.is_symlink():
                    raise Invalid(f"refusing to export into {folder}: it is a symbolic link")
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"{view.name}.yaml"
                _write_new_text(path, to_yaml(_export_form(kind, view.spec)))
                written.append(path)
            offset += page.limit
            if offset >= page.total:
                break
    return written
