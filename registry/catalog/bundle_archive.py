"""Bundles as zip files: what a browser uploads and downloads (the web UI's ``/ui/bundles``).

A zip holds the folder ``mcp-registry export`` writes and ``mcp-registry import`` reads
(``prompts/``, ``resources/``, ``tools/``, or ``history/``, and ``export.yaml``), at its root or
inside one top-level folder. It is unpacked into a private temporary folder and handed to the very
same ``BundleService.plan_import`` / ``apply_plan`` / ``export_catalog`` as the command line: validation,
planning and the all-or-nothing write are theirs.

Unpacking is bounded and refuses what could escape the folder: at most
``REGISTRY_LIMIT_BUNDLE_FILES`` members, at most ``REGISTRY_LIMIT_BUNDLE_BYTES`` unpacked (counted
while inflating, so a zip bomb stops at the cap whatever its headers claim), no absolute or
``..`` paths, no symbolic links, no encrypted members. Files other than the bundle's own are
skipped (a ``README.md``, ``__MACOSX/``).

Write-only values: an upload may carry ``********`` (keep the stored value: a re-import into the
same catalog). ``${enc:...}`` and ``${env:...}`` values need the export key or the server's
environment, which only the command line is given: they are reported, and nothing is written.

Applying writes exactly the plan that was shown: the bundle is planned again and its fingerprint
(every entry's action, the version it would follow, the labels that go live and those that go to
review) compared with the one shown; when the catalog changed in between, ``PlanChanged`` carries
the new plan instead of writing anything. Protected labels are not moved: applying opens a change
request per entry and protected label (``bulk.BulkWriter.import_heads``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from io import BytesIO
from pathlib import Path
from typing import IO

from registry.catalog.bundle_secrets import ExportSecrets, ImportSecrets
from registry.catalog.bundles import BundleService, ExportResult, ImportPlanItem, PlannedEntry
from registry.catalog.errors import CatalogError, Invalid
from registry.db.audit import Actor
from registry.limits import LimitExceeded, Limits

#: What is unpacked: entry files, history files and the manifest (anything else is skipped).
_BUNDLE_MEMBER = re.compile(
    r"(?:(?:history/)?(?:prompts|resources|tools)/[^/]+\.ya?ml|export\.yaml)",
)
_TOP_LEVEL = ("prompts/", "resources/", "tools/", "history/", "export.yaml")
_CHUNK = 64 * 1024
#: Plan rows whose diff a page shows (the rest are listed without one).
DIFFS_SHOWN = 100
#: Actions that write something.
WRITING = ("create", "update", "restore")


class PlanChanged(CatalogError):
    """The catalog changed since the plan was shown: nothing was written; ``plan`` is the new one."""

    status = 409

    def __init__(self, plan: ZipPlan) -> None:
        super().__init__(
            "The catalog changed since this plan was made, so nothing was written. This is the plan now: "
            "apply it if it is still what you want."
        )
        self.plan = plan


@dataclass(frozen=True)
class PlanRow:
    kind: str
    name: str
    action: str
    #: The file in the bundle (``prompts/summarize.yaml``).
    source: str
    #: Stored newest version against the bundle's, YAML, write-only values masked ("" for none).
    diff: str = ""
    #: Labels applying points at the entry's new version at once ...
    live: tuple[str, ...] = ()
    #: ... and protected labels it leaves where they are, opening a change request each.
    review: tuple[str, ...] = ()


@dataclass
class ZipPlan:
    """What importing an uploaded bundle would do."""

    rows: list[PlanRow]
    fingerprint: str
    #: kind -> action -> how many.
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return sum(1 for row in self.rows if row.action in WRITING)

    @property
    def conflicts(self) -> int:
        return sum(1 for row in self.rows if row.action == "conflict")

    @property
    def reviews(self) -> int:
        """Entries applying would send to review (a change request per protected label)."""
        return sum(1 for row in self.rows if row.review)

    @property
    def review_labels(self) -> list[str]:
        return sorted({label for row in self.rows for label in row.review})

    def summary(self) -> str:
        """``2 created, 1 updated, 5 unchanged`` (over every kind)."""
        total: Counter[str] = Counter()
        for per_kind in self.counts.values():
            total.update(per_kind)
        words = {"create": "created", "restore": "restored", "update": "updated", "unchanged": "unchanged"}
        words |= {"skip-archived": "archived (left alone)", "conflict": "in conflict"}
        ordered = sorted(total.items(), key=lambda pair: list(words).index(pair[0]) if pair[0] in words else 99)
        return ", ".join(f"{n} {words.get(action, action)}" for action, n in ordered) or "no entries"


# ------------------------------------------------------------------ unpacking


def _refuse_member(name: str, why: str) -> Invalid:
    return Invalid(f"the zip cannot be imported: {name!r} {why}")


def _strip_folder(names: list[str]) -> str:
    """The one top-level folder the bundle sits in ("" when it sits at the root). What archivers
    add beside it (``__MACOSX/``, dotfiles) does not count."""
    if any(name.startswith(_TOP_LEVEL) for name in names):
        return ""
    own = [name for name in names if not name.startswith(("__MACOSX/", "."))]
    firsts = {name.split("/", 1)[0] for name in own}
    if len(firsts) == 1 and all("/" in name for name in own):
        return firsts.pop() + "/"
    return ""


def unpack(data: bytes, target: Path, limits: Limits) -> int:
    """Unpack the bundle files of zip ``data`` into ``target`` (an empty private folder); returns
    how many. Raises ``Invalid`` saying what is wrong with the zip."""
    if len(data) > limits.bundle_bytes:
        raise Invalid(str(LimitExceeded("bundle_bytes", f"the zip is larger than {limits.bundle_bytes} bytes")))
    try:
        archive = zipfile.ZipFile(BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise Invalid(
            "the file is not a zip archive (or it is damaged): upload the zip of an exported bundle"
        ) from None
    with archive:
        members = archive.infolist()
        if len(members) > 2 * limits.bundle_files:  # folders are members too
            raise Invalid(str(LimitExceeded("bundle_files", f"the zip holds more than {limits.bundle_files} files")))
        names: list[str] = []
        for info in members:
            name = info.filename
            if "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                raise _refuse_member(name, "is not a relative path")
            if any(part == ".." for part in name.split("/")):
                raise _refuse_member(name, "leads out of the bundle (..)")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise _refuse_member(name, "is a symbolic link")
            if info.flag_bits & 0x1:
                raise _refuse_member(name, "is encrypted")
            if not info.is_dir():
                names.append(name)
        if len(names) > limits.bundle_files:
            raise Invalid(str(LimitExceeded("bundle_files", f"the zip holds more than {limits.bundle_files} files")))
        prefix = _strip_folder(names)
        wanted = [
            info
            for info in members
            if not info.is_dir()
            and info.filename.startswith(prefix)
            and _BUNDLE_MEMBER.fullmatch(info.filename[len(prefix) :])
        ]
        if not wanted:
            raise Invalid(
                "the zip holds no bundle: no prompts/, resources/, tools/ or history/ YAML files "
                "(at its root or in one top-level folder)"
            )
        budget = limits.bundle_bytes
        seen: set[str] = set()
        for info in wanted:
            relative = info.filename[len(prefix) :]
            if relative in seen:
                raise _refuse_member(info.filename, "appears twice in the zip")
            seen.add(relative)
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(info) as source, open(path, "xb") as sink:
                    budget = _copy(source, sink, budget, limits)
            except LimitExceeded as exc:
                raise Invalid(str(exc)) from None
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as exc:
                raise _refuse_member(info.filename, f"cannot be read ({exc})") from None
    return len(wanted)


def _copy(source: IO[bytes], sink: IO[bytes], budget: int, limits: Limits) -> int:
    """Copy one member, counting inflated bytes against the whole bundle's ``budget``. A file over
    ``body_bytes`` is cut one byte past it: the import then reports it as too large, with its name."""
    written = 0
    while True:
        chunk = source.read(_CHUNK)
        if not chunk:
            return budget
        budget -= len(chunk)
        if budget < 0:
            raise LimitExceeded("bundle_bytes", f"the zip unpacks to more than {limits.bundle_bytes} bytes")
        room = limits.body_bytes + 1 - written
        if room > 0:
            sink.write(chunk[:room])
            written += min(room, len(chunk))


@contextmanager
def unpacked(data: bytes, limits: Limits) -> Iterator[Path]:
    """A private temporary folder holding the bundle of zip ``data``, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="mcpr-bundle-"))  # mode 0700
    try:
        unpack(data, folder, limits)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ plan, apply, export


