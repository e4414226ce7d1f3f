"""JSON Schema validation that a regular expression cannot stall.

jsonschema evaluates ``pattern`` and ``patternProperties`` with Python's backtracking ``re``, so an
``inputSchema`` pattern such as ``^(a+)+$`` doubles its time with every character of an argument
an agent sends, on the event loop. Here those keywords (and ``additionalProperties`` and
``unevaluatedProperties``, which match property names against ``patternProperties`` too) run on
RE2, whose matching time is linear in the input, and strings longer than
``limits.argument_chars`` are refused instead of matched. RE2 has no lookaround and no
backreferences (the constructs that need backtracking); a schema using them is refused when it is
saved (``check_patterns``), and one stored before this check fails the calls that reach the
pattern with a message saying why, rather than running it on a backtracking engine.

RE2's dialect is close to the ECMA-262 one JSON Schema specifies: ``\\d`` and ``\\w`` are ASCII,
``$`` matches only at the very end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas: the places a
# pattern can sit. Everything else (const, enum, default, examples, unknown keywords) is data or
# ignored by the validator, so a "pattern" there never runs.
_SCHEMA_VALUE = (
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


class UnsafePattern(ValueError):
    """A pattern the linear-time engine cannot run (lookaround, backreferences, too large)."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # refusals are reported to the schema's author, not logged to stderr
    return options


_OPTIONS = _options()


