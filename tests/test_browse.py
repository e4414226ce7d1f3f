"""Browsing a large catalog through the service (issue 25, item 6), on SQLite and PostgreSQL:
orders (name both ways, newest update, most used in 30 days), the prefix filter, folders made
from dotted names with their counts, and the refusals; plus the page-number window and the
usage sums' background refresh."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from registry.catalog.browse import UsageRanking, folder_path, usage_order
from registry.catalog.errors import Invalid
from registry.catalog.usage import hour_number, write_counts
from registry.catalog.values import WriteOptions
from registry.db.engine import Database
from registry.runtime import Registry
from registry.ui.paging import page_window
from tests.waiting import wait_until

NAMES = ["alpha", "support.refund-reply", "support.billing.refund", "support.billing.dispute", "zeta", "Support.x"]


@pytest.fixture
def filled(registry: Registry) -> Registry:
    for name in NAMES:
        registry.catalog.create("prompt", {"name": name, "template": "hi"}, WriteOptions(actor="alice"))
    return registry


def names(page: object) -> list[str]:
    return [item["name"] for item in page.items]  # type: ignore[attr-defined]


def test_orders_prefix_and_folders(filled: Registry) -> None:
    catalog = filled.catalog
    by_name = names(catalog.list_entries("prompt", limit=50))
    assert names(catalog.list_entries("prompt", limit=50, sort="name-desc")) == by_name[::-1]
    catalog.update("prompt", "alpha", {"name": "alpha", "template": "again"}, WriteOptions(actor="alice"))
    assert names(catalog.list_entries("prompt", limit=50, sort="updated"))[0] == "alpha"

    # Case matters in a prefix (SQLite's LIKE ignores it; the filter does not).
    inside = catalog.list_entries("prompt", limit=50, prefix="support.")
    assert sorted(names(inside)) == ["support.billing.dispute", "support.billing.refund", "support.refund-reply"]
    assert inside.total == 3
    assert names(catalog.list_entries("prompt", limit=50, prefix="support.", direct=True)) == ["support.refund-reply"]
    top = sorted(names(catalog.list_entries("prompt", limit=50, direct=True)))
    assert top == ["alpha", "zeta"]

    listed, count = catalog.folders("prompt")
    assert sorted(listed) == [("Support.", 1), ("support.", 3)] and count == 2  # in the database's collation
    assert catalog.folders("prompt", prefix="support.") == ([("support.billing.", 2)], 1)
    assert catalog.folders("prompt", prefix="support.", q="dispute") == ([("support.billing.", 1)], 1)
    assert catalog.folders("prompt", prefix="support.billing.") == ([], 0)

    with pytest.raises(Invalid, match="is not a sort order"):
        catalog.list_entries("prompt", sort="popular")
    with pytest.raises(Invalid, match="is not the start of a name"):
        catalog.list_entries("prompt", prefix="support/")
    with pytest.raises(Invalid, match="is not the start of a name"):
        catalog.folders("prompt", prefix="x" * 129)


def test_usage_order_counts_the_last_30_days(filled: Registry) -> None:
    catalog = filled.catalog
    now = hour_number()
    old = hour_number((datetime.now(UTC) - timedelta(days=31)).timestamp())
    write_counts(
        catalog.db,
        {
            (now, "prompt", "zeta", 1, 1, None, "get"): 5,
            (now - 5, "prompt", "zeta", 1, None, "bob", "get"): 2,
            (now, "prompt", "support.refund-reply", 1, 1, None, "get"): 3,
            (old, "prompt", "alpha", 1, 1, None, "get"): 100,  # too old to count
            (now, "tool", "alpha", 1, 1, None, "call"): 50,  # another kind
        },
    )
    # The first usage-ordered list of a process reads the sums while it filters (a search opens
    # its transaction first): on SQLite the two must not wait for each other.
    searched = catalog.list_entries("prompt", limit=50, sort="usage", q="eta")
    assert [(i["name"], i["uses"]) for i in searched.items] == [("zeta", 7)]
    page = catalog.list_entries("prompt", limit=3, sort="usage")
    shown = [(i["name"], i["uses"]) for i in page.items]
    assert shown[:2] == [("zeta", 7), ("support.refund-reply", 3)] and shown[2][1] == 0  # then name order
    assert page.total == len(NAMES)
    second = catalog.list_entries("prompt", limit=3, offset=3, sort="usage")
    assert len(second.items) == 3 and {i["uses"] for i in second.items} == {0}
    # The ordered names are kept between pages, and made again after any change to the catalog.
    before = names(catalog.list_entries("prompt", limit=50, sort="usage"))
    assert before == names(catalog.list_entries("prompt", limit=50, sort="usage"))
    catalog.create("prompt", {"name": "support.aaa", "template": "hi"}, WriteOptions(actor="alice"))
    after = names(catalog.list_entries("prompt", limit=50, sort="usage"))
    assert after[:2] == ["zeta", "support.refund-reply"] and "support.aaa" in after and len(after) == len(before) + 1
    catalog.set_archived("prompt", "zeta", True, WriteOptions(actor="alice"))
    assert "zeta" not in names(catalog.list_entries("prompt", limit=50, sort="usage"))
    assert names(catalog.list_entries("prompt", limit=50, sort="usage", prefix="support.")) == [
        "support.refund-reply",
        "support.aaa",
        "support.billing.dispute",
        "support.billing.refund",
    ]


def test_usage_sums_are_read_again_in_the_background(tmp_path: object) -> None:
    reads: list[str] = []
    release = threading.Event()

    def read(db: Database, kind: str) -> dict[str, int]:
        reads.append(kind)
        if len(reads) > 1:
            release.wait(10)
        return {"a": len(reads)}

    ranking = UsageRanking(None, ttl_s=0, read=read)  # type: ignore[arg-type]  # always stale
    assert ranking.sums("prompt") == {"a": 1}  # the first read waits for the sums
    assert ranking.sums("prompt") == {"a": 1}  # stale: served at once while a read starts
    assert ranking.sums("prompt") == {"a": 1}  # one read at a time
    release.set()
    wait_until(lambda: ranking.sums("prompt")["a"] >= 2, "the background read")
    assert reads[:2] == ["prompt", "prompt"]


def test_page_window_and_breadcrumbs() -> None:
    assert page_window(1, 1) == [1]
    assert page_window(50, 200) == [1, None, 48, 49, 50, 51, 52, None, 200]
    assert page_window(4, 200) == [1, 2, 3, 4, 5, 6, None, 200]
    assert page_window(999, 3) == [1, 2, 3]
    assert page_window(5, 9, known_last=False) == [1, 2, 3, 4, 5, 6, 7]
    assert folder_path("support.billing.") == [("support", "support."), ("billing", "support.billing.")]
    assert folder_path("support.bil") == [("support", "support."), ("bil", "support.bil")]
    assert usage_order(["a", "b", "c", "d"], {"c": 2, "d": 2, "b": 9}) == ["b", "c", "d", "a"]
