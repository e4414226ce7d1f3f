"""The Jinja2 sandbox that every prompt and resource template goes through.

Templates are written by editors but rendered with arguments from agents, so rendering is
sandboxed (no attribute games, no mutating lists or dicts), strict (an undeclared or missing
variable is an error, never an empty string) and bounded *while it runs*: every loop draws from
one iteration budget, every operation that can build a large value checks its size first
(``registry.catalog.bounded_ops``), output is counted as it is produced and the clock is watched
throughout (``registry.catalog.render_budget``). Nothing is evaluated when a template is saved:
the operators and filters that could build large values are never constant-folded, and sizes
that are visible in the source (``"%50000000s"``, ``center(10**8)``) are refused right away.

The code generator is extended in two places to make this hold for every loop and every ``~``:
``{% for %}`` iterables are wrapped in the budget's guard, and ``~`` goes through a checked join.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import update_wrapper
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, meta, nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.runtime import BlockReference, Context, LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import pass_context
from markupsafe import Markup

from registry.catalog.bounded_ops import (
    ESTIMATES,
    BoundedEscapeFormatter,
    BoundedFormatter,
    bounded_filters,
    check_method_call,
    percent_size,
)
from registry.catalog.render_budget import (
    MAX_INT_BITS,
    RenderBudget,
    RenderLimitError,
    TemplateError,
    active_budget,
    current_budget,
    int_bits,
    render_scope,
    text_size,
)
from registry.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "CompiledTemplate",
    "RenderLimitError",
    "TemplateError",
    "TemplateIssue",
    "check_template",
    "compiled",
    "render_template",
    "template_variables",
]

#: Exponents and products beyond this many result bits are refused.
MAX_POWER_BITS = MAX_INT_BITS


@dataclass(frozen=True)
class TemplateIssue:
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


# -- code generation ---------------------------------------------------------------------


class _BudgetedCodeGenerator(CodeGenerator):
    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        #: The iterables of every ``{% for %}`` (Jinja allows no custom node types to mark them).
        self._loop_iterables = {id(loop.iter) for loop in node.find_all(nodes.For)}
        super().visit_Template(node, frame)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        if id(node) in getattr(self, "_loop_iterables", ()):
            self.write("environment.guard_loop(")
            super().visit(node, *args, **kwargs)
            self.write(")")
            return None
        return super().visit(node, *args, **kwargs)

    @optimizeconst
    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        # Jinja slices with Python syntax, bypassing the environment; a slice copies, so it goes
        # through ``environment.getitem`` too, where the copy is counted.
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for part in (node.arg.start, node.arg.stop, node.arg.step):
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
            self.write(", ")
        self.write("))")

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.checked_join({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


# -- the environment -----------------------------------------------------------------------


def _check_repetition(sequence: Any, times: Any, budget: RenderBudget) -> None:
    if not isinstance(times, int) or isinstance(times, bool):
        return
    if isinstance(sequence, str | bytes):
        budget.check_size(len(sequence) * times, "repeating a value with '*'")
    elif isinstance(sequence, list | tuple):
        budget.check_count(len(sequence) * times, "repeating a list with '*'")


def _power_bits(base: Any, exponent: Any) -> int:
    """Roughly how many bits ``base ** exponent`` has (0 when it cannot grow: floats overflow cheaply)."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return 0
    return exponent * abs(base).bit_length() if abs(base) > 1 else 0


def _checked_concat(parts: Iterable[str]) -> str:
    """``environment.concat``: joins the buffered output of macros, ``{% set %}`` and
    ``{% filter %}`` blocks, refusing before the joined string would pass the output limit."""
    budget = current_budget()
    size = 0
    kept: list[str] = []
    for part in parts:
        size += len(part)
        if size > budget.max_chars:
            budget.check_size(size, "a block of this template")
        kept.append(part)
    return str(budget.account("".join(kept), "a block of this template"))


@pass_context
def _finalize(context: Context, value: Any) -> Any:
    """Before ``{{ value }}`` is turned into text: a list of a thousand large strings is refused
    here, not after ``str()`` has built it."""
    if not isinstance(value, str):
        budget = current_budget()
        budget.check_size(text_size(value, budget.max_chars), "printing this value")
    return value


def _bounded_range(*args: Any) -> range:
    budget = current_budget()
    values = range(*args)
    try:
        count = len(values)
    except OverflowError:
        count = budget.max_iterations + 1
    if count > budget.max_iterations:
        raise RenderLimitError(
            "render_loop_iterations", f"range() of {count} items exceeds the loop limit of {budget.max_iterations}"
        )
    return values


