"""Import and export of YAML bundles: one readable file per entry.

Two layouts
-----------
*Entry bundle*: ``prompts/<name>.yaml``, ``resources/<name>.yaml``, ``tools/<name>.yaml``, each one
entry in the form the admin API takes (a prompt with a single user text message as the
``template:`` shorthand). What people write, what ``export`` writes by default (each live entry's
newest version) and with ``--label L`` (the version label ``L`` serves; entries without it are left
out).

*History bundle* (``export --all-versions``): ``history/<prompts|resources|tools>/<name>.yaml``, each
one entry with every version (number, author, note, timestamp, definition), its labels and whether
it is archived; see ``registry.catalog.bundle_history`` for the file. It moves a catalog to another
instance.

An export that carries write-only values encrypted or as environment references, and every
history export, also writes ``export.yaml`` (what was exported, how its secrets are carried, the
key check, the environment variables) and ``README.md`` (the same for people). How write-only
values travel: ``registry.catalog.bundle_secrets``.

Import
------
Every file is read and validated before anything is written, and *every* problem is reported
(file, field and line), not just the first. Then:

* an entry bundle is compared with the catalog's newest versions: new entries are created,
  differing ones get a new version (moving ``latest`` and the import's labels, default
  ``production``), equal ones are left alone, and so are archived ones (retired on purpose);
* a history bundle restores each entry exactly (versions numbered, authored and dated as
  exported, labels, archived state) into a catalog that does not have it. An entry the catalog
  already has with the same newest version, labels and archived state is "unchanged"; any other
  existing entry is a conflict, and the import is refused: histories are not merged (import an
  entry bundle to add a version to an existing entry instead).

The writes happen in one transaction (``bulk.BulkWriter.import_heads`` / ``restore_histories``): a
bundle is imported whole or not at all, with one change-log range and one notification burst.
Importing a bundle twice, or re-importing an export, changes nothing.

Protected labels (stored in the catalog, ``registry.catalog.protection``) are never moved by an
import: the same transaction opens a change request per entry and protected label instead, as a
save does (only the start-up seed of an empty catalog publishes). The plan says beforehand which
labels of each written entry go live and which go to review (``PlannedEntry.live`` / ``review``).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from sqlalchemy.orm import Session

from registry import __version__
from registry.catalog import bulk
from registry.catalog.bundle_history import HistoryFile, history_document
from registry.catalog.bundle_secrets import EXPORT_KEY_ENV, ExportSecrets, ImportSecrets, has_secrets, masked_fields
from registry.catalog.diffs import to_yaml
from registry.catalog.errors import CatalogError, Conflict, Invalid
from registry.catalog.protection import ProtectionPolicy
from registry.catalog.secrets import MASK, SecretKeyError
from registry.catalog.service import CatalogService
from registry.catalog.specs import KIND_BY_COLLECTION, Spec, dump_spec
from registry.db.audit import Actor
from registry.db.engine import Database
from registry.limits import LimitExceeded, Limits

COLLECTION_BY_KIND = {kind: collection for collection, kind in KIND_BY_COLLECTION.items()}
HISTORY = "history"
MANIFEST = "export.yaml"
README = "README.md"
FORMAT = "mcp-registry-bundle/1"
#: Entries compared with the catalog per read transaction.
PLAN_SLICE = 5000


class _ExportDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """What ``to_yaml`` writes (multi-line strings as literal blocks), emitted by libyaml when
    present: the same text, several times faster, which an export of 100,000 entries notices."""


def _literal_blocks(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ExportDumper.add_representer(str, _literal_blocks)


def _dump(value: Any) -> str:
    return yaml.dump(value, Dumper=_ExportDumper, sort_keys=False, allow_unicode=True, width=100)


# ------------------------------------------------------------------ problems


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one bundle file: ``<path>:<line>: <field>: <message>``."""

    path: Path
    message: str
    field: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "line": self.line, "loc": self.field or "", "msg": self.message}


def _refuse(problems: list[Problem], files: int) -> Invalid:
    bad = len({p.path for p in problems})
    listing = "\n".join(f"  {p}" for p in problems)
    return Invalid(
        f"{bad} of {files} bundle files are invalid; nothing was written:\n{listing}",
        errors=[p.as_dict() for p in problems],
    )


# ------------------------------------------------------------------ reading files


class _UniqueKeys:
    """Refuses a mapping that names one key twice. YAML's loaders keep the last value silently, so a
    reviewer reading a pull request would see the first ``description:`` while the catalog got the
    second; every bundle reader (import, ``lint``, ``plan``, ``push``) refuses instead, with the line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # type: ignore[attr-defined]  # merge keys (<<) first, as SafeConstructor does
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeConstructor refuses it with its own message
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} appears twice (a second value would silently replace the first)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)  # type: ignore[misc]


_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)
#: libyaml's parser with the key check (its constructor is Python: the subclass applies to both).
_yaml_c_loader: Any = type("_UniqueKeysCLoader", (_UniqueKeys, _CSafeLoader), {}) if _CSafeLoader else None


class _BundleLoader(_UniqueKeys, yaml.SafeLoader):
    """Safe YAML without anchors and aliases: entries never need them, and aliases are how a small
    file expands into an enormous document (the "billion laughs"). Keys are unique (``_UniqueKeys``)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in bundles", event.start_mark
            )
        return super().compose_node(parent, index)


