"""RFC 6570 URI templates, in the direction a server needs: from a concrete URI back to variables.

Expansion libraries go the other way. Matching supports the operators agents meet in practice:
``{var}``, ``{+var}``, ``{#var}``, ``{/var}``, ``{.var}``, ``{;var}``, ``{?a,b}`` and ``{&a}``.
"""

from __future__ import annotations

import re
from functools import cached_property
from urllib.parse import unquote

_EXPRESSION = re.compile(r"\{([+#./;?&]?)([A-Za-z0-9_.,%*:]+)\}")


class UriTemplate:
    def __init__(self, template: str) -> None:
        self.template = template
        if template.count("{") != template.count("}"):
            raise ValueError(f"unbalanced braces in URI template {template!r}")

    @cached_property
    def variables(self) -> list[str]:
        names: list[str] = []
        for _op, body in _EXPRESSION.findall(self.template):
            for part in body.split(","):
                name = part.split(":")[0].rstrip("*")
                if name and name not in names:
                    names.append(name)
        return names

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        pattern = ["^"]
        position = 0
        for match in _EXPRESSION.finditer(self.template):
            pattern.append(re.escape(self.template[position : match.start()]))
            op, body = match.group(1), match.group(2)
            names = [p.split(":")[0].rstrip("*") for p in body.split(",")]
            if op in ("?", "&"):
                lead = re.escape(op)
                pairs = "".join(f"(?:{'&' if i else ''}{re.escape(n)}=(?P<{n}>[^&#]*))?" for i, n in enumerate(names))
                pattern.append(f"(?:{lead}{pairs})?")
            elif op in ("+", "#"):
                prefix = "#" if op == "#" else ""
                pattern.append(re.escape(prefix) + ",".join(f"(?P<{n}>.*?)" for n in names))
            elif op in ("/", ".", ";"):
                pattern.append("".join(f"{re.escape(op)}(?P<{n}>[^/.;?#]*)" for n in names))
            else:
                pattern.append(",".join(f"(?P<{n}>[^/?#,]+)" for n in names))
            position = match.end()
        pattern.append(re.escape(self.template[position:]))
        pattern.append("$")
        return re.compile("".join(pattern))

    def match(self, uri: str) -> dict[str, str] | None:
        found = self._regex.match(uri)
        if found is None:
            return None
        return {k: unquote(v) for k, v in found.groupdict().items() if v is not None}