def _reason(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else exc
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """The RE2 program for ``pattern``, or a string saying why there is none (cached either way:
    validation looks patterns up by their text on every call)."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        return _reason(exc)


def _unsafe_message(pattern: str, reason: str) -> str:
    return (
        f"pattern {pattern!r} cannot run on the registry's linear-time regular-expression engine (RE2): "
        f"{reason}. Lookaround and backreferences are not supported (they need backtracking, which lets "
        "one argument stall the server); rewrite the pattern without them"
    )


def schema_patterns(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(location, pattern) of every ``pattern`` and ``patternProperties`` key in ``schema``."""
    if not isinstance(schema, Mapping):
        return
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        yield f"{where}/pattern", pattern
    for keyword in _SCHEMA_VALUE:
        yield from schema_patterns(schema.get(keyword), f"{where}/{keyword}")
    for keyword in _SCHEMA_LIST:
        value = schema.get(keyword)
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from schema_patterns(item, f"{where}/{keyword}/{index}")
    for keyword in _SCHEMA_MAP:
        value = schema.get(keyword)
        if not isinstance(value, Mapping):
            continue
        for key, item in value.items():
            if keyword == "patternProperties" and isinstance(key, str):
                yield f"{where}/patternProperties", key
            yield from schema_patterns(item, f"{where}/{keyword}/{key}")


def check_patterns(schema: Mapping[str, Any], what: str = "schema") -> None:
    """Refuse (``UnsafePattern``, naming where) any pattern in ``schema`` that RE2 cannot run."""
    for where, pattern in schema_patterns(schema):
        found = _compiled(pattern)
        if isinstance(found, str):
            raise UnsafePattern(f"{what} at {where or '(root)'}: {_unsafe_message(pattern, found)}")


# ------------------------------------------------------------------ the validator


def _preview(text: str, chars: int = 80) -> str:
    return repr(text) if len(text) <= chars else repr(text[:chars]) + f"... ({len(text)} characters)"


def _too_long(text: str, what: str, max_chars: int) -> str:
    return str(
        LimitExceeded(
            "argument_chars",
            f"{what} of {len(text)} characters is too long to match against a pattern; at most {max_chars} are",
        )
    )


def _search(pattern: str, text: str, max_chars: int) -> bool:
    """Whether ``pattern`` finds a match in ``text``; False when it cannot be decided safely (the
    ``pattern``/``patternProperties`` keywords report those cases as errors)."""
    if len(text) > max_chars:
        return False
    compiled = _compiled(pattern)
    return not isinstance(compiled, str) and compiled.search(text) is not None


def _is_valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _extras_message(extras: list[Any]) -> tuple[str, str]:
    return ", ".join(repr(extra) for extra in extras), "was" if len(extras) == 1 else "were"


class _Re2Keywords:
    """The Draft 2020-12 keywords that match regular expressions, on RE2 and for strings of at most
    ``max_chars`` (what ``_validator_class`` puts in place of jsonschema's own)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars

    def pattern(
        self, validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "string"):
            return
        if len(instance) > self.max_chars:
            yield ValidationError(_too_long(instance, "a string", self.max_chars))
            return
        compiled = _compiled(patrn)
        if isinstance(compiled, str):
            yield ValidationError(_unsafe_message(patrn, compiled))
        elif compiled.search(instance) is None:
            yield ValidationError(f"{_preview(instance)} does not match {patrn!r}")

    def pattern_properties(
        self, validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for key in instance:
            if len(key) > self.max_chars:
                yield ValidationError(_too_long(key, "a property name", self.max_chars), path=[key])
        for patrn, subschema in patterns.items():
            compiled = _compiled(patrn)
            if isinstance(compiled, str):
                yield ValidationError(_unsafe_message(patrn, compiled))
                continue
            for key, value in instance.items():
                if len(key) <= self.max_chars and compiled.search(key) is not None:
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_names(self, instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        for name in instance:
            if name in properties or any(_search(p, name, self.max_chars) for p in patterns):
                continue
            yield name

    def additional_properties(
        self, validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        # jsonschema's own, with the patternProperties lookup on RE2.
        if not validator.is_type(instance, "object"):
            return
        extras = set(self.additional_names(instance, schema))
        if validator.is_type(additional, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], additional, path=extra)
        elif not additional and extras:
            if "patternProperties" in schema:
                verb = "does" if len(extras) == 1 else "do"
                joined = ", ".join(repr(each) for each in sorted(extras))
                patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
                yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
            else:
                listed, verb = _extras_message(sorted(extras, key=str))
                yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")

    def evaluated_keys(self, validator: Any, instance: Mapping[str, Any], schema: Any) -> list[str]:
        # jsonschema's find_evaluated_property_keys_by_schema, with the patternProperties lookup on RE2.
        if validator.is_type(schema, "boolean"):
            return []
        keys: list[str] = []
        for ref_keyword in ("$ref", "$dynamicRef"):
            ref = schema.get(ref_keyword)
            if ref is not None:
                resolved = validator._resolver.lookup(ref)
                keys += self.evaluated_keys(
                    validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                    instance,
                    resolved.contents,
                )
        properties = schema.get("properties")
        if validator.is_type(properties, "object"):
            keys += properties.keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            subschema = schema.get(keyword)
            if subschema is not None:
                keys += [k for k, v in instance.items() if _is_valid(validator.descend(v, subschema))]
        if "patternProperties" in schema:
            for name in instance:
                if any(_search(p, name, self.max_chars) for p in schema["patternProperties"]):
                    keys.append(name)
        if "dependentSchemas" in schema:
            for name, subschema in schema["dependentSchemas"].items():
                if name in instance:
                    keys += self.evaluated_keys(validator, instance, subschema)
        for keyword in ("allOf", "oneOf", "anyOf"):
            for subschema in schema.get(keyword, []):
                if _is_valid(validator.descend(instance, subschema)):
                    keys += self.evaluated_keys(validator, instance, subschema)
        if "if" in schema:
            if validator.evolve(schema=schema["if"]).is_valid(instance):
                keys += self.evaluated_keys(validator, instance, schema["if"])
                if "then" in schema:
                    keys += self.evaluated_keys(validator, instance, schema["then"])
            elif "else" in schema:
                keys += self.evaluated_keys(validator, instance, schema["else"])
        return keys

    def unevaluated_properties(
        self, validator: Any, unevaluated: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        evaluated = self.evaluated_keys(validator, instance, schema)
        failing = [
            name
            for name in instance
            if name not in evaluated
            and not _is_valid(validator.descend(instance[name], unevaluated, path=name, schema_path=name))
        ]
        if failing:
            if unevaluated is False:
                listed, verb = _extras_message(sorted(failing, key=str))
                yield ValidationError(f"Unevaluated properties are not allowed ({listed} {verb} unexpected)")
            else:
                listed, verb = _extras_message(failing)
                yield ValidationError(
                    f"Unevaluated properties are not valid under the given schema ({listed} {verb} "
                    "unevaluated and invalid)"
                )


@lru_cache(maxsize=8)
def _validator_class(max_chars: int) -> Any:
    """Draft 2020-12 with every keyword that matches a regular expression replaced."""
    keywords = _Re2Keywords(max_chars)
    return validators.extend(
        Draft202012Validator,
        {
            "pattern": keywords.pattern,
            "patternProperties": keywords.pattern_properties,
            "additionalProperties": keywords.additional_properties,
            "unevaluatedProperties": keywords.unevaluated_properties,
        },
    )


def safe_validator(schema: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> Validator:
    """A Draft 2020-12 validator for ``schema`` whose regular expressions cannot backtrack and only
    see strings up to ``limits.argument_chars``. Never raises for a pattern RE2 cannot run: calls
    that reach it fail with a message saying why (schemas saved now are checked by
    ``check_patterns``; older ones still load)."""
    cls = _validator_class(limits.argument_chars)
    validator: Validator = cls(schema)
    return validator
