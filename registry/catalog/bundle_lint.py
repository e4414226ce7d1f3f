"""``mcp-registry lint DIR``: everything an import would refuse, found offline, before a pull request
is merged.

No server and no database: the files are read and validated by the import's own reader
(``bundles.BundleReader``: YAML, every field, templates compile and declare their variables, tool
JSON Schemas are valid, limits), with the same ``Problem`` (file, line, field) for each. Beyond what
an import checks, the samples a file stores are tried:

* a prompt's ``samples`` (argument sets) are rendered through every message, as the pre-publish
  checks do (``checks.sample_checks``): an undefined variable or a refused argument is a problem;
  an embedded resource renders from the bundle's static resource of that URI, or a placeholder
  (the catalog's may differ: the server's checks see it);
* a tool's ``examples`` in its ``inputSchema`` / ``outputSchema`` (JSON Schema's own keyword for
  sample instances) must validate against that schema.

What needs the live catalog (a resource URI another entry holds there, a masked secret with no
stored value, outbound URLs resolving to private addresses) is for ``mcp-registry plan``.
``${env:...}`` and ``${enc:...}`` values are taken as given: lint never needs the environment or key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from registry.catalog.bundle_secrets import ENC_PREFIX, ENC_SUFFIX, ENV_REFERENCE, ImportSecrets, slots
from registry.catalog.bundles import BundleReader, Problem, _Incoming, _Locator, _uri_problems
from registry.catalog.checks import FAIL, sample_checks
from registry.catalog.errors import Invalid
from registry.catalog.specs import PromptSpec
from registry.catalog.validation import SpecValidator
from registry.limits import DEFAULT_LIMITS, Limits

#: What an ``${env:...}`` or ``${enc:...}`` value stands for while linting.
PLACEHOLDER = "lint-placeholder"


class _References(ImportSecrets):
    """Secret references are fine as they are: replaced by a placeholder, never resolved."""

    def check_key(self, check: str | None) -> str | None:
        return None

    def resolve(self, kind: str, raw: dict[str, Any]) -> list[tuple[str, str]]:
        for slot in slots(kind, raw):
            value = slot.holder.get(slot.key)
            if isinstance(value, str) and (
                ENV_REFERENCE.fullmatch(value) or (value.startswith(ENC_PREFIX) and value.endswith(ENC_SUFFIX))
            ):
                slot.holder[slot.key] = PLACEHOLDER
        return []


@dataclass
class LintReport:
    files: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems


def lint_bundle(directory: Path, limits: Limits = DEFAULT_LIMITS) -> LintReport:
    """Every problem of the bundle in ``directory``, in file order."""
    reader = BundleReader(SpecValidator(limits).parse_spec, limits)
    try:
        layout, sources, incoming, problems = reader.read_folder(directory, _References(environ={}))
    except Invalid as exc:
        return LintReport(0, [Problem(directory, exc.detail)])
    seen: dict[str, Path] = {}
    for entry in incoming:
        problems += _uri_problems(entry, {}, seen)
        if layout == "entries":
            problems += _sample_problems(entry, incoming, limits)
    order = {source.path: index for index, source in enumerate(sources)}
    problems.sort(key=lambda p: order.get(p.path, -1))
    return LintReport(len(sources), problems)


def _locator(path: Path) -> _Locator:
    return _Locator(path.read_text(encoding="utf-8"))


def _sample_problems(entry: _Incoming, bundle: Sequence[_Incoming], limits: Limits) -> list[Problem]:
    if entry.kind == "prompt":
        return _prompt_samples(entry, bundle, limits)
    if entry.kind == "tool":
        return _tool_examples(entry)
    return []


def _prompt_samples(entry: _Incoming, bundle: Sequence[_Incoming], limits: Limits) -> list[Problem]:
    static = {
        str(other.spec.get("uri")): other.spec
        for other in bundle
        if other.kind == "resource" and other.spec.get("kind", "static") == "static"
    }

    def resolve(uri: str) -> list[dict[str, Any]]:
        found = static.get(uri)
        content: dict[str, Any] = {"uri": uri, "text": f"(the catalog's {uri})"}
        if found is not None:
            content = {key: found[key] for key in ("uri", "mimeType", "text", "blob") if key in found}
        return [content]

    spec = PromptSpec.model_validate(entry.spec)
    failures = [item for item in sample_checks(spec, resolve, limits=limits) if item.status == FAIL]
    if not failures:
        return []
    locate = _locator(entry.path)
    where = ["samples"] if spec.samples else ["arguments"]
    return [Problem(entry.path, f"{item.title}: {item.detail}", where[0], locate.line(where)) for item in failures]


def _tool_examples(entry: _Incoming) -> list[Problem]:
    problems: list[Problem] = []
    locate: _Locator | None = None
    for which in ("inputSchema", "outputSchema"):
        schema = entry.spec.get(which)
        if not isinstance(schema, dict) or not isinstance(schema.get("examples"), list):
            continue
        examples = schema["examples"]
        validator = Draft202012Validator(schema)
        for index, example in enumerate(examples):
            error = next(iter(sorted(validator.iter_errors(example), key=lambda e: list(e.absolute_path))), None)
            if error is None:
                continue
            locate = locate or _locator(entry.path)
            loc = [which, "examples", str(index)]
            at = "/".join(str(part) for part in error.absolute_path)
            message = f"example {index + 1} does not match the {which}: {error.message}" + (f" (at {at})" if at else "")
            problems.append(Problem(entry.path, message, ".".join(loc), locate.line(loc)))
    return problems