class _RegistrySandbox(ImmutableSandboxedEnvironment):
    """A sandbox whose loops, operators, filters and calls spend the current render's budget.

    ``*``, ``**``, ``+`` and ``%`` are intercepted: one ``"x" * n``, ``a ** b``, ``s + s`` or
    ``"%999999999s" % 1`` could otherwise allocate gigabytes or spin for minutes inside one Python
    operation, where neither the output cap nor the clock can stop it. Intercepted operators are
    also never constant-folded, so saving a template does not evaluate them.
    """

    code_generator_class = _BudgetedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    concat = staticmethod(_checked_concat)

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
        self.filters = bounded_filters()
        self.globals["range"] = _bounded_range
        self.globals.pop("lipsum", None)

    @staticmethod
    def guard_loop(iterable: Iterable[Any]) -> Iterator[Any]:
        return current_budget().guard(iterable)

    @staticmethod
    def checked_join(join: Callable[[Iterable[Any]], str], items: tuple[Any, ...]) -> str:
        """``a ~ b``: sized before the string is built (a string doubled in a loop stops here)."""
        budget = current_budget()
        budget.check_time()
        size = 0
        for item in items:
            size += text_size(item, budget.max_chars)
            budget.check_size(size, "joining values with '~'")
        return str(budget.account(join(items), "joining values with '~'"))

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = current_budget()
        budget.check_time()
        if operator == "*":
            _check_repetition(left, right, budget)
            _check_repetition(right, left, budget)
            if int_bits(left) + int_bits(right) > MAX_POWER_BITS:
                raise TemplateError("the result of '*' in this template would be too large")
        elif operator == "**" and _power_bits(left, right) > MAX_POWER_BITS:
            raise TemplateError("the result of '**' in this template would be too large")
        elif operator == "+":
            if isinstance(left, str | bytes) and isinstance(right, str | bytes):
                budget.check_size(len(left) + len(right), "adding strings with '+'")
            elif isinstance(left, list | tuple) and isinstance(right, list | tuple):
                budget.check_count(len(left) + len(right), "adding lists with '+'")
        elif operator == "%" and isinstance(left, str | bytes):
            budget.check_size(percent_size(left, right, budget), "this %-format")
        return budget.account(super().call_binop(context, operator, left, right), f"'{operator}'")

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.check_time()
        if isinstance(__obj, BlockReference):
            raise SecurityError("calling template blocks is not supported in registry templates")
        if isinstance(__obj, LoopContext) and args:
            args = (budget.guard(args[0]), *args[1:])  # a recursive loop's next level
        args = check_method_call(__obj, args, kwargs, budget)
        return budget.account(super().call(__context, __obj, *args, **kwargs), "this call")

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        if isinstance(argument, slice):
            current_budget().account(value, "slicing")
        return value

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``"...".format(...)``: the sandbox's formatter, with every field sized before it is built."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or value.__name__ not in (
            "format",
            "format_map",
        ):
            return None
        f_self: Any = value.__self__
        if not isinstance(f_self, str):
            return None
        str_type: type[str] = type(f_self)
        is_format_map = value.__name__ == "format_map"
        escape = f_self.escape if isinstance(f_self, Markup) else None

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            formatter = BoundedEscapeFormatter(self, escape=escape) if escape else BoundedFormatter(self)
            text = str_type(formatter.vformat(f_self, args, kwargs))
            return str(current_budget().account(text, "str.format()"))

        return update_wrapper(wrapper, value)


def _make_environment() -> _RegistrySandbox:
    return _RegistrySandbox()


_ENV = _make_environment()


# -- saving: parse, check names, refuse what is visibly out of bounds ----------------------


def _parse(source: str) -> nodes.Template:
    try:
        return _ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(str(TemplateIssue(exc.lineno, exc.message or "syntax error"))) from None


def template_variables(source: str) -> set[str]:
    """The variables a template reads from its context (Jinja2 globals such as ``range`` excluded)."""
    return _variables(_parse(source))


def _variables(ast: nodes.Template) -> set[str]:
    try:
        found = meta.find_undeclared_variables(ast)
    except TemplateSyntaxError as exc:  # an unknown filter or test, for example
        raise TemplateError(str(TemplateIssue(exc.lineno, exc.message or "syntax error"))) from None
    return set(found) - set(_ENV.globals)


