"""Pre-publish checks: what a reviewer should know before a protected label moves.

Pure functions over stored definitions (``dump_spec`` form), so the API's on-demand checks, a
change request's page and its publication all judge the same way:

* **samples** (prompts): every message is rendered with each stored sample argument set
  (``PromptSpec.samples``), with the renderer and render budget ``prompts/get`` uses. An
  undefined variable, a refused argument or a render cap exceeded fails. Without samples the
  prompt is rendered once with its defaults (or first allowed value), with a warning.
* **breaking changes** against the version the label serves now: what an agent that works today
  would have refused or would misread after the move (``prompt_breaks``, ``tool_breaks``,
  ``resource_breaks``). Each is a failure: publishing needs a reviewer's override with a reason.
* **embedding prompts** (resources): the prompts the label serves that embed the resource
  (``type: resource`` messages naming its URI) change with it; listed as a warning, never a
  failure.

Each finding is a ``CheckItem`` (``check``, ``status`` pass|warn|fail, ``title``, ``detail``);
a ``CheckReport`` has ``failed`` when any item fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from registry.catalog.rendering import ArgumentError, PromptRenderer, ResourceResolver
from registry.catalog.specs import PromptArgument, PromptSpec
from registry.catalog.templates import TemplateError
from registry.catalog.uritemplates import UriTemplate
from registry.limits import DEFAULT_LIMITS, Limits

PASS, WARN, FAIL = "pass", "warn", "fail"
#: All sample renders of one check together may take this many times ``render_seconds``; the
#: rest are skipped with a warning (each render is bounded by its own budget anyway).
SAMPLE_TIME_FACTOR = 5
#: Deepest nesting of subschemas compared (deeper ones are reported as not analysed).
MAX_SCHEMA_DEPTH = 32
#: Findings listed per check item before "and N more".
SHOWN = 20


@dataclass(frozen=True)
class CheckItem:
    check: str
    status: str
    title: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "title": self.title, "detail": self.detail}


@dataclass(frozen=True)
class CheckReport:
    items: list[CheckItem] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(item.status == FAIL for item in self.items)

    def as_dict(self) -> dict[str, Any]:
        return {"items": [item.as_dict() for item in self.items], "failed": self.failed}


def _listed(findings: Sequence[str]) -> str:
    shown = list(findings[:SHOWN])
    if len(findings) > SHOWN:
        shown.append(f"and {len(findings) - SHOWN} more")
    return "; ".join(shown)


# ------------------------------------------------------------------ samples


def placeholder_arguments(arguments: Iterable[PromptArgument]) -> dict[str, str]:
    """Values to render a prompt with when it stores no samples: each argument's default, else
    its first allowed value, else (when required) a visible placeholder; optional ones left out."""
    values: dict[str, str] = {}
    for arg in arguments:
        if arg.default is not None:
            values[arg.name] = arg.default
        elif arg.enum:
            values[arg.name] = arg.enum[0]
        elif arg.required:
            values[arg.name] = f"<{arg.name}>"
    return values


def sample_checks(
    spec: PromptSpec, resolve: ResourceResolver | None = None, *, limits: Limits = DEFAULT_LIMITS
) -> list[CheckItem]:
    """Render every message with each sample set (or once with placeholders, and a warning)."""
    renderer = PromptRenderer(spec)
    samples = spec.samples or []
    items: list[CheckItem] = []
    if not samples:
        items.append(
            CheckItem(
                "samples",
                WARN,
                "No stored samples",
                "the prompt stores no sample argument sets (`samples`); it was rendered once with its defaults, "
                "first allowed values or placeholders. Add samples so every change is rendered the way agents "
                "call it.",
            )
        )
        sets: list[tuple[str, Mapping[str, str]]] = [("the default arguments", placeholder_arguments(spec.arguments))]
    else:
        sets = [(f"sample {index + 1}", sample) for index, sample in enumerate(samples)]
    failures: list[str] = []
    rendered = 0
    deadline = time.monotonic() + limits.render_seconds * SAMPLE_TIME_FACTOR
    for where, arguments in sets:
        if time.monotonic() > deadline:
            items.append(
                CheckItem(
                    "samples",
                    WARN,
                    "Some samples were not rendered",
                    f"rendering stopped after {rendered} of {len(sets)} sets: together they took longer than "
                    f"{limits.render_seconds * SAMPLE_TIME_FACTOR:g} s",
                )
            )
            break
        try:
            renderer.render(arguments, resolve, limits=limits)
        except (ArgumentError, TemplateError) as exc:
            failures.append(f"{where}: {exc}")
        rendered += 1
    if failures:
        items.append(CheckItem("samples", FAIL, "Rendering fails", _listed(failures)))
    elif samples:
        plural = "s" if rendered != 1 else ""
        items.append(CheckItem("samples", PASS, f"{rendered} sample set{plural} render", ""))
    else:
        items.append(CheckItem("samples", PASS, "Renders with the default arguments", ""))
    return items


# ------------------------------------------------------------------ prompts


def _effectively_required(arg: PromptArgument) -> bool:
    """An agent must send it: required, and no default fills it in."""
    return arg.required and arg.default is None


def prompt_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a prompts/get that works against ``old`` may be refused for against ``new``:
    an argument removed (or renamed: a removal plus an addition), a required argument added, an
    optional one made required, its allowed values (``enum``) narrowed."""
    before = {a.name: a for a in PromptSpec.model_validate(old).arguments}
    after = {a.name: a for a in PromptSpec.model_validate(new).arguments}
    found = [
        f"argument {name!r} was removed or renamed: agents that send it are refused"
        for name in before
        if name not in after
    ]
    for name, arg in after.items():
        was = before.get(name)
        if was is None:
            if _effectively_required(arg):
                found.append(f"required argument {name!r} was added: agents that do not send it are refused")
            continue
        if _effectively_required(arg) and not _effectively_required(was):
            found.append(f"argument {name!r} was optional and is now required")
        if arg.enum is not None:
            if was.enum is None:
                found.append(f"argument {name!r} now only accepts: {', '.join(arg.enum[:SHOWN])}")
            else:
                lost = [value for value in was.enum if value not in arg.enum]
                if lost:
                    found.append(f"argument {name!r} no longer accepts: {', '.join(lost[:SHOWN])}")
    return found


