#!/usr/bin/env python3
"""Catalog search at scale: ``CatalogService.list_entries`` (what ``GET /api/v1/prompts?q=&tag=``
runs: the count and the page, labels included) over N prompts, on SQLite and on PostgreSQL.

Fills a fresh database (SQLite in a temporary folder; a fresh schema ``bench_<hex>`` on the
PostgreSQL server, dropped afterwards) through the migrations, inserts N prompts with Core
statements (names, titles, descriptions and tags drawn from a made-up vocabulary, two labels
each), then times each query ``--rounds`` times and prints p50 / p95 per query. ``--before`` also
times the query the service ran before migration 0005 (lower() LIKE over three columns and an
exact count), for comparison.

Target (issue 8): a search page p50 <= 50 ms at 100,000 entries.

    .venv/bin/python benchmarks/search.py                          # 100,000 entries, both databases
    .venv/bin/python benchmarks/search.py --entries 20000 --database sqlite --before

Exit status 0 whatever the figures (non-zero only when it cannot run).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import environment  # noqa: E402
from sqlalchemy import create_engine, func, insert, or_, select, text  # noqa: E402

from registry.config import Settings  # noqa: E402
from registry.db.engine import normalize_database_url  # noqa: E402
from registry.db.models import Entry, Label  # noqa: E402
from registry.runtime import Registry  # noqa: E402

TARGET_MS = 50.0
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "te",
    "vo",
    "zu",
    "bi",
    "da",
    "fe",
    "gi",
    "ho",
    "ja",
    "ku",
    "le",
    "mo",
    "na",
    "pe",
    "ri",
    "so",
    "tu",
    "va",
    "we",
    "xi",
    "yo",
    "ze",
]
TAGS = [f"team-{i}" for i in range(40)] + ["billing", "support", "ops", "search", "legal", "sales"]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _rows(n: int, seed: int = 8) -> tuple[list[dict[str, Any]], list[str]]:
    rng = random.Random(seed)
    words = _vocabulary(rng, 4000)
    common = words[:40]  # each in roughly a tenth of the descriptions
    rows = []
    for i in range(n):
        name = f"{rng.choice(words)}-{rng.choice(words)}-{i:06d}"
        title = " ".join(rng.choice(words) for _ in range(rng.randint(3, 6))).capitalize()
        text_words = [
            rng.choice(common) if rng.random() < 0.1 else rng.choice(words) for _ in range(rng.randint(10, 40))
        ]
        tags = sorted(set(rng.sample(TAGS, rng.randint(0, 3))))
        rows.append(
            {
                "kind": "prompt",
                "name": name,
                "latest_version": 1,
                "archived": False,
                "title": title,
                "description": " ".join(text_words) + ".",
                "tags": "," + ",".join(tags) + ("," if tags else ""),
            }
        )
    return rows, words


def _fill(registry: Registry, rows: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    with registry.db.session() as session:
        for start in range(0, len(rows), 2000):
            part = rows[start : start + 2000]
            ids = (
                session.execute(
                    insert(Entry.__table__).returning(Entry.__table__.c.id, sort_by_parameter_order=True),  # type: ignore[arg-type]
                    part,
                )
                .scalars()
                .all()
            )
            labels = [{"entry_id": i, "name": name, "version": 1} for i in ids for name in ("latest", "production")]
            session.execute(insert(Label.__table__), labels)  # type: ignore[arg-type]
    with registry.db.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    return time.perf_counter() - started


def _old_list(registry: Registry, q: str | None, tag: str | None) -> int:
    """The query ``list_entries`` ran before migration 0005 (count + page, no label loading)."""
    stmt = select(Entry).where(Entry.kind == "prompt", Entry.archived.is_(False))
    if tag:
        stmt = stmt.where(Entry.tags.contains(f",{tag},", autoescape=True))
    if q:
        needle = q.lower()
        stmt = stmt.where(
            or_(
                func.lower(Entry.name).contains(needle, autoescape=True),
                func.lower(func.coalesce(Entry.title, "")).contains(needle, autoescape=True),
                func.lower(func.coalesce(Entry.description, "")).contains(needle, autoescape=True),
            )
        )
    with registry.db.session() as session:
        total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
        session.scalars(stmt.order_by(Entry.name).limit(50)).all()
    return total


def _time(call: Callable[[], Any], rounds: int) -> tuple[float, float, Any]:
    result = call()  # warm-up (and the answer to show)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95, result


def _queries(rows: list[dict[str, Any]], words: list[str]) -> list[tuple[str, dict[str, Any]]]:
    rare = next(w for w in words[40:] if len(w) == 8)  # four syllables: in about 0.5% of the entries
    return [
        ("no filter, first page", {}),
        ("no filter, offset 50% (deep page)", {"offset": len(rows) // 2}),
        (f"common word q={words[0]!r}", {"q": words[0]}),
        (f"common word, capitalised q={words[1].upper()!r}", {"q": words[1].upper()}),
        (f"less common word q={rare!r}", {"q": rare}),
        ("one entry's name fragment", {"q": rows[len(rows) // 3]["name"][-10:]}),
        ("absent q='qqxzv'", {"q": "qqxzv"}),
        ("2 chars, common q='ka'", {"q": "ka"}),
        ("2 chars, in some names q='99'", {"q": "99"}),
        ("2 chars, absent q='qz'", {"q": "qz"}),
        ("1 char, common q='k'", {"q": "k"}),
        ("1 char, absent q='q'", {"q": "q"}),
        ("tag=billing", {"tag": "billing"}),
        (f"tag=ops + q={words[2]!r}", {"tag": "ops", "q": words[2]}),
    ]


@contextmanager
def _database(kind: str, pg_url: str, work: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{work / 'search.db'}"
        return
    server = normalize_database_url(pg_url)
    schema = "bench_" + secrets.token_hex(5)
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in server else "?"
    try:
        yield server + sep + "options=" + quote(f"-csearch_path={schema}")
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def run(kind: str, args: argparse.Namespace, rows: list[dict[str, Any]], words: list[str]) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory(prefix="search-bench-") as tmp, _database(kind, args.pg_url, Path(tmp)) as url:
        settings = Settings(data_dir=Path(tmp) / "data", database_url=url, secret_key="bench")
        registry = Registry(settings)
        registry.prepare()
        seconds = _fill(registry, rows)
        print(f"\n== {kind}: {len(rows):,} prompts inserted in {seconds:.1f} s ({len(rows) / seconds:,.0f}/s)")
        print(
            f"{'query':52s} {'p50 ms':>8s} {'p95 ms':>8s} {'total':>8s}  {'target':>6s}"
            + ("  before p50" if args.before else "")
        )
        p50s = []
        for label, query in _queries(rows, words):
            p50, p95, page = _time(functools.partial(registry.catalog.list_entries, "prompt", **query), args.rounds)
            total = f"{page.total}{'' if page.total_exact else '+'}"
            verdict = "PASS" if p50 <= TARGET_MS else "MISS"
            line = f"{label:52s} {p50:8.1f} {p95:8.1f} {total:>8s}  {verdict:>6s}"
            if args.before and "offset" not in query:
                old_query = functools.partial(_old_list, registry, query.get("q"), query.get("tag"))
                old, _, old_total = _time(old_query, max(3, args.rounds // 4))
                line += f"  {old:10.1f} ({old_total})"
            print(line)
            p50s.append((label, p50))
        registry.close()
    return p50s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("REGISTRY_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--before", action="store_true", help="also time the pre-0005 query")
    parser.add_argument("--json", type=Path, help="also write the p50s, with the environment, here")
    args = parser.parse_args()
    env = environment.describe()
    print(environment.headline(env))
    rows, words = _rows(args.entries)
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    figures: dict[str, dict[str, float]] = {}
    for kind in kinds:
        p50s = run(kind, args, rows, words)
        figures[kind] = dict(p50s)
        search_p50s = [p for label, p in p50s if "no filter" not in label]
        print(
            f"{kind}: median of the search queries' p50 {statistics.median(search_p50s):.1f} ms, "
            f"worst p50 {max(search_p50s):.1f} ms (target p50 <= {TARGET_MS:.0f} ms)"
        )
    if args.json:
        saved = {"environment": env, "entries": args.entries, "p50_ms": figures}
        args.json.write_text(json.dumps(saved, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
