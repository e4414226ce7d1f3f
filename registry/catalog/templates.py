"""The Jinja2 sandbox that every prompt and resource template goes through.

Templates are written by editors but rendered with arguments from agents, so rendering is
sandboxed (no attribute games), strict (an undeclared or missing variable is an error, never an
empty string) and bounded: output size and wall time are capped, and ``range`` is a capped
generator that also watches the clock, so a runaway loop ends with an error.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

MAX_OUTPUT_CHARS = 1_000_000
MAX_RENDER_SECONDS = 2.0
MAX_RANGE = 100_000


class TemplateError(ValueError):
    """A template cannot be saved or rendered. The message is safe to show to users and agents."""


@dataclass(frozen=True)
class TemplateIssue:
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


class _Budget:
    def __init__(self, seconds: float, max_chars: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.max_chars = max_chars

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError("template rendering took too long and was stopped")


#: The budget of the render running in this thread/task (renders run concurrently).
_current_budget: ContextVar[_Budget | None] = ContextVar("template_budget", default=None)


#: Exponents beyond this many result bits are refused (``x ** y`` on big ints can run for minutes).
MAX_POWER_BITS = 100_000


class _RegistrySandbox(SandboxedEnvironment):
    """A sandbox whose calls and loops keep an eye on the current render's time budget.

    ``*`` and ``**`` are intercepted: a single ``"x" * n`` or ``a ** b`` (with ``n`` or ``b`` from an
    agent's argument, or a constant the compiler would fold) could otherwise allocate gigabytes or
    spin for minutes inside one Python operation, where neither the output cap nor the clock can
    stop it. Intercepted operators are also not constant-folded at save time.
    """

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repetition(left, right)
            _check_repetition(right, left)
        elif operator == "**" and _power_bits(left, right) > MAX_POWER_BITS:
            raise TemplateError("the result of '**' in this template would be too large")
        return super().call_binop(context, operator, left, right)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _current_budget.get()
        if budget is not None:
            budget.check_time()
        return super().call(__context, __obj, *args, **kwargs)


def _power_bits(base: Any, exponent: Any) -> int:
    """Roughly how many bits ``base ** exponent`` has (0 when it cannot grow: floats overflow cheaply)."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return 0
    return exponent * abs(base).bit_length() if abs(base) > 1 else 0


def _check_repetition(sequence: Any, times: Any) -> None:
    if isinstance(sequence, str | bytes | list | tuple) and isinstance(times, int) and not isinstance(times, bool):
        budget = _current_budget.get()
        limit = budget.max_chars if budget is not None else MAX_OUTPUT_CHARS
        if len(sequence) * times > limit:
            raise TemplateError(f"repeating a value with '*' would exceed {limit} characters")


def _make_environment() -> _RegistrySandbox:
    env = _RegistrySandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    return env


_ENV = _make_environment()


def _bounded_range(*args: int) -> Iterator[int]:
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise TemplateError(f"range() is limited to {MAX_RANGE} items in templates")
    budget = _current_budget.get()
    for i, value in enumerate(values):
        if budget is not None and i % 256 == 0:
            budget.check_time()
        yield value


_ENV.globals["range"] = _bounded_range


def _parse(source: str) -> nodes.Template:
    try:
        return _ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(str(TemplateIssue(exc.lineno, exc.message or "syntax error"))) from None


def template_variables(source: str) -> set[str]:
    """The variables a template reads from its context (Jinja2 globals such as ``range`` excluded)."""
    return set(meta.find_undeclared_variables(_parse(source))) - set(_ENV.globals)


def check_template(source: str, declared: Iterable[str], *, where: str = "template") -> None:
    """Raise ``TemplateError`` on a syntax error or a variable the declared arguments do not cover."""
    try:
        used = template_variables(source)
    except TemplateError as exc:
        raise TemplateError(f"{where}: {exc}") from None
    unknown = sorted(used - set(declared))
    if unknown:
        line = _first_line_using(source, unknown[0])
        issue = TemplateIssue(line, f"uses undeclared variable(s) {', '.join(unknown)}; declare them as arguments")
        raise TemplateError(f"{where}: {issue}")
    try:
        _ENV.from_string(source)
    except TemplateSyntaxError as exc:  # pragma: no cover - parse() above catches these first
        raise TemplateError(f"{where}: {TemplateIssue(exc.lineno, exc.message or 'syntax error')}") from None


def _first_line_using(source: str, name: str) -> int | None:
    for node in _parse(source).find_all(nodes.Name):
        if node.name == name:
            return node.lineno
    return None


_SIMPLE_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_JINJA_SYNTAX = ("{{", "{%", "{#")


def _simple_parts(source: str) -> tuple[str, ...] | None:
    """Literal text and bare ``{{ name }}`` only (most business prompts): alternating text and
    variable names, which render by joining strings. None for anything else."""
    parts = tuple(_SIMPLE_VARIABLE.split(source))
    if any(marker in text for text in parts[0::2] for marker in _JINJA_SYNTAX):
        return None
    return parts


class CompiledTemplate:
    """A parsed template, compiled once and rendered many times (the MCP hot path keeps these).

    Templates that are literal text with bare ``{{ name }}`` substitutions skip the Jinja
    machinery when rendering: the output is the same (string arguments, no autoescape, strict
    about missing names), at a fraction of the cost.
    """

    __slots__ = ("_simple", "_template", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self._simple = _simple_parts(source)
        self._template: Template | None = None
        if self._simple is None:
            self._template = self._compile()

    def _compile(self) -> Template:
        # Simple templates are always valid Jinja; they are compiled only if ever needed (to word
        # an error), which keeps thousands of compiled modules out of memory and the collector's way.
        try:
            return _ENV.from_string(self.source)
        except TemplateSyntaxError as exc:
            raise TemplateError(str(TemplateIssue(exc.lineno, exc.message or "syntax error"))) from None

    def _render_simple(self, parts: tuple[str, ...], variables: Mapping[str, Any], max_chars: int) -> str | None:
        out = list(parts)
        for index in range(1, len(out), 2):
            value = variables.get(out[index])
            if not isinstance(value, str):
                return None  # missing or not a string: let Jinja render it (and word the error)
            out[index] = value
        text = "".join(out)
        if len(text) > max_chars:
            raise TemplateError(f"rendered output exceeds {max_chars} characters")
        return text

    def render(
        self,
        variables: Mapping[str, Any],
        *,
        max_chars: int = MAX_OUTPUT_CHARS,
        max_seconds: float = MAX_RENDER_SECONDS,
    ) -> str:
        if self._simple is not None:
            text = self._render_simple(self._simple, variables, max_chars)
            if text is not None:
                return text
        budget = _Budget(max_seconds, max_chars)
        token = _current_budget.set(budget)
        parts: list[str] = []
        size = 0
        try:
            if self._template is None:
                self._template = self._compile()
            for chunk in self._template.generate(dict(variables)):
                size += len(chunk)
                if size > max_chars:
                    raise TemplateError(f"rendered output exceeds {max_chars} characters")
                parts.append(chunk)
                budget.check_time()
        except UndefinedError as exc:
            raise TemplateError(f"template error: {exc.message}") from None
        except SecurityError as exc:
            raise TemplateError(f"template tried something the sandbox forbids: {exc}") from None
        except TemplateError:
            raise
        except Exception as exc:  # a filter or test blew up on the given arguments
            raise TemplateError(f"template error: {type(exc).__name__}: {exc}") from None
        finally:
            _current_budget.reset(token)
        return "".join(parts)


@functools.lru_cache(maxsize=8192)
def compiled(source: str) -> CompiledTemplate:
    """The compiled template for ``source``, shared: snapshot rebuilds after an edit recompile only what changed."""
    return CompiledTemplate(source)


def render_template(source: str, variables: Mapping[str, Any]) -> str:
    return CompiledTemplate(source).render(variables)
