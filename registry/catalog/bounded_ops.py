"""Bounded versions of the template operations that can build large values.

Each check here runs *before* the value exists and asks the render's budget
(``registry.catalog.render_budget``) whether a value of the estimated size may be built:
``%``-formatting (widths and precisions), ``str.format`` specs, the filters that pad, repeat,
join or re-encode (``center``, ``indent``, ``format``, ``wordwrap``, ``truncate``, ``join``,
``replace``, ``batch``, ``slice``, ``sum``, ``tojson``, ...), and string methods such as
``ljust`` or ``replace``. After the operation the result is counted towards the render's work, so
many individually small values cannot add up without bound either.

``urlize`` and ``lipsum`` are left out of templates: they are HTML/placeholder helpers with no use
in prompts, and ``urlize`` has regular expressions that backtrack on long runs of punctuation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any

from jinja2.filters import FILTERS as JINJA_FILTERS
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import _PassArg, pass_context

from registry.catalog.render_budget import RenderBudget, TemplateError, current_budget, text_size

#: ``%[(name)][flags][width][.precision][length]type`` (each part optional, so no backtracking).
_PERCENT = re.compile(r"%(?:\(([^)]*)\))?([-#0 +]*)(\*|\d+)?(?:\.(\*|\d*))?[hlL]?([a-zA-Z%])?")
#: ``[[fill]align][sign][z][#][0][width][grouping][.precision][type]`` of ``str.format``.
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?", re.DOTALL)
#: Room for the digits of any float or int a template can make (ints are capped in bits).
_NUMBER_CHARS = 400


# -- printf-style and str.format ---------------------------------------------------------


def percent_size(fmt: str | bytes, args: Any, budget: RenderBudget) -> int:
    """About how long ``fmt % args`` is. Refuses ``*`` widths and widths or precisions over the
    output limit before Python allocates them (``"%999999999s" % 1`` is one allocation)."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    positional = args if isinstance(args, tuple) else (args,)
    total = len(text)
    index = 0
    for match in _PERCENT.finditer(text):
        name, _flags, width, precision, conversion = match.groups()
        if conversion == "%" and width is None and precision is None and name is None:
            continue
        if width == "*" or precision == "*":
            raise TemplateError("'*' widths and precisions are not supported in template formatting")
        width_n = int(width) if width else 0
        precision_n = int(precision) if precision else 0
        budget.check_size(max(width_n, precision_n), f"the format {match.group()[:24]!r}")
        if name is not None and isinstance(args, Mapping):
            value = args.get(name)
        elif index < len(positional):
            value = positional[index]
            index += 1
        else:
            value = None
        if conversion in ("s", "r", "a"):
            size = text_size(value, budget.max_chars) * (1 if conversion == "s" else 10)
            if precision:
                size = min(size, precision_n)
        else:
            size = precision_n + text_size(value, budget.max_chars) + _NUMBER_CHARS
        total += max(width_n, size)
        budget.check_size(total, "this %-format")
    return total


def format_spec_size(value: Any, spec: str, budget: RenderBudget) -> int:
    """About how long ``format(value, spec)`` is; refuses widths/precisions over the output limit."""
    match = _SPEC.fullmatch(spec)
    width = int(match.group(1)) if match and match.group(1) else 0
    precision = int(match.group(2)) if match and match.group(2) else 0
    budget.check_size(max(width, precision), f"the format spec {spec[:24]!r}")
    size = text_size(value, budget.max_chars)
    if not isinstance(value, str):
        size += precision + _NUMBER_CHARS
    elif precision:
        size = min(size, precision)
    return max(width, size)


class _BoundedFormatting:
    """``str.format`` in templates: each replacement field is sized before it is formatted."""

    _total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        budget = current_budget()
        budget.check_time()
        self._total += format_spec_size(value, format_spec, budget)
        budget.check_size(self._total, "this str.format()")
        return super().format_field(value, format_spec)  # type: ignore[misc]

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion in ("r", "a"):
            current_budget().check_size(10 * text_size(value, current_budget().max_chars), "this !r conversion")
        return super().convert_field(value, conversion)  # type: ignore[misc]


class BoundedFormatter(_BoundedFormatting, SandboxedFormatter):
    pass


class BoundedEscapeFormatter(_BoundedFormatting, SandboxedEscapeFormatter):
    pass


# -- string methods ------------------------------------------------------------------------