def _no_environment() -> ImportSecrets:
    """``${env:...}`` is not resolved from the server's environment for an upload (whoever uploads
    could otherwise send any of its variables to a webhook of theirs)."""
    return ImportSecrets(environ={})


def _relative(text: str, root: Path) -> str:
    return text.replace(str(root) + os.sep, "").replace(str(root), "the bundle")


def _relative_error(exc: CatalogError, root: Path) -> CatalogError:
    """The same refusal with the temporary folder's paths made relative to the bundle."""
    errors = None
    if exc.errors:
        errors = [
            {**error, "path": _relative(str(error.get("path", "")), root)} if "path" in error else error
            for error in exc.errors
        ]
    detail = _relative(exc.detail, root)
    if "${env:" in detail or "environment variable" in detail:
        detail += (
            "\n(A bundle sent to the server, from the web UI or `mcp-registry push`, does not read the server's "
            "environment: import bundles with ${env:...} values with `mcp-registry import`, or export them with "
            "--secrets mask for a re-import into the same catalog.)"
        )
    refusal = type(exc)(detail, errors=errors) if errors is not None else type(exc)(detail)
    return refusal


def _fingerprint(data: bytes, plan: list[PlannedEntry]) -> str:
    digest = hashlib.sha256(hashlib.sha256(data).digest())
    for entry in sorted(plan, key=lambda e: (e.kind, e.name)):
        base = entry.head.latest_version if entry.head is not None else 0
        # Which labels go live and which to review is part of what was shown (a label protected
        # or unprotected meanwhile changes the plan).
        labels = f"{','.join(entry.live)}\t{','.join(entry.review)}"
        digest.update(f"\n{entry.kind}\t{entry.name}\t{entry.action}\t{base}\t{labels}".encode())
    return digest.hexdigest()


