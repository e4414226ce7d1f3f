"""The registry's read-only reports over its own records: the audit trail and the check of its
chain, usage by agents, the agents connected now.

One service over the database, built once on the ``Registry``, so the admin API and the web UI
ask it (``registry.api.deps.ReportsDep``) and never hold the database themselves. The queries
stay in their modules (``audit_log``, ``audit_verify``, ``usage_report``, ``agents``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from registry.catalog.access import Access
from registry.catalog.agents import MAX_AGENTS, ConnectedAgents, connected_agents
from registry.catalog.audit_log import AuditFilter, AuditPage, Order, audit_page
from registry.catalog.audit_verify import Anchor, AuditReport, ChainHead, chain_head, verify_audit
from registry.catalog.usage_report import Group, UsageFilter, entry_usage, usage_report
from registry.db.engine import Database


class ReportService:
    """Reads for the audit, usage and agents pages; ``idle_timeout_s`` is when an MCP session
    no longer counts as connected (``REGISTRY_SESSION_IDLE_TIMEOUT_S``)."""

    def __init__(self, db: Database, *, idle_timeout_s: float) -> None:
        self.db = db
        self.idle_timeout_s = idle_timeout_s

    def audit_page(
        self, where: AuditFilter, *, access: Access | None, order: Order = "newest", after: int | None, limit: int
    ) -> AuditPage:
        return audit_page(self.db, where, access=access, order=order, after=after, limit=limit)

    def verify_audit(self, anchor: Anchor | None = None) -> AuditReport:
        return verify_audit(self.db, anchor=anchor)

    def chain_head(self) -> ChainHead | None:
        return chain_head(self.db)

    def usage(
        self, access: Access | None, filters: UsageFilter, *, group: Group, limit: int, now: datetime | None = None
    ) -> dict[str, Any]:
        return usage_report(self.db, access, filters, group=group, limit=limit, now=now)

    def entry_usage(self, access: Access | None, kind: str, name: str, *, days: int) -> dict[str, Any]:
        return entry_usage(self.db, access, kind, name, days=days)

    def connected_agents(self, *, limit: int = MAX_AGENTS, newest_first: bool = False) -> ConnectedAgents:
        return connected_agents(self.db, idle_timeout_s=self.idle_timeout_s, limit=limit, newest_first=newest_first)
