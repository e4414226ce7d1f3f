"""What one render may spend, checked *while* it runs: time, loop iterations, value sizes, output.

A template is a small program written by an editor and run with an agent's arguments. Capping
the output after the fact is not enough: one ``"%999999999s" % 1``, one ``'x'|center(10**9)`` or a
string doubled in a loop allocates gigabytes inside a single Python operation, before any output
exists, and a single long C-level operation also holds the GIL, so even a render in a worker
thread would stall the event loop. So every operation that can build a large value (the
sandbox's intercepted operators, ``~``, filters, method calls, slicing, buffered blocks, output)
asks the current ``RenderBudget`` first, with an estimate of the size it is about to build, and
every loop draws from one iteration budget shared by all loops of the render.

One budget covers one request (a ``prompts/get`` with all its messages and embedded resources, a
``resources/read``, a REST preview). It travels in a context variable so that renders in
different threads or tasks never share one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from jinja2.runtime import Namespace

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

#: Intermediate values one render may build, all together, as a multiple of the output cap: a
#: template may compute more than it prints, but not without bound (``{% set %}`` after
#: ``{% set %}`` of large strings is memory nobody frees until the render ends).
WORK_FACTOR = 8
#: One element of a list, tuple or dict counts as this many characters of work (a reference and
#: usually a small object).
ITEM_WEIGHT = 8
#: Exponents and products beyond this many result bits are refused (``x ** y`` or repeated
#: squaring on big ints can run for minutes inside one operation).
MAX_INT_BITS = 100_000
#: Deepest nesting of containers whose text size is estimated before they are printed.
MAX_NESTING = 64
#: How often (in budget checks) the quick slice looks at the thread's CPU clock (a syscall).
_SLICE_CHECK_EVERY = 16


class TemplateError(ValueError):
    """A template cannot be saved or rendered. The message is safe to show to users and agents."""


class RenderLimitError(TemplateError):
    """A render went over one of the limits; ``limit`` names the ``Limits`` field."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(str(LimitExceeded(limit, message)))
        self.limit = limit


class NeedsMoreTime(BaseException):
    """The render used up its quick slice; the runner restarts it in the bounded heavy lane.

    A ``BaseException`` so that no ``except Exception`` inside Jinja or a filter swallows it.
    """