def _int_arg(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str, default: int = 0) -> int:
    value = args[index] if len(args) > index else kwargs.get(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _replace_size(text: str | bytes, old: Any, new: Any, count: int | None) -> int:
    if not isinstance(old, str | bytes) or not isinstance(new, str | bytes) or type(old) is not type(text):
        return len(text)
    occurrences = text.count(old) if old else len(text) + 1  # type: ignore[arg-type]
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    return len(text) + occurrences * max(0, len(new) - len(old))


def check_method_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any], budget: RenderBudget) -> tuple[Any, ...]:
    """Size check before a string method that can grow its result; returns the arguments to use
    (``join`` materialises its iterable first, drawing from the loop budget)."""
    owner = getattr(obj, "__self__", None)
    if not isinstance(owner, str | bytes):
        return args
    name = getattr(obj, "__name__", "")
    what = f"str.{name}()"
    if name in ("center", "ljust", "rjust", "zfill"):
        budget.check_size(max(len(owner), _int_arg(args, kwargs, 0, "width")), what)
    elif name == "expandtabs":
        tabsize = _int_arg(args, kwargs, 0, "tabsize", 8)
        tabs = owner.count("\t" if isinstance(owner, str) else b"\t")  # type: ignore[arg-type]
        budget.check_size(len(owner) + tabs * max(tabsize, 0), what)
    elif name == "replace" and len(args) >= 2:
        count = args[2] if len(args) > 2 and isinstance(args[2], int) else kwargs.get("count")
        budget.check_size(_replace_size(owner, args[0], args[1], count), what)
    elif name == "join" and args:
        items = materialize(args[0], budget)
        size = sum(len(i) if isinstance(i, str | bytes) else 0 for i in items) + len(owner) * max(len(items) - 1, 0)
        budget.check_size(size, what)
        return (items, *args[1:])
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.check_size(len(owner) * max(longest, 1), what)
    return args


def materialize(iterable: Any, budget: RenderBudget) -> list[Any]:
    """``list(iterable)``, one loop iteration per item."""
    if isinstance(iterable, Sized) and isinstance(iterable, Iterable):
        budget.tick(len(iterable))
        return list(iterable)
    return list(budget.guard(iterable))


# -- filters -------------------------------------------------------------------------------

#: Filters that walk their whole input: each item draws from the loop budget.
_CONSUMING = frozenset(
    {
        "batch", "dictsort", "groupby", "items", "join", "list", "map", "max", "min", "reject", "rejectattr",
        "reverse", "select", "selectattr", "slice", "sort", "sum", "unique",
    }
)  # fmt: skip
#: Filters not offered to templates (see the module docstring).
_LEFT_OUT = frozenset({"urlize"})


def _size(value: Any, budget: RenderBudget) -> int:
    return text_size(value, budget.max_chars)


def _center(budget: RenderBudget, value: Any, width: Any = 80, *_: Any, **__: Any) -> int:
    return max(_size(value, budget), width if isinstance(width, int) else 0)


def _indent(budget: RenderBudget, s: Any, width: Any = 4, *_: Any, **__: Any) -> int:
    prefix = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    lines = s.count("\n") + 2 if isinstance(s, str) else 2
    return _size(s, budget) + 1 + lines * max(prefix, 0)


def _format(budget: RenderBudget, value: Any, *args: Any, **kwargs: Any) -> int:
    return percent_size(str(value) if not isinstance(value, str) else value, kwargs or args, budget)


