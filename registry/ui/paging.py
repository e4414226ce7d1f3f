"""Page links for long lists: the first and last page, and a window around the current one.

At 10,000 entries a list has 200 pages; Previous/Next alone cannot reach page 150. The pager
shows ``1 … 48 49 [50] 51 52 … 200`` (``page_window``) next to a jump-to-page form.
"""

from __future__ import annotations

#: Pages shown on each side of the current one.
AROUND = 2


def page_window(page: int, pages_total: int, *, known_last: bool = True, around: int = AROUND) -> list[int | None]:
    """Page numbers to link, in order, with ``None`` where pages are left out. The last page is
    linked only when it is known (a search that stopped counting has no known last page); a page
    past the end links back to the real ones."""
    last = pages_total if known_last else max(pages_total, page)
    low, high = max(1, page - around), min(last, page + around)
    if page > last:
        low, high = max(1, last - around), last
    shown = sorted({1, *range(low, high + 1), *([last] if known_last else [])})
    links: list[int | None] = []
    previous = 0
    for number in shown:
        if number - previous == 2:
            links.append(number - 1)  # one page left out: show it rather than an ellipsis
        elif number - previous > 2:
            links.append(None)
        links.append(number)
        previous = number
    return links
