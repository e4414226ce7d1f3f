"""Connected agents: the MCP sessions open right now, on every replica.

Read from the shared ``mcp_sessions`` table, which Streamable HTTP sessions live in and HTTP+SSE
sessions are recorded in (see ``registry.mcp.sessions``); stdio sessions live in their host's
child process and are in no table. A session counts as open until it is ended (``DELETE /mcp``,
its SSE stream closing) or has been idle past ``REGISTRY_SESSION_IDLE_TIMEOUT_S``, the same rule
the MCP side serves and sweeps by; one whose token has been revoked or has expired is no longer
served either, so it is not listed.

Nothing secret is shown: a session id is a bearer handle (for anonymous sessions, the only one),
so only its first few characters are, enough to tell sessions apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select

from registry.db.engine import Database
from registry.db.models import ApiToken, McpSession

#: Most sessions one listing returns (newest activity first); the total is counted regardless.
MAX_AGENTS = 500
#: Characters of a session id shown.
ID_PREFIX_CHARS = 6
#: Longest client name or version shown (a client says what it likes in ``clientInfo``).
CLIENT_TEXT_CHARS = 128
#: How each transport is called on the page.
TRANSPORT_TITLES = {"streamable-http": "Streamable HTTP", "sse": "HTTP+SSE", "unknown": "unknown"}


@dataclass(frozen=True)
class ConnectedAgent:
    id_prefix: str
    client_name: str | None
    client_version: str | None
    protocol_version: str
    transport: str  # streamable-http | sse | unknown
    label: str
    principal: str  # the token's name, or "anonymous"
    since: datetime
    last_seen: datetime

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ConnectedAgents:
    items: list[ConnectedAgent]
    #: Every open session, also those past ``limit``.
    total: int
    limit: int
    idle_timeout_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "items": [agent.as_dict() for agent in self.items],
            "total": self.total,
            "limit": self.limit,
            "idle_timeout_s": self.idle_timeout_s,
        }


def _client_text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text[:CLIENT_TEXT_CHARS] or None


def connected_agents(
    db: Database, *, idle_timeout_s: float, limit: int = MAX_AGENTS, newest_first: bool = False
) -> ConnectedAgents:
    """The open sessions, most recently active first (``newest_first``: most recently connected
    first), at most ``limit`` (capped at ``MAX_AGENTS``)."""
    limit = max(0, min(limit, MAX_AGENTS))
    cutoff = datetime.now(UTC) - timedelta(seconds=idle_timeout_s)
    now = datetime.now(UTC)
    token_live = or_(
        McpSession.token_id.is_(None),
        (ApiToken.revoked_at.is_(None) & (ApiToken.expires_at.is_(None) | (ApiToken.expires_at > now))),
    )
    where = (McpSession.ended_at.is_(None), McpSession.last_seen_at > cutoff, token_live)
    with db.session() as session:
        joined = select(McpSession).outerjoin(ApiToken, ApiToken.id == McpSession.token_id).where(*where)
        total = session.scalar(select(func.count()).select_from(joined.subquery())) or 0
        order = (
            (McpSession.created_at.desc(), McpSession.id)
            if newest_first
            else (McpSession.last_seen_at.desc(), McpSession.created_at.desc(), McpSession.id)
        )
        rows = list(session.scalars(joined.order_by(*order).limit(limit)))
        items = [
            ConnectedAgent(
                id_prefix=row.id[:ID_PREFIX_CHARS],
                client_name=_client_text((row.client_info or {}).get("name")),
                client_version=_client_text((row.client_info or {}).get("version")),
                protocol_version=row.protocol_version,
                transport=row.transport if row.transport in TRANSPORT_TITLES else "unknown",
                label=row.label,
                principal=row.principal,
                since=row.created_at,
                last_seen=row.last_seen_at,
            )
            for row in rows
        ]
    return ConnectedAgents(items, int(total), limit, idle_timeout_s)
