"""The queries that serve agents: what a label serves (the MCP layer's snapshots and their
updates), a resource read and a prompt rendered as agents get them, and the tool a test call runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Text, cast, select

from registry.catalog.access import Access
from registry.catalog.checks import embeds
from registry.catalog.errors import Invalid, NotFound
from registry.catalog.reads import EntryReads, visible_entries
from registry.catalog.rendering import ArgumentError, PromptRenderer, ResourceRenderer
from registry.catalog.repository import EntryRepository
from registry.catalog.sealing import Sealer
from registry.catalog.specs import PromptSpec, ResourceSpec
from registry.catalog.templates import TemplateError
from registry.catalog.validation import PRODUCTION
from registry.db.changelog import last_change_id
from registry.db.engine import Database
from registry.db.models import Entry, EntryVersion, Label
from registry.limits import Limits


class ServingQueries:
    """What ``db``'s labels serve; entries read through ``reads``, write-only values revealed by
    ``sealer`` (for a test call only), renders bounded by ``limits``."""

    #: Entries named per query by ``served_rows_of`` (bound parameters stay far below any limit).
    SERVED_ROWS_CHUNK = 1000

    def __init__(self, db: Database, limits: Limits, reads: EntryReads, sealer: Sealer) -> None:
        self.db = db
        self.limits = limits
        self.reads = reads
        self.sealer = sealer

    def render_prompt(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        version: int | None = None,
        label: str | None = None,
        access: Access | None = None,
    ) -> dict[str, Any]:
        """A preview: the GetPromptResult agents get, plus the ``version`` rendered and the ``label``
        it was picked by. Without either, the ``production`` label's version (what agents are
        served); ``version`` previews any version, ``label`` another label's."""
        if version is not None and label is not None:
            raise Invalid("give 'version' or 'label', not both")
        if version is None and label is None:
            label = PRODUCTION
        try:
            view = self.reads.get("prompt", name, version=version, label=label, access=access)
        except NotFound as exc:
            if label == PRODUCTION and version is None and "no label" in exc.detail:
                raise NotFound(
                    f"prompt {name!r} has no {PRODUCTION!r} label, so agents are not served it; preview a "
                    "version or another label ('version' or 'label')"
                ) from None
            raise
        spec = PromptSpec.model_validate(view.spec)
        resolve_label = label or PRODUCTION
        try:
            result = PromptRenderer(spec).render(
                arguments,
                lambda uri: self.read_resource(uri, label=resolve_label, access=access),
                limits=self.limits,
            )
        except (ArgumentError, TemplateError) as exc:
            raise Invalid(str(exc)) from None
        return {**result, "version": view.version, "label": label}

    def tool_to_call(
        self, name: str, *, version: int | None = None, label: str | None = None, access: Access | None = None
    ) -> tuple[int, str | None, dict[str, Any]]:
        """(version, label, definition with write-only values decrypted) of the tool a test call
        runs: by default the ``production`` label's version, which is what agents call. A test
        call sends the tool's secrets to its webhook: ``access`` needs editor on its team."""
        if version is not None and label is not None:
            raise Invalid("give 'version' or 'label', not both")
        if version is None and label is None:
            label = PRODUCTION
        with self.db.session() as session:
            repo = EntryRepository(session)
            entry = repo.require("tool", name, access=access, role="editor")
            if label is not None:
                found = next((lb.version for lb in entry.labels if lb.name == label), None)
                if found is None:
                    raise NotFound(f"tool {name!r} has no label {label!r}")
                version = found
            assert version is not None
            stored = repo.version(entry, version).spec
        return version, label, self.sealer.reveal("tool", stored)

    def read_resource(
        self, uri: str, *, label: str = PRODUCTION, access: Access | None = None
    ) -> list[dict[str, Any]] | None:
        """Contents of a static or template resource as ``label`` serves it (None when nothing
        matches); only resources ``access`` sees are read."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry, EntryVersion)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.kind == "resource", Entry.archived.is_(False), *visible_entries(access))
            ).all()
        specs = [ResourceSpec.model_validate(v.spec) for _e, v in rows]
        for spec in sorted(specs, key=lambda s: s.kind == "template"):  # exact URIs win over templates
            if spec.kind == "http":
                continue
            contents = ResourceRenderer(spec).read(uri, limits=self.limits)
            if contents is not None:
                return contents
        return None

    def prompts_embedding(
        self, resources: Iterable[Mapping[str, Any]], *, label: str, access: Access | None = None
    ) -> list[str]:
        """Names of the live prompts ``label`` serves (those ``access`` sees) with a message that
        embeds one of the stored ``resources`` (for the pre-publish checks of a resource). Only
        prompts with an embedded resource at all are read and parsed."""
        wanted = [r for r in resources if r]
        if not wanted:
            return []
        with self.db.session() as session:
            rows = session.execute(
                select(Entry.name, EntryVersion.spec)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(
                    Entry.kind == "prompt",
                    Entry.archived.is_(False),
                    cast(EntryVersion.spec, Text).contains('"resource"'),
                    *visible_entries(access),
                )
                .order_by(Entry.name)
            ).all()
        return [name for name, spec in rows if embeds(spec, wanted)]

    def served_entries(self, label: str) -> list[tuple[str, str, int, dict[str, Any], str | None]]:
        """(kind, name, version, stored spec, team) of every live entry as ``label`` serves it."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry.kind, Entry.name, EntryVersion.number, EntryVersion.spec, Entry.team)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.archived.is_(False))
                .order_by(Entry.kind, Entry.name)
            ).all()
        return [(k, n, v, s, t) for k, n, v, s, t in rows]

    def served_rows(self, label: str) -> tuple[int, list[tuple[str, str, int, str, str | None]]]:
        """What a served snapshot of ``label`` is built from: the id of the last change, then
        (kind, name, version, stored spec as JSON text, team) of every live entry the label serves
        (the team: who may see it over MCP; None for a global entry).

        The id is read first, in the same transaction, so the rows reflect at least every change
        up to it (later ones are applied on top). The spec comes as text: the snapshot keeps the
        text and parses a definition only when it is used, a fraction of the memory of parsed
        documents at 100,000 entries (and no JSON decoding inside the transaction)."""
        with self.db.session() as session:
            position = last_change_id(session)
            rows = session.execute(
                select(Entry.kind, Entry.name, EntryVersion.number, cast(EntryVersion.spec, Text), Entry.team)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.archived.is_(False))
            ).all()
        return position, [(kind, name, number, spec, team) for kind, name, number, spec, team in rows]

    def served_rows_of(
        self, labels: Iterable[str], entries: Iterable[tuple[str, str]]
    ) -> list[tuple[str, str, str, int, str, str | None]]:
        """(kind, name, label, version, stored spec as JSON text, team) of the named (kind, name) entries
        as each of ``labels`` serves them; a combination with no row is one the label does not
        serve (no such label on it, or archived). What applying a batch of changes to the served
        snapshots reads: indexed lookups of the changed entries only, one query per
        ``SERVED_ROWS_CHUNK`` of them, whatever the size of the catalog."""
        label_names = sorted(set(labels))
        by_kind: dict[str, set[str]] = {}
        for kind, name in entries:
            by_kind.setdefault(kind, set()).add(name)
        chunks: list[tuple[str, list[str]]] = []
        for kind, names in sorted(by_kind.items()):
            ordered = sorted(names)
            for start in range(0, len(ordered), self.SERVED_ROWS_CHUNK):
                chunks.append((kind, ordered[start : start + self.SERVED_ROWS_CHUNK]))
        if not label_names or not chunks:
            return []
        found: list[tuple[str, str, str, int, str, str | None]] = []
        with self.db.session() as session:
            for kind, chunk in chunks:
                rows = session.execute(
                    select(
                        Entry.kind,
                        Entry.name,
                        Label.name,
                        EntryVersion.number,
                        cast(EntryVersion.spec, Text),
                        Entry.team,
                    )
                    .join(Label, (Label.entry_id == Entry.id) & Label.name.in_(label_names))
                    .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                    .where(Entry.kind == kind, Entry.name.in_(chunk), Entry.archived.is_(False))
                ).all()
                found.extend((k, n, label, number, spec, team) for k, n, label, number, spec, team in rows)
        return found