def _parse_yaml(text: str) -> Any:
    """libyaml when the text cannot hold an alias (no ``*`` anywhere: an alias is ``*name``), the
    alias-refusing pure-Python loader otherwise; the first is several times faster."""
    if _yaml_c_loader is not None and "*" not in text:
        return yaml.load(text, Loader=_yaml_c_loader)
    return yaml.load(text, Loader=_BundleLoader)  # a SafeLoader subclass


class _Locator:
    """Maps a field path (pydantic's ``loc``) to its line in the file; the file is composed only
    when a problem needs a line, so valid files are parsed once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._root: Any = None
        self._composed = False

    def line(self, loc: Sequence[str]) -> int | None:
        if not self._composed:
            self._composed = True
            try:
                self._root = yaml.compose(self.text, Loader=_BundleLoader)
            except (yaml.YAMLError, RecursionError):
                self._root = None
        node = self._root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                pair = _key(node, part)
                if pair is None and part == "messages":
                    shorthand = _key(node, "template")  # the prompt was written with ``template:``
                    if shorthand is not None:
                        return int(shorthand[0].start_mark.line) + 1
                if pair is None:
                    continue  # e.g. a union's tag in the loc; or a missing field: its parent's line
                line, node = pair[0].start_mark.line + 1, pair[1]
            elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
                node = node.value[int(part)]
                line = node.start_mark.line + 1
        return int(line)

    def field(self, loc: Sequence[str]) -> str:
        """``loc`` as the file spells it: a prompt written with ``template:`` has no ``messages``."""
        self.line(())  # composes the file once
        node = self._root
        for index, part in enumerate(loc):
            if isinstance(node, yaml.MappingNode):
                pair = _key(node, part)
                if pair is None and part == "messages" and _key(node, "template") is not None:
                    return ".".join([*loc[:index], "template"])
                node = pair[1] if pair is not None else None
            elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
                node = node.value[int(part)]
            else:
                break
        return ".".join(loc)


def _key(node: yaml.MappingNode, name: str) -> tuple[Any, Any] | None:
    return next((pair for pair in node.value if isinstance(pair[0], yaml.ScalarNode) and pair[0].value == name), None)


@dataclass(frozen=True)
class _Source:
    kind: str
    path: Path


def _collect(root: Path, limits: Limits, already: int) -> list[_Source]:
    sources: list[_Source] = []
    for collection, kind in KIND_BY_COLLECTION.items():
        folder = root / collection
        if not folder.is_dir():
            continue
        sources += [_Source(kind, p) for p in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])]
        if already + len(sources) > limits.bundle_files:
            too_many = LimitExceeded("bundle_files", f"{root} holds more than {limits.bundle_files} files")
            raise Invalid(str(too_many))
    return sources


def _list_files(directory: Path, limits: Limits) -> tuple[str, list[_Source]]:
    """("entries" or "history", the files), bounded in file count and total size."""
    if not directory.is_dir():
        raise Invalid(f"bundle folder {directory} does not exist")
    entries = _collect(directory, limits, 0)
    history = _collect(directory / HISTORY, limits, len(entries)) if (directory / HISTORY).is_dir() else []
    if entries and history:
        raise Invalid(
            f"{directory} holds both entry files (prompts/, resources/, tools/) and a {HISTORY}/ folder; "
            "import one layout at a time"
        )
    sources = history or entries
    if not sources:
        raise Invalid(f"{directory} holds no prompts/, resources/ or tools/ YAML files")
    total = 0
    for source in sources:
        total += source.path.stat().st_size
        if total > limits.bundle_bytes:
            raise Invalid(
                str(LimitExceeded("bundle_bytes", f"{directory} holds more than {limits.bundle_bytes} bytes"))
            )
    return ("history" if history else "entries"), sources


def _load(source: _Source, limits: Limits) -> tuple[str, dict[str, Any]] | Problem:
    path = source.path
    size = path.stat().st_size
    if size > limits.body_bytes:
        return Problem(path, str(LimitExceeded("body_bytes", f"{size} bytes is larger than {limits.body_bytes}")))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return Problem(path, "not UTF-8 text")
    try:
        raw = _parse_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        return Problem(path, f"not valid YAML: {what}", line=mark.line + 1 if mark else None)
    except yaml.YAMLError as exc:
        return Problem(path, f"not valid YAML: {exc}")
    except RecursionError:
        return Problem(path, "nested too deeply")
    if not isinstance(raw, dict):
        return Problem(path, "expected a mapping at the top level", line=1)
    return text, raw


_TEMPLATE_DETAIL = re.compile(r"invalid \w+ template: ([A-Za-z0-9_.\[\]]+): (.*)", re.DOTALL)


def _spec_problems(path: Path, locate: _Locator, exc: CatalogError, prefix: Sequence[str] = ()) -> list[Problem]:
    """A refused definition as problems, each with its field and line."""
    if exc.errors:
        problems = []
        for error in exc.errors:
            loc = [*prefix, *(part for part in str(error.get("loc") or "").split(".") if part)]
            problems.append(Problem(path, str(error.get("msg")), locate.field(loc) or None, locate.line(loc)))
        return problems
    found = _TEMPLATE_DETAIL.fullmatch(exc.detail)
    if found is not None:  # "invalid prompt template: messages[0].content.text: line 2: ..."
        loc = [*prefix, *(part for part in re.split(r"[.\[\]]+", found.group(1)) if part)]
        message = found.group(2)
        inner = re.match(r"line (\d+): (.*)", message, re.DOTALL)
        if inner is not None:  # the template's own line, not the file's
            message = f"{inner.group(2)} (line {inner.group(1)} of the template)"
        return [Problem(path, message, locate.field(loc), locate.line(loc))]
    return [Problem(path, exc.detail, ".".join(prefix) or None, locate.line(prefix) if prefix else None)]


def _resolve(
    secrets: ImportSecrets, kind: str, raw: dict[str, Any], path: Path, locate: _Locator, prefix: Sequence[str] = ()
) -> list[Problem]:
    problems = []
    for where, message in secrets.resolve(kind, raw):
        loc = [*prefix, *where.split(".")]
        problems.append(Problem(path, message, ".".join(loc), locate.line(loc)))
    return problems


def _read_manifest(directory: Path, secrets: ImportSecrets) -> None:
    """Check ``export.yaml`` when the bundle has one: its format, and that the export key fits."""
    path = directory / MANIFEST
    if not path.is_file():
        return
    try:
        manifest = yaml.load(path.read_text(encoding="utf-8"), Loader=_BundleLoader)
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise Invalid(f"{path}: not a valid manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise Invalid(f"{path}: not a bundle manifest this version reads (format: {FORMAT})")
    check = (manifest.get("secrets") or {}).get("key_check")
    problem = secrets.check_key(check if isinstance(check, str) else None)
    if problem is not None:
        raise Invalid(f"{path}: {problem}")


# ------------------------------------------------------------------ plans


@dataclass(frozen=True)
class ImportPlanItem:
    kind: str
    name: str
    action: str  # create | update | unchanged | restore+update
    source: str = ""
    #: Labels the import points at what it writes at once (``latest`` not listed).
    live: tuple[str, ...] = ()
    #: Protected labels it would move: they stay where they are, and a change request each asks
    #: reviewers to move them (opened by the import).
    review: tuple[str, ...] = ()
    #: Once applied: the change requests opened (or already pending) for ``review``.
    change_requests: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlannedEntry:
    """One bundle file and what importing it would do."""

    kind: str
    name: str
    path: Path
    action: str
    #: The incoming definition (for a history file: its newest version), canonical, write-only
    #: values in the clear (or masked, meaning "keep the stored ones").
    spec: dict[str, Any]
    #: The catalog's newest version of the entry, for an update (what the diff and the write need).
    head: bulk.StoredHead | None = None
    #: What would be stored (write-only values sealed), for create and update.
    sealed: dict[str, Any] | None = None
    #: A history file: the whole entry to restore.
    history: bulk.HistoryWrite | None = None
    #: Labels the write points at once, and protected labels that go to review instead
    #: (``with_protection``; empty for entries the import does not write).
    live: tuple[str, ...] = ()
    review: tuple[str, ...] = ()

    @property
    def item(self) -> ImportPlanItem:
        return ImportPlanItem(self.kind, self.name, self.action, str(self.path), self.live, self.review)


@dataclass(frozen=True)
class _Incoming:
    kind: str
    name: str
    path: Path
    spec: dict[str, Any]
    #: Masked write-only values (field -> line): fine for an update, a problem for a create.
    masked: dict[str, int | None] = field(default_factory=dict)
    #: Resources: the line of ``uri``/``uriTemplate``, for a URI another resource holds.
    uri_line: int | None = None
    #: A history file: the whole entry to restore.
    history: bulk.HistoryWrite | None = None


def _identity_uri(spec: dict[str, Any]) -> str:
    return str(spec.get("uri") or spec.get("uriTemplate") or "")


def _top_level_line(text: str, keys: Sequence[str]) -> int | None:
    """The line of the first top-level ``key:`` of a YAML text (without composing it)."""
    found = re.search(rf"^(?:{'|'.join(map(re.escape, keys))})\s*:", text, re.MULTILINE)
    return text.count("\n", 0, found.start()) + 1 if found else None


def _uri_problems(entry: _Incoming, owners: dict[str, str], seen: dict[str, Path]) -> list[Problem]:
    if entry.kind != "resource":
        return []
    uri = _identity_uri(entry.spec)
    where = "uriTemplate" if entry.spec.get("uriTemplate") else "uri"
    problems = []
    if uri in seen:
        problems.append(Problem(entry.path, f"{uri!r} is also the URI of {seen[uri]}", where, entry.uri_line))
    seen.setdefault(uri, entry.path)
    owner = owners.get(uri)
    if owner is not None and owner != entry.name:
        problems.append(Problem(entry.path, f"resource {owner!r} already uses {uri!r}", where, entry.uri_line))
    return problems


def with_protection(
    plan: list[PlannedEntry],
    *,
    labels: Sequence[str],
    protected: Mapping[str, int],
    publish_protected: bool = False,
) -> list[PlannedEntry]:
    """The plan with each written entry's ``live`` and ``review`` labels: those of ``labels`` (an
    entry bundle's targets) or of the history file that are ``protected`` go to review (a change
    request each) unless ``publish_protected`` (the seed of an empty catalog); the rest go live."""
    held = {} if publish_protected else protected
    done: list[PlannedEntry] = []
    for entry in plan:
        if entry.action not in ("create", "update", "restore"):
            done.append(entry)
            continue
        wanted = sorted(entry.history.labels) if entry.history is not None else list(labels)
        live = tuple(label for label in wanted if label not in held)
        review = tuple(label for label in wanted if label in held)
        done.append(replace(entry, live=live, review=review))
    return done


def _with_requests(plan: list[PlannedEntry], written: bulk.ImportWritten) -> list[ImportPlanItem]:
    return [
        replace(entry.item, change_requests=tuple(written.change_requests.get((entry.kind, entry.name), ())))
        for entry in plan
    ]


# ------------------------------------------------------------------ export files


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


def _folder(root: Path, *parts: str) -> Path:
    """``root/parts...``, created, refusing to go through a symbolic link on the way (see above)."""
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise Invalid(f"refusing to export into {path}: it is a symbolic link")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class ExportResult:
    #: The entry files written.
    files: list[Path] = field(default_factory=list)
    #: ``export.yaml`` and ``README.md`` when written.
    extras: list[Path] = field(default_factory=list)
    #: env mode: variable -> where it is used.
    variables: dict[str, list[str]] = field(default_factory=dict)


def _check_secret_mode(found: list[str], secrets: ExportSecrets | None, *, all_versions: bool) -> None:
    if not found:
        return
    shown = ", ".join(found[:10]) + (f" and {len(found) - 10} more" if len(found) > 10 else "")
    if secrets is None:
        raise Invalid(
            f"{len(found)} entries hold write-only values (header values, signing secrets): {shown}. Choose how "
            f"to export them: --secrets-key KEY (or {EXPORT_KEY_ENV}=KEY) encrypts them under a key you give, and "
            "the import needs the same key; --secrets env writes ${env:NAME} references the import resolves from "
            f"its environment (the names are listed); --secrets mask writes {MASK}, which only a re-import into "
            "this same catalog can use"
        )
    if all_versions and secrets.mode == "mask":
        raise Invalid(
            f"{len(found)} entries hold write-only values ({shown}): a history export cannot mask them, since "
            "the import must restore them; use --secrets-key KEY or --secrets env"
        )


def _write_entry(root: Path, folder: tuple[str, ...], name: str, document: dict[str, Any]) -> Path:
    path = _folder(root, *folder) / f"{name}.yaml"
    _write_new_text(path, _dump(document))
    return path


def _readme(source: str, mode: str, counts: dict[str, int], variables: dict[str, list[str]]) -> str:
    total = ", ".join(f"{n} {kind}s" for kind, n in counts.items())
    lines = [
        "# mcp-registry export",
        "",
        f"Exported: {source} ({total}). Import it with `mcp-registry import <this folder>`"
        + (" into a catalog that does not have these entries yet." if source == "all-versions" else "."),
        "",
    ]
    if mode == "key":
        lines += [
            "Header values and signing secrets are encrypted (`${enc:...}`) under the export key: pass the same",
            f"key to the import with `--secrets-key KEY` or `{EXPORT_KEY_ENV}=KEY`.",
        ]
    elif mode == "env":
        lines += [
            "Header values and signing secrets are references (`${env:NAME}`) that the import resolves from its",
            "environment. Set these variables before importing:",
            "",
            *[f"- `{name}`: {'; '.join(uses)}" for name, uses in variables.items()],
        ]
        if not variables:
            lines.append("- (none: no exported entry holds write-only values)")
    else:
        lines.append("No exported entry holds write-only values.")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ reading: one pass over the files


class BundleReader:
    """Reads and validates a bundle's files, with no catalog: ``parse_spec`` validates a definition
    (the catalog's, or ``SpecValidator.parse_spec`` for the offline ``mcp-registry lint``), ``seal``
    gives a history version its stored form (the identity when nothing is stored)."""

    def __init__(
        self,
        parse_spec: Callable[[str, Mapping[str, Any]], Spec],
        limits: Limits,
        seal: Callable[[str, dict[str, Any], dict[str, Any] | None], dict[str, Any]] | None = None,
    ) -> None:
        self.parse_spec = parse_spec
        self.limits = limits
        self.seal = seal if seal is not None else (lambda _kind, spec, _previous: spec)

    def read_folder(
        self, directory: Path, secrets: ImportSecrets
    ) -> tuple[str, list[_Source], list[_Incoming], list[Problem]]:
        """The layout (``entries`` or ``history``), the files, the valid entries and every problem
        of the others. Raises ``Invalid`` for what stops the reading (no folder, a limit, a bad manifest)."""
        layout, sources = _list_files(directory, self.limits)
        _read_manifest(directory, secrets)
        problems: list[Problem] = []
        incoming = self.read(sources, secrets, problems, history=layout == "history")
        return layout, sources, incoming, problems

    def read(
        self, sources: list[_Source], secrets: ImportSecrets, problems: list[Problem], *, history: bool
    ) -> list[_Incoming]:
        """Every file (entry files, or ``history`` files) parsed and validated, in one pass: the
        valid entries, and ``problems`` extended with everything wrong with the others."""
        incoming: list[_Incoming] = []
        first_seen: dict[tuple[str, str], Path] = {}
        parse = self._parse_history if history else self._parse_entry
        for source in sources:
            loaded = _load(source, self.limits)
            if isinstance(loaded, Problem):
                problems.append(loaded)
                continue
            text, raw = loaded
            locate = _Locator(text)
            entry = parse(source, text, raw, locate, secrets, problems)
            if entry is None:
                continue
            key = (source.kind, entry.name)
            if key in first_seen:
                twice = f"{source.kind} {entry.name!r} appears twice in the bundle (also in {first_seen[key]})"
                problems.append(Problem(source.path, twice, "name", locate.line(["name"])))
                continue
            first_seen[key] = source.path
            incoming.append(entry)
        return incoming

    def _parse_entry(
        self,
        source: _Source,
        text: str,
        raw: dict[str, Any],
        locate: _Locator,
        secrets: ImportSecrets,
        problems: list[Problem],
    ) -> _Incoming | None:
        """An entry file: one definition, as the admin API takes it."""
        unresolved = _resolve(secrets, source.kind, raw, source.path, locate)
        if unresolved:
            problems += unresolved
            return None
        try:
            spec = dump_spec(self.parse_spec(source.kind, raw))
        except CatalogError as exc:
            problems += _spec_problems(source.path, locate, exc)
            return None
        masked = {where: locate.line(where.split(".")) for where in masked_fields(source.kind, spec)}
        uri_line = _top_level_line(text, ("uri", "uriTemplate")) if source.kind == "resource" else None
        return _Incoming(source.kind, spec["name"], source.path, spec, masked, uri_line)

    def _parse_history(
        self,
        source: _Source,
        text: str,
        raw: dict[str, Any],
        locate: _Locator,
        secrets: ImportSecrets,
        problems: list[Problem],
    ) -> _Incoming | None:
        """A history file (``registry.catalog.bundle_history``): every version validated and sealed."""
        try:
            history = HistoryFile.model_validate(raw)
        except ValidationError as exc:
            for error in exc.errors():
                loc = [str(part) for part in error["loc"]]
                message = error["msg"].removeprefix("Value error, ")
                problems.append(Problem(source.path, message, ".".join(loc) or None, locate.line(loc)))
            return None
        records: list[bulk.VersionRecord] = []
        newest: dict[str, Any] = {}
        before = len(problems)
        note_cap = self.limits.change_note_chars
        for index, version in enumerate(history.versions):
            prefix = ["versions", str(index), "spec"]
            spec_raw = version.spec
            if spec_raw.setdefault("name", history.name) != history.name:
                loc = [*prefix, "name"]
                message = f"names {spec_raw['name']!r}, not {history.name!r}"
                problems.append(Problem(source.path, message, ".".join(loc), locate.line(loc)))
                continue
            if version.note is not None and len(version.note) > note_cap:
                loc = ["versions", str(index), "note"]
                refusal = LimitExceeded(
                    "change_note_chars", f"note has {len(version.note)} characters; at most {note_cap}"
                )
                problems.append(Problem(source.path, str(refusal), ".".join(loc), locate.line(loc)))
            unresolved = _resolve(secrets, source.kind, spec_raw, source.path, locate, prefix)
            masked = masked_fields(source.kind, spec_raw)
            if unresolved or masked:
                problems += unresolved
                problems += [
                    Problem(
                        source.path,
                        f"is masked ({MASK}): a history import needs the values themselves (export with "
                        "--secrets-key or --secrets env)",
                        ".".join([*prefix, where]),
                        locate.line([*prefix, *where.split(".")]),
                    )
                    for where in masked
                ]
                continue
            try:
                newest = dump_spec(self.parse_spec(source.kind, spec_raw))
            except CatalogError as exc:
                problems += _spec_problems(source.path, locate, exc, prefix)
                continue
            sealed = self.seal(source.kind, newest, None)
            records.append(
                bulk.VersionRecord(version.version, sealed, version.author, version.note, version.created_at)
            )
        if len(problems) > before:
            return None
        labels = {k: v for k, v in history.labels.items() if k != "latest"}
        write = bulk.HistoryWrite(
            source.kind, history.name, records, labels, history.archived, history.created_at, history.updated_at
        )
        return _Incoming(source.kind, history.name, source.path, newest, history=write)


# ------------------------------------------------------------------ the service


class BundleService:
    """Bundles in and out of one catalog: files validated and parsed by the catalog's own rules
    (``catalog``), planned against what it holds, written whole by ``bulk.BulkWriter``, with its
    protected labels (``protection``) held for review."""

    def __init__(self, db: Database, catalog: CatalogService, protection: ProtectionPolicy) -> None:
        self.db = db
        self.catalog = catalog
        self.protection = protection
        self.limits = catalog.limits
        self.writer = bulk.BulkWriter(db, catalog, protection)
        self.reader = BundleReader(catalog.parse_spec, self.limits, catalog.seal)

    @contextmanager
    def bulk_reader(self) -> Iterator[Session]:
        """One read transaction for a bundle plan or an export: a consistent view of the catalog,
        read with the few set-based queries of ``registry.catalog.bulk``."""
        with self.db.session() as session:
            yield session

    def protected_now(self, labels: Iterable[str] | None = None) -> dict[str, int]:
        """Which of ``labels`` (all when None) are protected now, for a plan; the write decides
        again in its own transaction."""
        with self.db.session() as session:
            return self.protection.protected_in(session, labels)

    # -------------------------------------------------------------- planning

    def _comparable(self, kind: str, stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
        """The stored spec in the incoming file's terms: secrets decrypted, or masked where the file masks them."""
        revealed = self.catalog.reveal(kind, stored)
        if kind in ("tool", "resource"):  # a tool's webhook, an http resource's own headers
            hook_in = incoming.get("webhook", {}) if kind == "tool" else incoming
            hook = revealed.get("webhook", {}) if kind == "tool" else revealed
            for header, value in (hook_in.get("headers") or {}).items():
                if value == MASK and header in (hook.get("headers") or {}):
                    hook["headers"][header] = MASK
            if hook_in.get("secret") == MASK and hook.get("secret"):
                hook["secret"] = MASK
        return revealed

    def _catalog_state(
        self, incoming: Sequence[_Incoming], *, against_empty: bool, with_labels: bool = False
    ) -> tuple[dict[str, dict[str, bulk.StoredHead]], dict[str, str], dict[int, dict[str, int]]]:
        """The catalog's newest versions of the incoming entries, who holds the incoming resource URIs,
        and (``with_labels``) the labels of the entries present: one read transaction."""
        if against_empty:
            return {}, {}, {}
        names: dict[str, list[str]] = {}
        for entry in incoming:
            names.setdefault(entry.kind, []).append(entry.name)
        uris = [_identity_uri(e.spec) for e in incoming if e.kind == "resource"]
        with self.bulk_reader() as session:
            heads = {kind: bulk.stored_heads(session, kind, wanted) for kind, wanted in names.items()}
            owners = bulk.uri_owners(session, uris) if uris else {}
            present = [h.entry_id for found in heads.values() for h in found.values()]
            labels = bulk.labels_of(session, present) if with_labels else {}
        return heads, owners, labels

    def _plan_entries(
        self, incoming: list[_Incoming], problems: list[Problem], *, against_empty: bool, only_missing: bool
    ) -> list[PlannedEntry]:
        planned: list[PlannedEntry] = []
        uris_seen: dict[str, Path] = {}
        # In slices, so the stored versions compared against are held a slice at a time (100,000 of
        # them at once cost hundreds of MB); only those of entries to update are kept, for the write.
        for start in range(0, len(incoming), PLAN_SLICE):
            part = incoming[start : start + PLAN_SLICE]
            heads, owners, _ = self._catalog_state(part, against_empty=against_empty)
            planned += self._plan_slice(part, heads, owners, uris_seen, problems, only_missing=only_missing)
        return planned

    def _plan_slice(
        self,
        incoming: Sequence[_Incoming],
        heads: dict[str, dict[str, bulk.StoredHead]],
        owners: dict[str, str],
        uris_seen: dict[str, Path],
        problems: list[Problem],
        *,
        only_missing: bool,
    ) -> list[PlannedEntry]:
        planned: list[PlannedEntry] = []
        for entry in incoming:
            head = heads.get(entry.kind, {}).get(entry.name)
            try:
                if head is None:
                    action = "create"
                elif head.archived:
                    action = "skip-archived"  # retired on purpose; a bundle does not bring it back
                elif self._comparable(entry.kind, head.spec, entry.spec) == entry.spec:
                    action = "unchanged"
                else:
                    action = "kept" if only_missing else "update"
            except SecretKeyError as exc:
                problems.append(Problem(entry.path, f"cannot compare with the stored version: {exc}"))
                continue
            sealed = None
            if action in ("create", "update"):
                problems += _uri_problems(entry, owners, uris_seen)
                if head is None and entry.masked:
                    problems += [
                        Problem(
                            entry.path,
                            f"is masked ({MASK}) but this catalog has no {entry.kind} {entry.name!r}, so there is no "
                            "stored value to keep: export with --secrets-key or --secrets env",
                            where,
                            line,
                        )
                        for where, line in entry.masked.items()
                    ]
                    continue
                try:
                    sealed = self.catalog.seal(entry.kind, entry.spec, head.spec if head else None)
                except Invalid as exc:
                    problems.append(Problem(entry.path, exc.detail))
                    continue
            kept_head = head if action in ("update", "kept") else None  # what a diff or the write needs
            planned.append(PlannedEntry(entry.kind, entry.name, entry.path, action, entry.spec, kept_head, sealed))
        return planned

    def _plan_histories(
        self, incoming: list[_Incoming], problems: list[Problem], *, against_empty: bool
    ) -> list[PlannedEntry]:
        heads, owners, labels = self._catalog_state(incoming, against_empty=against_empty, with_labels=True)
        planned: list[PlannedEntry] = []
        uris_seen: dict[str, Path] = {}
        for entry in incoming:
            write = entry.history
            assert write is not None
            head = heads.get(entry.kind, {}).get(entry.name)
            if head is None:
                action = "restore"
                problems += _uri_problems(entry, owners, uris_seen)
            else:
                try:
                    same = (
                        head.latest_version == write.versions[-1].number
                        and head.archived == write.archived
                        and labels.get(head.entry_id, {}) == write.labels
                        and self._comparable(entry.kind, head.spec, entry.spec) == entry.spec
                    )
                except SecretKeyError as exc:
                    problems.append(Problem(entry.path, f"cannot compare with the stored version: {exc}"))
                    continue
                action = "unchanged" if same else "conflict"
            planned.append(PlannedEntry(entry.kind, entry.name, entry.path, action, entry.spec, head, history=write))
        return planned

    def plan_import(
        self,
        directory: Path,
        *,
        secrets: ImportSecrets | None = None,
        against_empty: bool = False,
        only_missing: bool = False,
        labels: list[str] | None = None,
        publish_protected: bool = False,
    ) -> list[tuple[ImportPlanItem, PlannedEntry]]:
        """What importing ``directory`` would do, entry by entry, and which labels of each go live
        and which to review; writes nothing. Raises ``Invalid`` listing every problem of every file.
        ``against_empty``: compare with an empty catalog without reading the database (it has no
        tables yet; only the process's own ``REGISTRY_PROTECTED_LABELS`` protect anything)."""
        secrets = secrets if secrets is not None else ImportSecrets()
        layout, sources, incoming, problems = self.reader.read_folder(directory, secrets)
        if layout == "history":
            planned = self._plan_histories(incoming, problems, against_empty=against_empty)
        else:
            planned = self._plan_entries(incoming, problems, against_empty=against_empty, only_missing=only_missing)
        if problems:
            # One report, in file order, whichever stage found each problem.
            order = {source.path: index for index, source in enumerate(sources)}
            raise _refuse(sorted(problems, key=lambda p: order.get(p.path, -1)), len(sources))
        if layout == "history" and labels:
            raise Invalid("--label does not apply to a history bundle: it restores the labels it holds")
        targets = self.writer.import_targets(labels)
        if against_empty:
            protected = {label: 1 for label in self.protection.settings_labels}
        else:
            protected = self.protected_now(None if layout == "history" else targets)
        planned = with_protection(planned, labels=targets, protected=protected, publish_protected=publish_protected)
        return [(entry.item, entry) for entry in planned]

    def apply_import(
        self,
        directory: Path,
        *,
        actor: str,
        labels: list[str] | None = None,
        only_missing: bool = False,
        secrets: ImportSecrets | None = None,
        publish_protected: bool = False,
    ) -> list[ImportPlanItem]:
        """Write the plan in one transaction. ``only_missing`` (used for seeding at start-up) creates
        new entries but never overwrites an existing one, so a restart does not undo what admins
        edited since. ``labels`` apply to an entry bundle's new versions (a history bundle brings its own).
        Protected labels are left where they are, with a change request per entry and label to move
        them, unless ``publish_protected``: the start-up seed of an empty catalog, the system's own."""
        planned = self.plan_import(
            directory,
            secrets=secrets,
            only_missing=only_missing,
            labels=labels,
            publish_protected=publish_protected,
        )
        plan = [entry for _item, entry in planned]
        return self.apply_plan(
            plan, actor=actor, labels=labels, source=directory.name, publish_protected=publish_protected
        )

    def apply_plan(
        self,
        plan: list[PlannedEntry],
        *,
        actor: Actor | str,
        labels: list[str] | None = None,
        source: str,
        publish_protected: bool = False,
    ) -> list[ImportPlanItem]:
        """Write a plan ``plan_import`` made, in one transaction (all or nothing); ``source`` names the
        bundle in the change notes and in the change requests opened for protected labels (one per
        entry and label: each is reviewed, checked and published on its own, as a save's is). For
        callers that show the plan first and write exactly what was shown (the web UI): an update
        whose entry moved on since its plan is refused (``Conflict``). Returns the plan's items, each
        with the change requests opened for it."""
        note = f"imported from {source}"
        review_note = f"Opened by the import of the bundle {source}: it holds this version."
        histories = [entry for entry in plan if entry.history is not None]
        if histories:
            if labels:
                raise Invalid("--label does not apply to a history bundle: it restores the labels it holds")
            conflicts = [entry for entry in histories if entry.action == "conflict"]
            if conflicts:
                shown = ", ".join(f"{e.kind} {e.name}" for e in conflicts[:10])
                more = f" and {len(conflicts) - 10} more" if len(conflicts) > 10 else ""
                raise Conflict(
                    f"{len(conflicts)} entries of the history bundle exist in this catalog with another history "
                    f"({shown}{more}); a history import restores entries into a catalog that does not have them, "
                    "and nothing was written (import an entry bundle to add a version to existing entries instead)"
                )
            written = self.writer.restore_histories(
                [e.history for e in histories if e.action == "restore" and e.history is not None],
                actor=actor,
                note=f"restored from {source}",
                publish_protected=publish_protected,
                review_note=review_note,
            )
            return _with_requests(plan, written)
        writes = [
            bulk.HeadWrite(
                entry.kind,
                entry.name,
                entry.sealed,
                entry_id=entry.head.entry_id if entry.head else None,
                base=entry.head.latest_version if entry.head else None,
                previous=entry.head.spec if entry.head else None,
            )
            for entry in plan
            if entry.action in ("create", "update") and entry.sealed is not None
        ]
        written = self.writer.import_heads(
            writes, actor=actor, note=note, labels=labels, publish_protected=publish_protected, review_note=review_note
        )
        return _with_requests(plan, written)

    def plan_diff(self, entry: PlannedEntry) -> str:
        """A unified diff, stored newest version against the incoming one, in YAML with write-only
        values masked ("" when there is nothing to compare)."""
        if entry.head is None or entry.action not in ("update", "conflict", "kept"):
            return ""
        old = to_yaml(_export_form(entry.kind, self.catalog.mask(entry.kind, entry.head.spec)))
        new = to_yaml(_export_form(entry.kind, self.catalog.mask(entry.kind, entry.spec)))
        label = f"{entry.kind} {entry.name}"
        if old == new:
            return f"(only write-only values differ in {label})\n"
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{label} (stored v{entry.head.latest_version})",
            tofile=f"{label} ({entry.path})",
        )
        return "".join(lines)

    def _secret_holders(self, *, label: str | None, all_versions: bool, visible: frozenset[str] | None) -> list[str]:
        """The entries that would be exported with write-only values."""
        found: list[str] = []
        with self.bulk_reader() as session:
            for kind in ("resource", "tool"):
                if all_versions:
                    found += [
                        f"{kind} {h.name}"
                        for h in bulk.iter_histories(session, kind, visible=visible)
                        if any(has_secrets(kind, v.spec) for v in h.versions)
                    ]
                else:
                    found += [
                        f"{kind} {n}"
                        for n, spec in bulk.iter_served(session, kind, label, visible=visible)
                        if has_secrets(kind, spec)
                    ]
        return found

    def export_catalog(
        self,
        directory: Path,
        *,
        label: str | None = None,
        all_versions: bool = False,
        secrets: ExportSecrets | None = None,
        visible: frozenset[str] | None = None,
    ) -> ExportResult:
        """Write the catalog as a bundle (see the module docstring). ``secrets`` None refuses when an
        exported entry holds write-only values, explaining the choices. ``visible``: the teams whose
        entries the caller sees besides global ones (``Access.visible_teams``; None: every entry), so
        an export never holds what its caller could not read."""
        if label is not None and all_versions:
            raise Invalid("--label and --all-versions exclude each other: a history export holds every label")
        _check_secret_mode(
            self._secret_holders(label=label, all_versions=all_versions, visible=visible),
            secrets,
            all_versions=all_versions,
        )
        mode = secrets.mode if secrets is not None else "none"
        result = ExportResult()
        counts: dict[str, int] = {}

        def encoded(kind: str, name: str, stored: dict[str, Any], version: int | None = None) -> dict[str, Any]:
            if not has_secrets(kind, stored) or secrets is None:
                return stored
            if secrets.mode == "mask":
                return self.catalog.mask(kind, stored)
            return secrets.encode(kind, name, self.catalog.reveal(kind, stored), version=version)

        with self.bulk_reader() as session:
            for kind, collection in COLLECTION_BY_KIND.items():
                counts[kind] = 0
                folder: tuple[str, ...]
                if all_versions:
                    folder = (HISTORY, collection)
                    for entry in bulk.iter_histories(session, kind, visible=visible):
                        versions = []
                        for v in entry.versions:
                            doc: dict[str, Any] = {
                                "version": v.number,
                                "author": v.author,
                                "created_at": v.created_at.isoformat(),
                            }
                            if v.note is not None:
                                doc["note"] = v.note
                            doc["spec"] = _export_form(kind, encoded(kind, entry.name, v.spec, v.number))
                            versions.append(doc)
                        document = history_document(
                            entry.name,
                            archived=entry.archived,
                            created_at=entry.created_at.isoformat(),
                            updated_at=entry.updated_at.isoformat(),
                            labels=entry.labels,
                            versions=versions,
                        )
                        result.files.append(_write_entry(directory, folder, entry.name, document))
                        counts[kind] += 1
                else:
                    folder = (collection,)
                    for name, stored in bulk.iter_served(session, kind, label, visible=visible):
                        document = _export_form(kind, encoded(kind, name, stored))
                        result.files.append(_write_entry(directory, folder, name, document))
                        counts[kind] += 1
        if all_versions or mode in ("key", "env"):
            result.variables = secrets.usage() if secrets is not None and mode == "env" else {}
            source = "all-versions" if all_versions else (f"label {label}" if label else "latest")
            manifest = {
                "format": FORMAT,
                "layout": HISTORY if all_versions else "entries",
                "source": source,
                "exported_at": datetime.now(UTC).isoformat(),
                "exported_by": f"mcp-registry {__version__}",
                "entries": counts,
                "secrets": {
                    "mode": mode,
                    **({"key_check": secrets.key_check()} if secrets is not None and mode == "key" else {}),
                    **({"variables": result.variables} if mode == "env" else {}),
                },
            }
            _folder(directory)
            _write_new_text(directory / MANIFEST, _dump(manifest))
            _write_new_text(directory / README, _readme(source, mode, counts, result.variables))
            result.extras = [directory / MANIFEST, directory / README]
        return result