class RenderBudget:
    """Counters and deadlines of one render request. Not thread-safe: one render, one thread."""

    __slots__ = (
        "_checks",
        "cancelled",
        "deadline",
        "iterations",
        "limits",
        "max_chars",
        "max_items",
        "max_iterations",
        "max_work",
        "output",
        "quick_cpu_until",
        "work",
    )

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        seconds: float | None = None,
        max_chars: int | None = None,
        deadline: float | None = None,
    ) -> None:
        self.limits = limits
        self.max_chars = max_chars if max_chars is not None else limits.render_output_chars
        self.max_iterations = limits.render_loop_iterations
        #: A list longer than the loop budget could never be iterated; it is refused when built.
        self.max_items = limits.render_loop_iterations
        self.max_work = WORK_FACTOR * self.max_chars
        if deadline is None:
            deadline = time.monotonic() + (seconds if seconds is not None else limits.render_seconds)
        self.deadline = deadline
        self.iterations = 0
        self.work = 0
        self.output = 0
        #: Set by the runner when it gave up waiting: the thread stops at its next check.
        self.cancelled = False
        #: Thread CPU time (``time.thread_time``) after which the quick lane hands over, or None.
        self.quick_cpu_until: float | None = None
        self._checks = 0

    def fresh(self) -> RenderBudget:
        """A new budget with the same limits and deadline (a render restarted in another lane)."""
        return RenderBudget(self.limits, max_chars=self.max_chars, deadline=self.deadline)

    # -- time ---------------------------------------------------------------------------
    def check_time(self) -> None:
        if self.cancelled or time.monotonic() > self.deadline:
            raise self.timeout_error()
        if self.quick_cpu_until is not None:
            self._checks += 1
            if self._checks % _SLICE_CHECK_EVERY == 0 and time.thread_time() > self.quick_cpu_until:
                raise NeedsMoreTime

    def timeout_error(self) -> RenderLimitError:
        return RenderLimitError(
            "render_seconds", f"template rendering took longer than {self.limits.render_seconds:g} s and was stopped"
        )

    # -- loops --------------------------------------------------------------------------
    def tick(self, count: int = 1) -> None:
        """``count`` more loop iterations (or items a filter is about to walk)."""
        self.iterations += count
        if self.iterations > self.max_iterations:
            raise RenderLimitError(
                "render_loop_iterations",
                f"template loops ran more than {self.max_iterations} iterations in all",
            )
        if count > 1 or self.iterations & 63 == 0:
            self.check_time()

    def guard(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable``, drawing one iteration from the budget per item (every template loop)."""
        for item in iterable:
            self.tick()
            yield item

    # -- sizes --------------------------------------------------------------------------
    def check_size(self, size: int, what: str) -> None:
        """Refuse to build a value of about ``size`` characters (checked *before* building it)."""
        if size > self.max_chars:
            raise RenderLimitError(
                "render_output_chars", f"{what} would build {size} characters, which exceeds {self.max_chars}"
            )

    def check_count(self, count: int, what: str) -> None:
        if count > self.max_items:
            raise RenderLimitError(
                "render_loop_iterations", f"{what} would build {count} items, which exceeds {self.max_items}"
            )

    def account(self, value: Any, what: str) -> Any:
        """Count a value just built towards the render's work; refuse one that is too large."""
        if isinstance(value, str | bytes | bytearray):
            size = len(value)
            self.check_size(size, what)
        elif isinstance(value, list | tuple | dict | set | frozenset):
            self.check_count(len(value), what)
            size = ITEM_WEIGHT * len(value)
        else:
            return value
        self.work += size
        if self.work > self.max_work:
            raise RenderLimitError(
                "render_output_chars",
                f"the template built more than {self.max_work} characters of intermediate values "
                f"({WORK_FACTOR} times the output limit)",
            )
        return value

    def add_output(self, chars: int) -> None:
        self.output += chars
        if self.output > self.max_chars:
            raise RenderLimitError("render_output_chars", f"rendered output exceeds {self.max_chars} characters")


_current: ContextVar[RenderBudget | None] = ContextVar("render_budget", default=None)


def current_budget() -> RenderBudget:
    """The budget of the render running here; a fresh default one outside any render (tests that
    use the Jinja environment directly), so the checks never need a special case."""
    budget = _current.get()
    return budget if budget is not None else RenderBudget()


def active_budget() -> RenderBudget | None:
    return _current.get()


class render_scope:
    """``with render_scope(budget):`` makes ``budget`` the active one for the block. A class, not
    ``@contextmanager``: it wraps every inline render, where a generator costs several times more."""

    __slots__ = ("budget", "token")

    def __init__(self, budget: RenderBudget) -> None:
        self.budget = budget

    def __enter__(self) -> RenderBudget:
        self.token = _current.set(self.budget)
        return self.budget

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


# -- estimating sizes before building ---------------------------------------------------


def text_size(value: Any, limit: int) -> int:
    """About how many characters ``str(value)`` has, without building it.

    Walks containers (their ``str`` is the ``repr`` of every item) and stops as soon as the total
    passes ``limit``: ``[big] * 1000`` costs two items to judge, not a gigabyte to print.
    """
    return _text_size(value, limit, 0, top=True)


def _text_size(value: Any, limit: int, depth: int, *, top: bool = False) -> int:
    if isinstance(value, str):
        if top or len(value) > limit:
            return len(value)
        # repr() escapes control and non-printable characters (up to 10 characters each).
        return len(value) + 2 if value.isprintable() else 10 * len(value) + 2
    if isinstance(value, bytes | bytearray):
        return 4 * len(value) + 3
    if value is None or isinstance(value, bool | float):
        return 32
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if depth >= MAX_NESTING:
        raise TemplateError(f"a value in this template is nested more than {MAX_NESTING} levels deep")
    items: Iterable[Any]
    if isinstance(value, Namespace):
        items = _mapping_items(getattr(value, "_Namespace__attrs", {}))
    elif isinstance(value, Mapping):
        items = _mapping_items(value)
    elif isinstance(value, list | tuple | set | frozenset):
        items = value
    else:
        return 64  # a macro, loop or cycler prints as a short description
    total = 2
    for item in items:
        total += _text_size(item, limit - total, depth + 1) + 2
        if total > limit:
            break
    return total


def _mapping_items(mapping: Mapping[Any, Any]) -> Iterator[Any]:
    for key, item in mapping.items():
        yield key
        yield item


def int_bits(value: Any) -> int:
    return value.bit_length() if isinstance(value, int) and not isinstance(value, bool) else 0
