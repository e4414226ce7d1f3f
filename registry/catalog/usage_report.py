"""Reading usage counts: who used which version of what, when (the admin API and the web UI).

Counts are written by ``registry.catalog.usage``; these queries add them up per entry, version,
agent or hour. A caller sees the usage of the entries it can see only (global entries, its
teams'; everything for an admin): rows are joined to ``entries`` and filtered on its team, and
an entry it cannot see answers as if it did not exist. Agents are shown by their key
(``token:<id>``, ``user:<subject>``, ``anonymous``) and, for tokens, the token's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session

from registry.catalog.access import Access, check_sees
from registry.catalog.errors import Invalid, NotFound, Subject
from registry.catalog.usage import METHOD_BY_KIND
from registry.db.engine import Database
from registry.db.models import ApiToken, Entry, Label, UsageCount

Group = Literal["entry", "version", "agent", "version_agent", "hour"]
GROUPS: tuple[Group, ...] = ("entry", "version", "agent", "version_agent", "hour")
#: Most rows one report answers.
MAX_ROWS = 1000
#: The window of a report that names no ``since`` (days before ``until``).
DEFAULT_DAYS = 7
#: The per-entry report: longest "still used in the last N days" window, most versions and most
#: agents per version listed.
MAX_DAYS = 366
MAX_VERSIONS = 1000
AGENTS_PER_VERSION = 100


@dataclass(frozen=True)
class UsageFilter:
    kind: str | None = None
    name: str | None = None
    version: int | None = None
    agent: str | None = None
    method: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _hour_floor(value: datetime) -> datetime:
    return _utc(value).replace(minute=0, second=0, microsecond=0)


def _visible(access: Access | None) -> ColumnElement[bool] | None:
    """The condition on ``entries.team`` for what ``access`` sees (None: everything)."""
    teams = access.visible_teams if access is not None else None
    if teams is None:
        return None
    if not teams:
        return Entry.team.is_(None)
    return or_(Entry.team.is_(None), Entry.team.in_(sorted(teams)))


def _joined(query: Select[Any], access: Access | None) -> Select[Any]:
    query = query.join(Entry, and_(Entry.kind == UsageCount.kind, Entry.name == UsageCount.name))
    visible = _visible(access)
    return query if visible is None else query.where(visible)


def agent_names(session: Session, agents: set[str]) -> dict[str, str]:
    """Display names of agent keys: a token's name, a user's subject, ``anonymous``."""
    ids = {int(a[6:]) for a in agents if a.startswith("token:") and a[6:].isdigit()}
    names = (
        dict(session.execute(select(ApiToken.id, ApiToken.name).where(ApiToken.id.in_(sorted(ids)))).tuples().all())
        if ids
        else {}
    )
    shown: dict[str, str] = {}
    for agent in agents:
        if agent.startswith("token:"):
            token_id = int(agent[6:]) if agent[6:].isdigit() else None
            shown[agent] = names.get(token_id, f"token #{token_id}") if token_id is not None else agent
        elif agent.startswith("user:"):
            shown[agent] = agent[5:]
        else:
            shown[agent] = agent
    return shown


def window(since: datetime | None, until: datetime | None, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The report's window: hour buckets starting at or after ``since`` (rounded down to its
    hour; default ``until`` minus 7 days) and before ``until`` (default now). Empty when
    ``since`` is not before ``until``."""
    end = _utc(until) if until is not None else (now or datetime.now(UTC))
    if since is not None:
        start = _hour_floor(since)
    else:
        try:
            start = _hour_floor(end - timedelta(days=DEFAULT_DAYS))
        except OverflowError:  # until in the first week of year 1
            start = datetime.min.replace(tzinfo=UTC)
    return start, end