def check_template(
    source: str, declared: Iterable[str], *, where: str = "template", limits: Limits = DEFAULT_LIMITS
) -> None:
    """Raise ``TemplateError`` on a syntax error, a variable the declared arguments do not cover,
    something the sandbox would refuse, or a size visible in the source that is over the limits.

    Cheap by construction: the template is parsed and compiled, never run, and the compiler folds
    no operation that could build a large value. Literal text with bare ``{{ name }}`` (most
    prompts) is valid Jinja with nothing the sandbox or the limits could refuse: only its names
    are checked (a bulk import of 100,000 prompts would otherwise spend most of its time here).
    """
    simple = _simple_parts(source)
    if simple is not None and not _NOT_VARIABLES.intersection(simple[1::2]):
        missing = sorted(set(simple[1::2]) - set(_ENV.globals) - set(declared))
        if missing:
            first = next(m for m in _SIMPLE_VARIABLE.finditer(source) if m.group(1) == missing[0])
            issue = TemplateIssue(
                source.count("\n", 0, first.start(1)) + 1,
                f"uses undeclared variable(s) {', '.join(missing)}; declare them as arguments",
            )
            raise TemplateError(f"{where}: {issue}")
        return
    try:
        ast = _parse(source)
        unknown = sorted(_variables(ast) - set(declared))
    except TemplateError as exc:
        raise TemplateError(f"{where}: {exc}") from None
    if unknown:
        line = _first_line_using(ast, unknown[0])
        issue = TemplateIssue(line, f"uses undeclared variable(s) {', '.join(unknown)}; declare them as arguments")
        raise TemplateError(f"{where}: {issue}")
    for found in _static_issues(ast, limits):
        raise TemplateError(f"{where}: {found}")
    try:
        _ENV.compile(ast)  # the tree parsed above: parsing again would double the cost
    except TemplateSyntaxError as exc:  # an unknown filter or test, for example
        raise TemplateError(f"{where}: {TemplateIssue(exc.lineno, exc.message or 'syntax error')}") from None


def _first_line_using(ast: nodes.Template, name: str) -> int | None:
    for node in ast.find_all(nodes.Name):
        if node.name == name:
            return node.lineno
    return None


def _const(node: nodes.Node | None) -> Any:
    """The value of a literal (string or number) node, or of integer arithmetic on literals
    (``10 ** 9``) as long as it stays small enough to compute; else None."""
    if isinstance(node, nodes.Const) and isinstance(node.value, str | int | float):
        return node.value
    if isinstance(node, nodes.Neg):
        value = _const(node.node)
        return -value if isinstance(value, int) else None
    if isinstance(node, nodes.Add | nodes.Sub | nodes.Mul | nodes.Pow):
        left, right = _const(node.left), _const(node.right)
        if not isinstance(left, int) or not isinstance(right, int):
            return None
        if isinstance(node, nodes.Pow):
            return left**right if _power_bits(left, right) <= MAX_POWER_BITS and right >= 0 else None
        if isinstance(node, nodes.Mul):
            return left * right if int_bits(left) + int_bits(right) <= MAX_POWER_BITS else None
        return left + right if isinstance(node, nodes.Add) else left - right
    return None


def _static_issues(ast: nodes.Template, limits: Limits) -> Iterator[TemplateIssue]:
    """What the sandbox or the limits would refuse at every render, found in the source."""
    for loader in ast.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
        yield TemplateIssue(loader.lineno, "extends, include and import are not supported: templates stand alone")
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        attr = node.attr if isinstance(node, nodes.Getattr) else _const(getattr(node, "arg", None))
        if isinstance(attr, str) and attr.startswith("_"):
            yield TemplateIssue(node.lineno, f"the sandbox forbids attribute {attr[:64]!r} (names starting with '_')")
    for name in ast.find_all(nodes.Name):
        if name.name == "self" and name.ctx == "load":
            yield TemplateIssue(name.lineno, "'self' (calling template blocks) is not supported")
    budget = RenderBudget(limits)
    for node in ast.find_all((nodes.Mod, nodes.Mul, nodes.Pow, nodes.Filter, nodes.Call)):
        try:
            _check_constant_sizes(node, budget)
        except TemplateError as exc:
            yield TemplateIssue(node.lineno, str(exc))


def _check_constant_sizes(node: nodes.Node, budget: RenderBudget) -> None:
    if isinstance(node, nodes.Mod):
        fmt = _const(node.left)
        if isinstance(fmt, str):
            percent_size(fmt, (), budget)
    elif isinstance(node, nodes.Mul):
        left, right = _const(node.left), _const(node.right)
        _check_repetition(left, right, budget)
        _check_repetition(right, left, budget)
    elif isinstance(node, nodes.Pow):
        if _power_bits(_const(node.left), _const(node.right)) > MAX_POWER_BITS:
            raise TemplateError("the result of '**' would be too large")
    elif isinstance(node, nodes.Filter):
        args = [_const(arg) for arg in node.args]
        if node.kwargs or node.dyn_args or node.dyn_kwargs or any(a is None for a in args):
            return
        if node.name == "format" and node.node is not None and isinstance(_const(node.node), str):
            percent_size(_const(node.node), (), budget)
        elif node.name in ("center", "indent", "batch", "slice"):
            budget.check_size(ESTIMATES[node.name](budget, "", *args), f"the {node.name} filter")
    elif isinstance(node, nodes.Call):
        args = [_const(arg) for arg in node.args]
        if node.kwargs or node.dyn_args or node.dyn_kwargs or any(a is None for a in args):
            return
        if isinstance(node.node, nodes.Name) and node.node.name == "range" and all(isinstance(a, int) for a in args):
            _bounded_range(*args)
        elif isinstance(node.node, nodes.Getattr) and isinstance(_const(node.node.node), str):
            method = getattr(_const(node.node.node), node.node.attr, None)
            if method is not None and node.node.attr in ("center", "ljust", "rjust", "zfill", "expandtabs", "replace"):
                check_method_call(method, tuple(args), {}, budget)


