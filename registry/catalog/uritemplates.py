"""RFC 6570 URI templates, in the direction a server needs: from a concrete URI back to variables.

Expansion libraries go the other way. Matching supports the operators agents meet in practice:
``{var}``, ``{+var}``, ``{#var}``, ``{/var}``, ``{.var}``, ``{;var}``, ``{?a,b}`` and ``{&a}``.

Agents choose the URI, so matching must not backtrack: with Python's ``re``, reading
``"repo://" + "/" * 1000`` against ``repo://{+owner}/{+repo}/{+path}/raw`` tried every way of
splitting the slashes among the three reserved expressions (seconds, cubic in the length, with
the event loop blocked). The template becomes an RE2 program instead, which matches in time
linear in the URI and keeps the same leftmost-first preferences (``{+var}`` as short as possible,
the rest as long as possible), so every URI gets the variables it got before.
"""

from __future__ import annotations

import re
from functools import cached_property
from urllib.parse import unquote

import re2

_EXPRESSION = re.compile(r"\{([+#./;?&]?)([A-Za-z0-9_.,%*:]+)\}")


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused template is reported to its author, not logged to stderr
    return options


def _names(body: str) -> list[str]:
    return [part.split(":")[0].rstrip("*") for part in body.split(",")]


class UriTemplate:
    def __init__(self, template: str) -> None:
        self.template = template
        if template.count("{") != template.count("}"):
            raise ValueError(f"unbalanced braces in URI template {template!r}")
        pattern, self._group_names = self._translate(template)
        try:
            self._regex = re2.compile(pattern, _options())
        except re2.error as exc:
            raise ValueError(f"URI template {template!r} cannot be matched: {exc}") from None

    @cached_property
    def variables(self) -> list[str]:
        names: list[str] = []
        for _op, body in _EXPRESSION.findall(self.template):
            for name in _names(body):
                if name and name not in names:
                    names.append(name)
        return names

    @cached_property
    def variable_names(self) -> frozenset[str]:
        """``variables`` as a set: what a read may remember for completion (hashable, made once)."""
        return frozenset(self.variables)

    @staticmethod
    def _translate(template: str) -> tuple[str, list[str]]:
        """The RE2 pattern (matched against the whole URI) and the variable behind each group.

        Groups are numbered, not named, so any variable name RFC 6570 allows (``{a.b}``, or the
        same name twice) works; the first expression that binds a name wins.
        """
        pattern: list[str] = []
        groups: list[str] = []
        position = 0
        for match in _EXPRESSION.finditer(template):
            pattern.append(re2.escape(template[position : match.start()]))
            op, names = match.group(1), _names(match.group(2))
            groups += names
            if op in ("?", "&"):
                pairs = "".join(f"(?:{'&' if i else ''}{re2.escape(n)}=([^&#]*))?" for i, n in enumerate(names))
                pattern.append(f"(?:{re2.escape(op)}{pairs})?")
            elif op in ("+", "#"):
                prefix = re2.escape("#") if op == "#" else ""
                pattern.append(prefix + ",".join("(.*?)" for _ in names))
            elif op in ("/", ".", ";"):
                pattern.append("".join(f"{re2.escape(op)}([^/.;?#]*)" for _ in names))
            else:
                pattern.append(",".join("([^/?#,]+)" for _ in names))
            position = match.end()
        pattern.append(re2.escape(template[position:]))
        return "".join(pattern), groups

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of ``uri`` (percent-decoded), or None when it is not an instance of the template."""
        found = self._regex.fullmatch(uri)
        if found is None:
            return None
        values: dict[str, str] = {}
        for name, value in zip(self._group_names, found.groups(), strict=True):
            if value is not None and name not in values:
                values[name] = unquote(value)
        return values