def usage_report(
    db: Database,
    access: Access | None,
    filters: UsageFilter,
    *,
    group: Group = "version",
    limit: int = 100,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Uses added up per ``group``, most used first (per hour: newest first), at most ``limit``
    rows (``more`` says whether there were others)."""
    if group not in GROUPS:
        raise Invalid(f"group must be one of: {', '.join(GROUPS)}")
    limit = max(1, min(limit, MAX_ROWS))
    start, end = window(filters.since, filters.until, now=now)
    if start >= end or "\x00" in (filters.agent or ""):  # no key holds a NUL (PostgreSQL refuses one)
        return {"group": group, "since": start, "until": end, "items": [], "more": False}
    u = UsageCount
    by_group: dict[str, list[Any]] = {
        "entry": [u.kind, u.name],
        "version": [u.kind, u.name, u.version],
        "agent": [u.agent],
        "version_agent": [u.kind, u.name, u.version, u.agent],
        "hour": [u.hour],
    }
    columns = by_group[group]
    total = func.sum(u.count).label("uses")
    last = func.max(u.hour).label("last_used")
    query: Select[Any] = select(*columns, total, last).where(u.hour >= start, u.hour < end)
    for column, value in (
        (u.kind, filters.kind),
        (u.name, filters.name),
        (u.version, filters.version),
        (u.agent, filters.agent),
        (u.method, filters.method),
    ):
        if value is not None:
            query = query.where(column == value)
    query = _joined(query, access).group_by(*columns)
    order = [u.hour.desc()] if group == "hour" else [total.desc(), *columns]
    query = query.order_by(*order)
    with db.session() as session:
        rows = session.execute(query.limit(limit + 1)).all()
        names = agent_names(session, {row.agent for row in rows[:limit]}) if "agent" in group else {}
    items = []
    for row in rows[:limit]:
        item: dict[str, Any] = {"uses": int(row.uses), "last_used": row.last_used}
        mapping = row._mapping
        for key in ("kind", "name", "version", "agent", "hour"):
            item[key] = mapping.get(key)
        item["method"] = METHOD_BY_KIND.get(item["kind"]) if item["kind"] else filters.method
        item["agent_name"] = names.get(item["agent"]) if item["agent"] else None
        items.append(item)
    return {"group": group, "since": start, "until": end, "items": items, "more": len(rows) > limit}


def entry_usage(
    db: Database,
    access: Access | None,
    kind: str,
    name: str,
    *,
    days: int = 30,
    now: datetime | None = None,
) -> dict[str, Any]:
    """One entry's usage per version: all-time uses and last use, uses in the last ``days`` days
    and the agents behind them (most uses first), for the versions used or labelled now."""
    days = max(1, min(days, MAX_DAYS))
    end = now or datetime.now(UTC)
    since = _hour_floor(end - timedelta(days=days))
    u = UsageCount
    where = (u.kind == kind, u.name == name)
    with db.session() as session:
        entry = session.execute(select(Entry.id, Entry.team).where(Entry.kind == kind, Entry.name == name)).first()
        missing = Subject(kind=kind, name=name, missing="entry")
        if entry is None:
            raise NotFound(f"{kind} {name!r} does not exist", about=missing)
        check_sees(access, entry.team, f"{kind} {name!r}", about=missing)
        labels: dict[int, list[str]] = {}
        for label, version in session.execute(
            select(Label.name, Label.version).where(Label.entry_id == entry.id).order_by(Label.name)
        ):
            labels.setdefault(version, []).append(label)
        totals = session.execute(
            select(u.version, func.sum(u.count), func.max(u.hour))
            .where(*where)
            .group_by(u.version)
            .order_by(u.version.desc())
            .limit(MAX_VERSIONS + 1)
        ).all()
        recent = session.execute(
            select(u.version, u.agent, func.sum(u.count), func.max(u.hour))
            .where(*where, u.hour >= since)
            .group_by(u.version, u.agent)
            .order_by(u.version.desc(), func.sum(u.count).desc(), u.agent)
        ).all()
        names = agent_names(session, {agent for _v, agent, _n, _l in recent})
    versions: dict[int, dict[str, Any]] = {}

    def version_row(number: int) -> dict[str, Any]:
        found = versions.get(number)
        if found is None:
            found = versions[number] = {
                "version": number,
                "labels": labels.get(number, []),
                "uses": 0,
                "last_used": None,
                "recent_uses": 0,
                "agents_total": 0,
                "agents": [],
            }
        return found

    for number, uses, last in totals[:MAX_VERSIONS]:
        row = version_row(number)
        row["uses"], row["last_used"] = int(uses), last
    for number, agent, uses, last in recent:
        if number not in versions and len(versions) >= MAX_VERSIONS:
            continue
        row = version_row(number)
        row["recent_uses"] += int(uses)
        row["agents_total"] += 1
        if len(row["agents"]) < AGENTS_PER_VERSION:
            row["agents"].append({"agent": agent, "agent_name": names[agent], "uses": int(uses), "last_used": last})
    for number in labels:
        version_row(number)
    ordered = sorted(versions.values(), key=lambda v: -v["version"])
    return {
        "kind": kind,
        "name": name,
        "method": METHOD_BY_KIND[kind],
        "days": days,
        "since": since,
        "versions": ordered,
        "more_versions": len(totals) > MAX_VERSIONS,
    }