class ZipBundles:
    """Uploaded and downloaded bundles, planned, applied and exported by ``bundles``."""

    def __init__(self, bundles: BundleService) -> None:
        self.bundles = bundles
        self.limits = bundles.limits

    def _plan(self, data: bytes, root: Path) -> tuple[ZipPlan, list[PlannedEntry]]:
        try:
            planned = [entry for _item, entry in self.bundles.plan_import(root, secrets=_no_environment())]
        except CatalogError as exc:
            raise _relative_error(exc, root) from None
        rows: list[PlanRow] = []
        counts: dict[str, dict[str, int]] = {}
        shown = 0
        for entry in planned:
            diff = ""
            if entry.action in ("update", "conflict") and shown < DIFFS_SHOWN:
                diff = _relative(self.bundles.plan_diff(entry), root)
                shown += 1
            source = _relative(str(entry.path), root)
            rows.append(PlanRow(entry.kind, entry.name, entry.action, source, diff, entry.live, entry.review))
            per_kind = counts.setdefault(entry.kind, {})
            per_kind[entry.action] = per_kind.get(entry.action, 0) + 1
        return ZipPlan(rows, _fingerprint(data, planned), counts), planned

    def plan(self, data: bytes) -> ZipPlan:
        """What importing zip ``data`` would do; writes nothing. Raises ``Invalid`` (a bad zip, a
        limit, every problem of every file) or ``Conflict``."""
        with unpacked(data, self.limits) as root:
            plan, _planned = self._plan(data, root)
        return plan

    def apply(self, data: bytes, *, fingerprint: str, actor: Actor | str, source: str) -> tuple[ZipPlan, list[int]]:
        """Import zip ``data`` in one transaction, provided its plan is still the one whose
        ``fingerprint`` was shown (else ``PlanChanged`` with the new plan, and nothing is written).
        Returns the plan applied and the change requests opened for its protected labels."""
        plan, items = self.apply_items(data, fingerprint=fingerprint, actor=actor, source=source)
        return plan, sorted(number for item in items for number in item.change_requests)

    def apply_items(
        self, data: bytes, *, fingerprint: str | None, actor: Actor | str, source: str
    ) -> tuple[ZipPlan, list[ImportPlanItem]]:
        """``apply``, returning each entry's item with the change requests opened for it.
        ``fingerprint`` None applies the plan made now (the admin API's push without a plan shown):
        planning and writing still refuse as a whole, and an entry that moves on between the two is
        refused (``Conflict``) by the write."""
        with unpacked(data, self.limits) as root:
            plan, planned = self._plan(data, root)
            if fingerprint is not None and plan.fingerprint != fingerprint:
                raise PlanChanged(plan)
            try:
                items = self.bundles.apply_plan(planned, actor=actor, source=source)
            except CatalogError as exc:
                raise _relative_error(exc, root) from None
        relative = [replace(item, source=_relative(item.source, root)) for item in items]
        return plan, relative

    def export(
        self,
        sink: IO[bytes],
        *,
        label: str | None = None,
        all_versions: bool = False,
        visible: frozenset[str] | None = None,
    ) -> int:
        """Write the catalog as a zipped entry bundle to ``sink`` (each live entry's newest version, or
        the version ``label`` serves), write-only values masked: what ``mcp-registry export --secrets
        mask`` writes, fit for editing and re-importing into this catalog. ``all_versions``: the
        history bundle instead, which cannot mask (``Invalid`` when an entry holds write-only values:
        export those with the command line's ``--secrets-key``). ``visible``: the caller's teams
        (``BundleService.export_catalog``). Returns the entry count."""
        with self._exported(label, all_versions, visible) as (folder, result):
            with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for path in sorted([*result.files, *result.extras]):
                    archive.write(path, path.relative_to(folder).as_posix())
            return len(result.files)

    def export_files(
        self, *, label: str | None = None, all_versions: bool = False, visible: frozenset[str] | None = None
    ) -> tuple[int, dict[str, bytes]]:
        """``export`` as the bundle folder's files (relative path -> content), for the admin API;
        the manifest included, the README for people left out. Returns the entry count and the files."""
        with self._exported(label, all_versions, visible) as (folder, result):
            # Answered in one JSON document: bounded as a bundle sent to the API is (the files first
            # written to a temporary folder, so the catalog is never held in memory whole).
            size = sum(p.stat().st_size for p in [*result.files, *result.extras])
            if size > self.limits.bundle_bytes:
                raise Invalid(
                    str(
                        LimitExceeded(
                            "bundle_bytes",
                            f"the export is {size} bytes, more than {self.limits.bundle_bytes}: export it with "
                            "`mcp-registry export` on the server, or by label",
                        )
                    )
                )
            files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(result.files)}
            files |= {p.name: p.read_bytes() for p in result.extras if p.name != "README.md"}
            return len(result.files), files

    @contextmanager
    def _exported(
        self, label: str | None, all_versions: bool, visible: frozenset[str] | None
    ) -> Iterator[tuple[Path, ExportResult]]:
        folder = Path(tempfile.mkdtemp(prefix="mcpr-export-"))
        try:
            yield (
                folder,
                self.bundles.export_catalog(
                    folder, label=label, all_versions=all_versions, secrets=ExportSecrets("mask"), visible=visible
                ),
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


#: The date every member of ``zip_of`` carries: the same files give the same bytes, so the same
#: plan fingerprint (a zip's members otherwise carry the time it was made).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def zip_of(files: Mapping[str, bytes]) -> bytes:
    """A zip of ``files`` (relative path -> content), in path order with fixed dates: the bundle a
    JSON document of files stands for, for ``ZipBundles``. Byte-identical for identical files."""
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()