# ------------------------------------------------------------------ tools (JSON Schema)

#: Keywords whose changes the comparison does not reason about (reported as "not analysed").
_UNANALYSED = (
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$defs",
    "definitions",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def schema_narrowing(old: Any, new: Any, where: str = "inputSchema") -> tuple[list[str], list[str]]:
    """(narrowings, not analysed) of JSON Schema ``new`` against ``old``: a heuristic for "does
    ``new`` reject inputs ``old`` accepted?".

    Detected, at the root and recursively in ``properties`` both declare, ``items`` and
    ``additionalProperties`` schemas:

    * a property newly in ``required``;
    * ``additionalProperties`` turned ``false`` (or into a schema where any value was allowed),
      and a property removed while ``additionalProperties`` is ``false``;
    * ``type`` narrowed (a type dropped; ``integer`` counts as part of ``number``), or set where
      there was none; ``enum``/``const`` narrowed or set where there was none;
    * bounds tightened or added: ``minimum``/``exclusiveMinimum``/``minLength``/``minItems``/
      ``minProperties`` raised, their ``max`` counterparts lowered, ``multipleOf`` added or
      changed, ``pattern`` added or changed (any change of a pattern is taken as a narrowing:
      comparing regular expressions is not attempted), ``uniqueItems`` turned on; a ``false``
      subschema where one accepted values.

    Not detected (listed as "not analysed" when they changed): composition and conditionals
    (``allOf``/``anyOf``/``oneOf``/``not``/``if``/``then``/``else``), references (``$ref``,
    ``$defs``), ``patternProperties``, ``propertyNames``, ``dependent*``, ``prefixItems``,
    ``contains``, ``unevaluated*``; nor ``format`` (an annotation unless a validator asserts it)
    and schemas nested deeper than ``MAX_SCHEMA_DEPTH``. A new optional property is not a
    narrowing, even where ``additionalProperties`` used to admit any value under that name.
    Equivalent rewrites may be reported (``type: [string]`` vs a ``pattern`` that admits all):
    a reviewer overrides those with a reason.
    """
    narrowings: list[str] = []
    unknown: list[str] = []
    _compare(old, new, where, narrowings, unknown, 0)
    return narrowings, unknown


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    value = schema.get("type")
    if value is None:
        return None
    return {value} if isinstance(value, str) else {str(t) for t in value} if isinstance(value, list) else None


def _allowed(schema: Mapping[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(old: Any, new: Any, where: str, out: list[str], unknown: list[str], depth: int) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        if old != new:
            unknown.append(f"{where}: nested too deeply to compare")
        return
    if new is False and old is not False:
        out.append(f"{where}: now rejects every value")
        return
    if not isinstance(new, Mapping):
        return  # true, or not a schema: accepts everything (as far as this check can tell)
    if old is False:
        return  # accepted nothing before: nothing can be narrowed
    old = old if isinstance(old, Mapping) else {}

    old_types, new_types = _types(old), _types(new)
    if new_types is not None:
        widened = new_types | ({"integer"} if "number" in new_types else set())
        if old_types is None:
            out.append(f"{where}: type is now {', '.join(sorted(new_types))} (it was not restricted)")
        elif not old_types <= widened:
            out.append(f"{where}: type narrowed from {', '.join(sorted(old_types))} to {', '.join(sorted(new_types))}")

    old_values, new_values = _allowed(old), _allowed(new)
    if new_values is not None:
        if old_values is None:
            out.append(f"{where}: now limited to {len(new_values)} allowed value(s)")
        else:
            lost = [value for value in old_values if value not in new_values]
            if lost:
                out.append(
                    f"{where}: allowed values narrowed ({', '.join(map(repr, lost[:SHOWN]))} no longer accepted)"
                )

    for key in _LOWER_BOUNDS:
        before, after = old.get(key), new.get(key)
        if _number(after) and (not _number(before) or after > before):
            out.append(f"{where}: {key} {'raised' if _number(before) else 'added'} ({before} -> {after})")
    for key in _UPPER_BOUNDS:
        before, after = old.get(key), new.get(key)
        if _number(after) and (not _number(before) or after < before):
            out.append(f"{where}: {key} {'lowered' if _number(before) else 'added'} ({before} -> {after})")
    if "multipleOf" in new and new.get("multipleOf") != old.get("multipleOf"):
        out.append(f"{where}: multipleOf {old.get('multipleOf')} -> {new.get('multipleOf')}")
    if "pattern" in new and new.get("pattern") != old.get("pattern"):
        out.append(f"{where}: pattern {'changed' if 'pattern' in old else 'added'} ({new.get('pattern')!r})")
    if new.get("uniqueItems") is True and old.get("uniqueItems") is not True:
        out.append(f"{where}: items must now be unique")

    old_required = set(old.get("required") or [])
    for name in sorted(set(new.get("required") or []) - old_required):
        out.append(f"{where}: property {name!r} is now required")

    old_props: Mapping[str, Any] = _mapping(old.get("properties"))
    new_props: Mapping[str, Any] = _mapping(new.get("properties"))
    old_extra = old.get("additionalProperties", True)
    new_extra = new.get("additionalProperties", True)
    if new_extra is False and old_extra is not False:
        out.append(f"{where}: additionalProperties is now false (properties it does not declare are rejected)")
    elif isinstance(new_extra, Mapping) and new_extra != old_extra:
        _compare(
            old_extra if old_extra is not True else {},
            new_extra,
            f"{where}.additionalProperties",
            out,
            unknown,
            depth + 1,
        )
    for name in sorted(set(old_props) - set(new_props)):
        if new_extra is False:
            out.append(
                f"{where}: property {name!r} was removed and additionalProperties is false "
                "(inputs sending it are rejected)"
            )
        elif isinstance(new_extra, Mapping):
            _compare(old_props[name], new_extra, f"{where}.{name}", out, unknown, depth + 1)
    for name in sorted(set(old_props) & set(new_props)):
        _compare(old_props[name], new_props[name], f"{where}.{name}", out, unknown, depth + 1)

    old_items, new_items = old.get("items"), new.get("items")
    if new_items is not None and new_items != old_items:
        _compare(old_items if old_items is not None else {}, new_items, f"{where}[]", out, unknown, depth + 1)

    for key in _UNANALYSED:
        if old.get(key) != new.get(key):
            unknown.append(f"{where}: {key} changed")


def tool_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(breaking changes, changes not analysed) of a tool: its inputSchema narrowed
    (``schema_narrowing``), or any change of its outputSchema (clients may validate results
    against the one they listed)."""
    default = {"type": "object", "properties": {}}
    found, unknown = schema_narrowing(old.get("inputSchema", default), new.get("inputSchema", default))
    if old.get("outputSchema") != new.get("outputSchema"):
        if old.get("outputSchema") is None:
            change = "added"
        elif new.get("outputSchema") is None:
            change = "removed"
        else:
            change = "changed"
        found.append(f"outputSchema {change}: clients that validate results against the listed schema may fail")
    return found, unknown


# ------------------------------------------------------------------ resources


def resource_breaks(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A resource read at the URI (or URI template) agents know, as the type they expect."""
    found = []
    for key in ("uri", "uriTemplate"):
        if old.get(key) != new.get(key) and (old.get(key) or new.get(key)):
            found.append(f"{key} changed: {old.get(key) or '(none)'} -> {new.get(key) or '(none)'}")
    if old.get("mimeType") != new.get("mimeType"):
        found.append(f"mimeType changed: {old.get('mimeType') or '(none)'} -> {new.get('mimeType') or '(none)'}")
    return found


def embeds(prompt: Mapping[str, Any], resources: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a stored prompt has a ``type: resource`` message naming a URI one of the stored
    ``resources`` serves (its ``uri``, or a URI its ``uriTemplate`` matches)."""
    uris = [
        message["content"].get("uri")
        for message in prompt.get("messages") or ()
        if isinstance(message, Mapping)
        and isinstance(message.get("content"), Mapping)
        and message["content"].get("type") == "resource"
    ]
    if not uris:
        return False
    for resource in resources:
        if resource.get("uri") and resource["uri"] in uris:
            return True
        if resource.get("uriTemplate"):
            try:
                template = UriTemplate(resource["uriTemplate"])
            except ValueError:
                continue
            if any(isinstance(uri, str) and template.match(uri) is not None for uri in uris):
                return True
    return False


# ------------------------------------------------------------------ the report


def run_checks(
    kind: str,
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    *,
    label: str,
    resolve: ResourceResolver | None = None,
    embedding: Sequence[str] = (),
    limits: Limits = DEFAULT_LIMITS,
) -> CheckReport:
    """Every check of moving ``label`` from the version ``old`` (None: the label is not set yet)
    to ``new``. ``resolve`` reads embedded resources as the label serves them; ``embedding``
    names the prompts the label serves that embed this resource (gathered by the caller)."""
    items: list[CheckItem] = []
    if kind == "prompt":
        try:
            items += sample_checks(PromptSpec.model_validate(new), resolve, limits=limits)
        except ValidationError as exc:  # a stored version this build no longer reads
            items.append(CheckItem("samples", FAIL, "The definition does not validate", str(exc)[:500]))
    if old is None:
        items.append(CheckItem("breaking_changes", PASS, f"First version on {label}", "nothing to compare with"))
    else:
        unknown: list[str] = []
        try:
            if kind == "prompt":
                found = prompt_breaks(old, new)
            elif kind == "tool":
                found, unknown = tool_breaks(old, new)
            else:
                found = resource_breaks(old, new)
        except ValidationError as exc:
            found = [f"a version could not be read to compare: {str(exc)[:300]}"]
        if found:
            plural = "s" if len(found) != 1 else ""
            items.append(
                CheckItem(
                    "breaking_changes",
                    FAIL,
                    f"{len(found)} breaking change{plural} against {label}",
                    _listed(found),
                )
            )
        else:
            items.append(CheckItem("breaking_changes", PASS, f"No breaking change against {label}", ""))
        if unknown:
            items.append(
                CheckItem(
                    "breaking_changes",
                    WARN,
                    "Schema changes this check does not analyse",
                    _listed(unknown) + " (read the diff)",
                )
            )
    if kind == "resource" and embedding:
        plural = "s" if len(embedding) != 1 else ""
        items.append(
            CheckItem(
                "embedding_prompts",
                WARN,
                f"Embedded by {len(embedding)} prompt{plural} on {label}",
                f"these prompts include this resource and change with it: {_listed(list(embedding))}",
            )
        )
    return CheckReport(items)
