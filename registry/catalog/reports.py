"""What happened and who is using what, as services: the audit trail and the usage reports.

Read-only views over the database for the admin API, the web UI and the CLI alike, so none of them
hands a raw ``Database`` to a report function.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from registry.catalog.access import Access
from registry.catalog.agents import MAX_AGENTS, ConnectedAgents, connected_agents
from registry.catalog.audit_log import DEFAULT_PAGE, AuditFilter, AuditPage, Order, audit_page
from registry.catalog.audit_verify import Anchor, AuditReport, ChainHead, chain_head, verify_audit
from registry.catalog.usage_report import Group, UsageFilter, entry_usage, usage_report
from registry.db.engine import Database


class AuditService:
    """The audit trail: filtered pages, the keyed chain's check, and its head."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def page(
        self,
        where: AuditFilter = AuditFilter(),
        *,
        access: Access | None = None,
        order: Order = "newest",
        after: int | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> AuditPage:
        return audit_page(self.db, where, access=access, order=order, after=after, limit=limit)

    def verify(self, anchor: Anchor | None = None) -> AuditReport:
        return verify_audit(self.db, anchor=anchor)

    def head(self) -> ChainHead | None:
        return chain_head(self.db)


class UsageService:
    """Uses of entries by agents over MCP, and the agents connected now (sessions idle longer than
    ``idle_timeout_s`` are gone)."""

    def __init__(self, db: Database, idle_timeout_s: float) -> None:
        self.db = db
        self.idle_timeout_s = idle_timeout_s

    def report(
        self,
        access: Access | None,
        filters: UsageFilter,
        *,
        group: Group = "version",
        limit: int = 100,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        return usage_report(self.db, access, filters, group=group, limit=limit, now=now)

    def entry(self, access: Access | None, kind: str, name: str, *, days: int = 30) -> dict[str, Any]:
        return entry_usage(self.db, access, kind, name, days=days)

    def agents(self, limit: int = MAX_AGENTS, *, newest_first: bool = False) -> ConnectedAgents:
        return connected_agents(self.db, idle_timeout_s=self.idle_timeout_s, limit=limit, newest_first=newest_first)