def _wordwrap(
    budget: RenderBudget, s: Any, width: Any = 79, _long: Any = True, wrapstring: Any = None, **_: Any
) -> int:
    text = s if isinstance(s, str) else ""
    width = width if isinstance(width, int) and width > 0 else 1
    # Two consecutive wrapped lines hold more than ``width`` characters together.
    lines = min(len(text), 2 * len(text) // width) + text.count("\n") + 2
    budget.tick(lines + text.count(" "))  # textwrap walks every word and line in Python
    return _size(s, budget) + lines * (len(wrapstring) if isinstance(wrapstring, str) else 1)


def _truncate(budget: RenderBudget, s: Any, length: Any = 255, _kill: Any = False, end: Any = "...", **_: Any) -> int:
    kept = min(_size(s, budget), length if isinstance(length, int) else 0)
    return kept + (len(end) if isinstance(end, str) else 0)


def _join(budget: RenderBudget, items: list[Any], d: Any = "", *_: Any, **__: Any) -> int:
    total = len(d) * max(len(items) - 1, 0) if isinstance(d, str) else 0
    for item in items:
        total += _size(item, budget)
        if total > budget.max_chars:
            break
    return total


def _replace(budget: RenderBudget, s: Any, old: Any = "", new: Any = "", count: Any = None, *_: Any, **__: Any) -> int:
    text = s if isinstance(s, str) else str(s) if isinstance(s, int | float) else ""
    if not text:
        return _size(s, budget)
    size = _replace_size(text, old, new, count if isinstance(count, int) else None)
    return size * (6 if hasattr(s, "__html__") else 1)


def _batch(budget: RenderBudget, value: Any, linecount: Any = 1, *_: Any, **__: Any) -> int:
    budget.check_count(linecount if isinstance(linecount, int) else 0, "batch()")
    return 0


def _slice(budget: RenderBudget, value: Any, slices: Any = 1, *_: Any, **__: Any) -> int:
    budget.check_count(slices if isinstance(slices, int) else 0, "slice()")
    return 0


def _sum(budget: RenderBudget, items: list[Any], attribute: Any = None, start: Any = 0, **_: Any) -> int:
    if isinstance(start, list | tuple | str):
        count = len(start) + sum(len(i) for i in items if isinstance(i, Sized))
        budget.check_count(count, "sum()")
    return 0


def _escape_size(value: Any, budget: RenderBudget) -> int:
    if isinstance(value, str):
        return (
            len(value)
            + 4 * (value.count("&") + value.count('"') + value.count("'"))
            + 3 * (value.count("<") + value.count(">"))
        )
    return 6 * _size(value, budget)


def _tojson(budget: RenderBudget, value: Any, indent: Any = None, *_: Any, **__: Any) -> int:
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if width > 16:
        raise TemplateError("tojson indent is limited to 16 in templates")
    return 6 * _size(value, budget) * (1 + width)


ESTIMATES: dict[str, Callable[..., int]] = {
    "center": _center,
    "indent": _indent,
    "format": _format,
    "wordwrap": _wordwrap,
    "truncate": _truncate,
    "join": _join,
    "replace": _replace,
    "batch": _batch,
    "slice": _slice,
    "sum": _sum,
    "string": lambda budget, value, *a, **k: _size(value, budget),
    "pprint": lambda budget, value, *a, **k: 2 * _size(value, budget),
    "tojson": _tojson,
    "xmlattr": lambda budget, value, *a, **k: 6 * _size(value, budget),
    "urlencode": lambda budget, value, *a, **k: 12 * _size(value, budget),
    "e": lambda budget, value, *a, **k: _escape_size(value, budget),
    "escape": lambda budget, value, *a, **k: _escape_size(value, budget),
    "forceescape": lambda budget, value, *a, **k: _escape_size(value, budget),
}


def _bounded_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    pass_arg = _PassArg.from_obj(original)
    estimate = ESTIMATES.get(name)
    consumes = name in _CONSUMING
    what = f"the {name} filter"

    # pass_context also keeps Jinja from evaluating the filter at compile time (constant
    # folding), so saving a template never runs a filter.
    @pass_context
    def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.check_time()
        if name in ("join", "sum"):
            value = materialize(value, budget)  # their size estimate looks at every item
        elif consumes:
            if isinstance(value, Sized):
                budget.tick(len(value))
            else:
                value = budget.guard(value)
        if estimate is not None:
            budget.check_size(estimate(budget, value, *args, **kwargs), what)
        if pass_arg is _PassArg.context:
            result = original(context, value, *args, **kwargs)
        elif pass_arg is _PassArg.eval_context:
            result = original(context.eval_ctx, value, *args, **kwargs)
        elif pass_arg is _PassArg.environment:
            result = original(context.environment, value, *args, **kwargs)
        else:
            result = original(value, *args, **kwargs)
        return budget.account(result, what)

    bounded.__name__ = getattr(original, "__name__", name)
    bounded.__doc__ = original.__doc__
    return bounded


def bounded_filters() -> dict[str, Callable[..., Any]]:
    """Jinja's built-in filters, each checked against the render's budget."""
    return {name: _bounded_filter(name, fn) for name, fn in JINJA_FILTERS.items() if name not in _LEFT_OUT}


__all__ = [
    "BoundedEscapeFormatter",
    "BoundedFormatter",
    "bounded_filters",
    "check_method_call",
    "format_spec_size",
    "materialize",
    "percent_size",
]