# -- rendering -----------------------------------------------------------------------------

_SIMPLE_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: Words that Jinja reads as constants, operators or special names, not as a template variable.
_NOT_VARIABLES = frozenset(
    {"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else"}
    | {"self", "loop", "caller", "varargs", "kwargs", "super"}
)
_JINJA_SYNTAX = ("{{", "{%", "{#")


def _simple_parts(source: str) -> tuple[str, ...] | None:
    """Literal text and bare ``{{ name }}`` only (most business prompts): alternating text and
    variable names, which render by joining strings. None for anything else."""
    parts = tuple(_SIMPLE_VARIABLE.split(source))
    if any(marker in text for text in parts[0::2] for marker in _JINJA_SYNTAX):
        return None
    return parts


def _safe_detail(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "..."


class CompiledTemplate:
    """A parsed template, compiled once and rendered many times (the MCP hot path keeps these).

    Templates that are literal text with bare ``{{ name }}`` substitutions skip the Jinja
    machinery when rendering: the output is the same (string arguments, no autoescape, strict
    about missing names), at a fraction of the cost, and such a render cannot be slow.
    """

    __slots__ = ("_simple", "_template", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self._simple = _simple_parts(source)
        self._template: Template | None = None
        if self._simple is None:
            self._template = self._compile()

    @property
    def is_simple(self) -> bool:
        """Literal text and bare ``{{ name }}`` only: renders in microseconds, needs no worker thread."""
        return self._simple is not None

    def _compile(self) -> Template:
        # Simple templates are always valid Jinja; they are compiled only if ever needed (to word
        # an error), which keeps thousands of compiled modules out of memory and the collector's way.
        try:
            return _ENV.from_string(self.source)
        except TemplateSyntaxError as exc:
            raise TemplateError(str(TemplateIssue(exc.lineno, exc.message or "syntax error"))) from None

    @staticmethod
    def _render_simple(parts: tuple[str, ...], variables: Mapping[str, Any], budget: RenderBudget) -> str | None:
        out = list(parts)
        size = sum(len(text) for text in parts[0::2])
        for index in range(1, len(out), 2):
            value = variables.get(out[index])
            if not isinstance(value, str):
                return None  # missing or not a string: let Jinja render it (and word the error)
            out[index] = value
            size += len(value)
        budget.add_output(size)  # before joining: a name repeated 10,000 times is refused unbuilt
        return "".join(out)

    def render(
        self,
        variables: Mapping[str, Any],
        *,
        max_chars: int | None = None,
        max_seconds: float | None = None,
        limits: Limits | None = None,
    ) -> str:
        """The rendered text. Inside a ``render_scope`` the scope's budget is spent (one budget for
        all templates of a request); otherwise a budget from ``limits`` and the keyword overrides."""
        budget = active_budget()
        owned = budget is None
        if budget is None:
            budget = RenderBudget(limits or DEFAULT_LIMITS, seconds=max_seconds, max_chars=max_chars)
        if self._simple is not None:
            text = self._render_simple(self._simple, variables, budget)
            if text is not None:
                return text
        parts: list[str] = []
        with render_scope(budget) if owned else nullcontext(budget):
            try:
                if self._template is None:
                    self._template = self._compile()
                for chunk in self._template.generate(dict(variables)):
                    budget.add_output(len(chunk))
                    parts.append(chunk)
                    budget.check_time()
            except UndefinedError as exc:
                raise TemplateError(f"template error: {exc.message}") from None
            except SecurityError as exc:
                raise TemplateError(f"template tried something the sandbox forbids: {_safe_detail(exc)}") from None
            except TemplateError:
                raise
            except RecursionError:
                raise TemplateError("template error: macros or loops call themselves too deeply") from None
            except Exception as exc:  # a filter or test blew up on the given arguments
                raise TemplateError(f"template error: {type(exc).__name__}: {_safe_detail(exc)}") from None
        return "".join(parts)


@functools.lru_cache(maxsize=8192)
def compiled(source: str) -> CompiledTemplate:
    """The compiled template for ``source``, shared: snapshot rebuilds after an edit recompile only what changed."""
    return CompiledTemplate(source)


def render_template(source: str, variables: Mapping[str, Any]) -> str:
    return CompiledTemplate(source).render(variables)
