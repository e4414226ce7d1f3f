"""Catalog search that stays fast at 100,000 entries: substring, case-insensitive, over
``entries.search_text`` (name, title, description and tags; see ``models.SEARCH_TEXT_SQL``).

A substring search cannot use an ordinary index, and a scan of 100,000 descriptions takes a
tenth of a second or more. Migration 0005 therefore indexes the text by trigrams:

- PostgreSQL: a GIN ``pg_trgm`` index, which the planner uses for ``search_text LIKE '%needle%'``
  by itself, so the filter is the plain LIKE on every needle.
- SQLite: an FTS5 table with the trigram tokenizer (``entries_search``, kept in step by triggers).
  A needle of three or more characters is an FTS5 phrase: exactly the rows containing it as a
  substring (FTS5 folds case for the whole of Unicode). A shorter needle has no trigram of its
  own; every occurrence of it still starts some trigram (the text ends with ",\\n"), so the
  vocabulary table lists the trigrams it starts, and when those are few the search is an FTS5
  ``OR`` over them (then checked with LIKE); when they are many the needle is common and a scan in
  name order finds a page quickly.

Without those indexes (no privilege for ``pg_trgm``, an SQLite without FTS5) every search is the
same LIKE, scanning. LIKE wildcards in the needle match themselves everywhere.

``filters`` turns a search and a tag into WHERE clauses; ``EXACT_COUNT_UP_TO`` bounds how many
matches a filtered listing counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, false, literal_column, select, text
from sqlalchemy.orm import Session

from registry.db.models import Entry

#: A filtered listing counts its matches exactly up to this many; beyond it ``total`` is this
#: number and ``total_exact`` is false (counting every row of a common needle at 100,000 entries
#: would cost more than finding the page).
EXACT_COUNT_UP_TO = 10_000

#: Objects migration 0005 creates that the ORM models do not describe (``alembic check`` skips them).
SQLITE_SEARCH_TABLE = "entries_search"
TRIGRAM_INDEX = "ix_entries_search_trgm"

#: Characters an FTS5 trigram is made of: the shortest needle that is a phrase of its own.
_TRIGRAM = 3
#: A short needle goes through the FTS5 index when it starts at most this many distinct trigrams,
#: found in at most this many rows (counted once per trigram); otherwise it is common: scan.
_SHORT_MAX_TRIGRAMS = 64
_SHORT_MAX_ROWS = 20_000


def unmodelled(name: str, type_: str) -> bool:
    """Whether a reflected table or index is search machinery of migration 0005, not a model."""
    if type_ == "table":
        return name == SQLITE_SEARCH_TABLE or name.startswith(SQLITE_SEARCH_TABLE + "_")
    return type_ == "index" and name == TRIGRAM_INDEX


def _like_pattern(needle: str) -> str:
    """``%needle%`` with LIKE's wildcards (and the escape character) matching themselves."""
    escaped = needle.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return f"%{escaped}%"


def _like(needle: str) -> ColumnElement[bool]:
    return Entry.search_text.like(_like_pattern(needle), escape="/")


def _phrase(text_: str) -> str:
    return '"' + text_.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Fts:
    """The FTS5 side of a SQLite search: MATCH terms ANDed together."""

    terms: list[str]

    def clause(self) -> ColumnElement[bool]:
        query = " AND ".join(self.terms)
        matching: Select[tuple[Any]] = (
            select(literal_column("rowid"))
            .select_from(text(SQLITE_SEARCH_TABLE))
            .where(text(f"{SQLITE_SEARCH_TABLE} MATCH :search_match").bindparams(search_match=query))
        )
        return Entry.id.in_(matching.scalar_subquery())


def _sqlite_has_index(session: Session) -> bool:
    found = session.execute(
        text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (:table, :vocab)"),
        {"table": SQLITE_SEARCH_TABLE, "vocab": SQLITE_SEARCH_TABLE + "_vocab"},
    ).scalar_one()
    return found == 2


def _postgres_has_index(session: Session) -> bool:
    return bool(session.execute(text("SELECT to_regclass(:name) IS NOT NULL"), {"name": TRIGRAM_INDEX}).scalar_one())


def _short_needle_terms(session: Session, folded: str) -> list[str] | None:
    """The trigrams that start with ``folded`` (one or two characters), or None when they are too
    many or too frequent for the index to beat a scan."""
    rows = session.execute(
        text(f"SELECT term, doc FROM {SQLITE_SEARCH_TABLE}_vocab WHERE term >= :low AND term < :high LIMIT :most"),
        {"low": folded, "high": folded + "\U0010ffff", "most": _SHORT_MAX_TRIGRAMS + 1},
    ).all()
    if len(rows) > _SHORT_MAX_TRIGRAMS or sum(int(doc) for _, doc in rows) > _SHORT_MAX_ROWS:
        return None
    return [str(term) for term, _ in rows]


def filters(session: Session, *, q: str | None, tag: str | None) -> list[ColumnElement[bool]]:
    """WHERE clauses on ``Entry`` for a text search ``q`` and an exact ``tag``."""
    if "\x00" in (q or "") + (tag or ""):
        return [false()]  # PostgreSQL text cannot hold NUL (it refuses the query): nothing matches
    clauses: list[ColumnElement[bool]] = []
    if tag:
        # Exact, as before the index existed; the index only narrows (",tag," is always a trigram).
        clauses.append(Entry.tags.contains(f",{tag},", autoescape=True))
    if not q and not tag:
        return clauses
    tag_needle = f",{tag}," if tag else None
    if session.get_bind().dialect.name != "sqlite":
        # PostgreSQL: the trigram index serves these LIKEs itself, in a plan made for this pattern
        # and LIMIT. psycopg prepares a statement it has run five times, and PostgreSQL may then
        # keep one generic plan for every pattern: a sequential scan (measured: 70-100 ms instead
        # of 3 ms at 100,000 entries). So this transaction plans each query for its values.
        session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
        if (not q or len(q) >= _TRIGRAM) and _postgres_has_index(session):
            # The planner underestimates the trigram index (a scan for a needle in 7% of 100,000
            # rows: 70 ms; the index: 12 ms; for 25%: 36 ms against 12). Ordered index scans that
            # find a page early stay allowed. A shorter needle has no trigram: leave it be.
            session.execute(text("SET LOCAL enable_seqscan = off"))
        for needle in (q, tag_needle):
            if needle:
                clauses.append(_like(needle.lower()))
        return clauses
    if not _sqlite_has_index(session):
        if q:
            clauses.append(_like(q))  # SQLite's LIKE ignores ASCII case
        return clauses
    fts: list[str] = [_phrase(tag_needle.lower())] if tag_needle else []
    if q and len(q) >= _TRIGRAM:
        fts.append(_phrase(q))
    elif q:
        clauses.append(_like(q))
        # "," and "\n" also stand between fields, where the trigram rule above has exceptions.
        terms = None if "," in q or "\n" in q else _short_needle_terms(session, q.lower())
        if terms is not None and not terms:
            return [*clauses, false()]  # no row contains it
        if terms:
            fts.append("(" + " OR ".join(_phrase(t) for t in terms) + ")")
    if fts:
        clauses.append(_Fts(fts).clause())
    return clauses
