"""The catalog service: the one place that reads and writes prompts, resources and tools.

The REST API, the web UI, the CLI importer and the MCP layer all hold one ``CatalogService`` and
call its operations: ``catalog.create(...)``, ``catalog.get(...)``, ``catalog.served_rows(...)``.
It is composed of focused parts, each a class in a module of its own that holds its collaborators:

* ``validation.SpecValidator``: definitions, change notes and labels checked before any write;
* ``sealing.Sealer``: write-only values sealed for storage, masked when shown, revealed for calls;
* ``writes.EntryWrites``: saves of versions (create, update, patch, restore);
* ``entry_moves.EntryMoves``: writes that add no version (labels, archive, team);
* ``reads.EntryReads``: entries, lists, folders, versions, diffs and the change feed as editors see them;
* ``serving.ServingQueries``: what labels serve agents (MCP snapshots, resources, renders, test calls);
* ``repository.EntryRepository``: the unit of work all writes (and change requests) run on a session.

Every write happens in one transaction that also appends to the change log, and after it commits
the ``on_change`` callbacks learn the new change id (the in-process signal; PostgreSQL replicas
learn it through NOTIFY, queued inside the same transaction). A write takes what it writes, then
how (``values.WriteOptions``: who, with which rights, the note, labels, precondition, review).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from registry.catalog import browse
from registry.catalog.diffs import to_yaml as to_yaml
from registry.catalog.entry_moves import EntryMoves
from registry.catalog.protection import ProtectionPolicy
from registry.catalog.reads import EntryReads
from registry.catalog.sealing import Sealer, mask
from registry.catalog.secrets import SecretBox
from registry.catalog.serving import ServingQueries
from registry.catalog.validation import SpecValidator, UrlGuard
from registry.catalog.validation import validation_errors as validation_errors
from registry.catalog.writes import EntryWrites
from registry.db.engine import Database
from registry.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger("registry.catalog")


class CatalogService:
    """The catalog's operations, one way to call each: ``catalog.<operation>``, done by the part
    that owns it (see the module docstring)."""

    #: A stored definition as shown: every write-only value masked (``registry.catalog.sealing``).
    mask = staticmethod(mask)

    def __init__(
        self,
        db: Database,
        secrets: SecretBox,
        *,
        url_guard: UrlGuard | None = None,
        limits: Limits = DEFAULT_LIMITS,
        protection: ProtectionPolicy | None = None,
    ) -> None:
        self.db = db
        self.secrets = secrets
        #: Field sizes and counts every write is checked against (and the MCP layer's pattern caps).
        self.limits = limits
        #: Labels no save moves (by default only those protected through the API).
        self.protection = protection or ProtectionPolicy(db, (), 1)
        self._listeners: list[Callable[[int], None]] = []
        validator, sealer = SpecValidator(limits, url_guard), Sealer(secrets)
        moves = EntryMoves(db, self.protection, limits, self._committed)
        writes = EntryWrites(db, validator, sealer, self.protection, moves, self._committed)
        reads = EntryReads(db, browse.UsageRanking(db))
        serving = ServingQueries(db, limits, reads, sealer)
        self.parse_spec, self.reveal = validator.parse_spec, sealer.reveal
        self.create, self.update, self.patch = writes.create, writes.update, writes.patch
        self.restore_version = writes.restore_version
        self.set_label, self.delete_label = moves.set_label, moves.delete_label
        self.set_archived, self.set_team = moves.set_archived, moves.set_team
        self.get, self.list_entries, self.folders = reads.get, reads.list_entries, reads.folders
        self.versions, self.diff, self.changes = reads.versions, reads.diff, reads.changes
        self.render_prompt, self.tool_to_call = serving.render_prompt, serving.tool_to_call
        self.read_resource, self.prompts_embedding = serving.read_resource, serving.prompts_embedding
        self.served_entries, self.served_rows = serving.served_entries, serving.served_rows
        self.served_rows_of = serving.served_rows_of
        self.seal, self.check_note = sealer.seal_stored, validator.check_note

    # ----------------------------------------------------------------- change signal
    def on_change(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(change_id)`` after each committed change made through this process."""
        self._listeners.append(listener)

    def _committed(self, change_id: int | None) -> None:
        if change_id is None:
            return
        for listener in list(self._listeners):
            listener(change_id)

    def committed(self, change_id: int | None) -> None:
        """Tell the ``on_change`` listeners about a change another module committed (a change
        request's publication moves a label in a transaction of its own)."""
        self._committed(change_id)
