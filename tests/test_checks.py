"""Pre-publish checks (registry/catalog/checks.py) on definitions: each breaking-change rule, sample
rendering and its failures, and the prompts that embed a changed resource."""

from __future__ import annotations

from typing import Any

import pytest

from registry.catalog.checks import (
    CheckReport,
    embeds,
    prompt_breaks,
    resource_breaks,
    run_checks,
    sample_checks,
    schema_narrowing,
    tool_breaks,
)
from registry.catalog.errors import Invalid
from registry.catalog.specs import PromptSpec, dump_spec
from registry.catalog.validation import SpecValidator
from registry.limits import Limits


def prompt(arguments: list[dict[str, Any]], text: str = "Hi {{ who }}", **extra: Any) -> dict[str, Any]:
    return dump_spec(PromptSpec.model_validate({"name": "p", "arguments": arguments, "template": text, **extra}))


def tool(schema: dict[str, Any], output: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "t", "inputSchema": schema, "webhook": {"url": "builtin://echo"}}
    if output is not None:
        spec["outputSchema"] = output
    return spec


def statuses(report: CheckReport) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for item in report.items:
        found.setdefault(item.check, []).append(item.status)
    return found


# ------------------------------------------------------------------ prompt arguments


WHO = {"name": "who", "required": True}


def test_a_required_argument_added_is_breaking_unless_it_has_a_default() -> None:
    old = prompt([WHO])
    new = prompt([WHO, {"name": "tone", "required": True}], "{{ who }} {{ tone }}")
    assert prompt_breaks(old, new) == ["required argument 'tone' was added: agents that do not send it are refused"]
    defaulted = prompt([WHO, {"name": "tone", "required": True, "default": "warm"}], "{{ who }} {{ tone }}")
    assert prompt_breaks(old, defaulted) == []
    optional = prompt([WHO, {"name": "tone"}], "{{ who }} {{ tone }}")
    assert prompt_breaks(old, optional) == []


def test_a_removed_argument_is_reported_as_removed_or_renamed() -> None:
    old = prompt([WHO, {"name": "tone"}], "{{ who }} {{ tone }}")
    renamed = prompt([WHO, {"name": "style"}], "{{ who }} {{ style }}")
    assert prompt_breaks(old, renamed) == ["argument 'tone' was removed or renamed: agents that send it are refused"]


def test_an_optional_argument_made_required() -> None:
    old = prompt([{"name": "who"}])
    new = prompt([WHO])
    assert prompt_breaks(old, new) == ["argument 'who' was optional and is now required"]
    # Required, but a default still fills it in: agents need not send it.
    assert prompt_breaks(old, prompt([{**WHO, "default": "you"}])) == []
    # A default dropped from a required argument makes agents send it.
    assert prompt_breaks(prompt([{**WHO, "default": "you"}]), new) == [
        "argument 'who' was optional and is now required"
    ]


def test_allowed_values_narrowed() -> None:
    old = prompt([{**WHO, "enum": ["a", "b", "c"]}])
    assert prompt_breaks(old, prompt([{**WHO, "enum": ["a", "b"]}])) == ["argument 'who' no longer accepts: c"]
    assert prompt_breaks(old, prompt([{**WHO, "enum": ["a", "b", "c", "d"]}])) == []  # widened
    assert prompt_breaks(old, prompt([WHO])) == []  # any value now
    assert prompt_breaks(prompt([WHO]), prompt([{**WHO, "enum": ["a"]}])) == ["argument 'who' now only accepts: a"]


def test_text_only_edits_are_not_breaking() -> None:
    assert prompt_breaks(prompt([WHO], "Hi {{ who }}"), prompt([WHO], "Hello {{ who }}!")) == []


# ------------------------------------------------------------------ tool schemas

BASE = {
    "type": "object",
    "properties": {"q": {"type": "string", "maxLength": 100}, "n": {"type": "integer"}},
    "required": ["q"],
}


def narrowed(new: dict[str, Any], old: dict[str, Any] = BASE) -> list[str]:
    found, _unknown = schema_narrowing(old, new)
    return found


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        ({**BASE, "required": ["q", "n"]}, "property 'n' is now required"),
        ({**BASE, "additionalProperties": False}, "additionalProperties is now false"),
        (
            {
                "type": "object",
                "properties": {"q": {"type": "string", "maxLength": 100}},
                "required": ["q"],
                "additionalProperties": False,
            },
            "property 'n' was removed and additionalProperties is false",
        ),
        ({**BASE, "properties": {**BASE["properties"], "n": {"type": "string"}}}, "type narrowed from integer"),
        ({**BASE, "properties": {**BASE["properties"], "q": {"type": "string", "enum": ["x"]}}}, "now limited to"),
        ({**BASE, "properties": {**BASE["properties"], "q": {"type": "string", "maxLength": 10}}}, "maxLength lowered"),
        (
            {**BASE, "properties": {**BASE["properties"], "n": {"type": "integer", "minimum": 1}}},
            "minimum added",
        ),
        (
            {**BASE, "properties": {**BASE["properties"], "q": {"type": "string", "maxLength": 100, "pattern": "^a"}}},
            "pattern added",
        ),
    ],
)
def test_each_input_schema_narrowing_is_found(new: dict[str, Any], expected: str) -> None:
    found = narrowed(new)
    assert any(expected in line for line in found), found
    assert tool_breaks(tool(BASE), tool(new))[0], "a narrowing is a breaking change"


def test_enum_narrowed_in_a_schema() -> None:
    old = {"type": "object", "properties": {"mode": {"enum": ["fast", "slow", "safe"]}}}
    new = {"type": "object", "properties": {"mode": {"enum": ["fast", "safe"]}}}
    assert narrowed(new, old) == ["inputSchema.mode: allowed values narrowed ('slow' no longer accepted)"]


def test_widening_changes_are_not_breaking() -> None:
    wider = {
        "type": "object",
        "properties": {
            "q": {"type": "string", "maxLength": 200},
            "n": {"type": "number"},  # integer values are numbers too
            "extra": {"type": "boolean"},  # a new optional property
        },
        "required": [],
    }
    assert narrowed(wider) == []
    # A property dropped while others are still allowed: inputs that send it are still accepted.
    assert narrowed({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}) == []


def test_nested_and_array_items_are_compared() -> None:
    old = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    new = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 2}}}}
    assert narrowed(new, old) == ["inputSchema.tags[]: minLength added (None -> 2)"]


def test_composition_changes_are_flagged_as_not_analysed() -> None:
    old = {"type": "object", "properties": {"a": {"type": "string"}}}
    new = {**old, "anyOf": [{"required": ["a"]}]}
    found, unknown = schema_narrowing(old, new)
    assert found == [] and unknown == ["inputSchema: anyOf changed"]
    report = run_checks("tool", tool(new), tool(old), label="production")
    assert statuses(report)["breaking_changes"] == ["pass", "warn"]
    assert not report.failed


def test_any_output_schema_change_is_breaking() -> None:
    out = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    assert tool_breaks(tool(BASE, out), tool(BASE, out)) == ([], [])
    wider = {"type": "object", "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}}}
    assert tool_breaks(tool(BASE, out), tool(BASE, wider))[0] == [
        "outputSchema changed: clients that validate results against the listed schema may fail"
    ]
    assert "outputSchema added" in tool_breaks(tool(BASE), tool(BASE, out))[0][0]
    assert "outputSchema removed" in tool_breaks(tool(BASE, out), tool(BASE))[0][0]


# ------------------------------------------------------------------ resources


def test_resource_uri_and_mime_type_changes_are_breaking() -> None:
    old = {"name": "r", "kind": "static", "uri": "docs://a", "mimeType": "text/plain", "text": "x"}
    assert resource_breaks(old, {**old, "text": "y"}) == []
    assert resource_breaks(old, {**old, "uri": "docs://b"}) == ["uri changed: docs://a -> docs://b"]
    assert resource_breaks(old, {**old, "mimeType": "text/markdown"}) == [
        "mimeType changed: text/plain -> text/markdown"
    ]
    template = {"name": "r", "kind": "template", "uriTemplate": "t://{x}", "text": "{{ x }}"}
    assert resource_breaks(template, {**template, "uriTemplate": "t://{x}/v2"}) == [
        "uriTemplate changed: t://{x} -> t://{x}/v2"
    ]


def test_prompts_embedding_a_resource_are_found() -> None:
    spec = {
        "name": "uses-docs",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "Read this"}},
            {"role": "user", "content": {"type": "resource", "uri": "docs://style"}},
        ],
    }
    assert embeds(spec, [{"uri": "docs://style"}])
    assert not embeds(spec, [{"uri": "docs://other"}])
    assert embeds(spec, [{"uriTemplate": "docs://{page}"}])
    assert not embeds(
        {"name": "plain", "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]},
        [{"uri": "docs://style"}],
    )
    report = run_checks(
        "resource",
        {"name": "r", "kind": "static", "uri": "docs://style", "text": "new"},
        {"name": "r", "kind": "static", "uri": "docs://style", "text": "old"},
        label="production",
        embedding=["uses-docs"],
    )
    item = next(i for i in report.items if i.check == "embedding_prompts")
    assert item.status == "warn" and "uses-docs" in item.detail
    assert not report.failed  # information, not a failure


# ------------------------------------------------------------------ samples


def spec_of(raw: dict[str, Any]) -> PromptSpec:
    return PromptSpec.model_validate(raw)


def test_samples_render_and_pass() -> None:
    spec = spec_of(
        {
            "name": "p",
            "arguments": [WHO, {"name": "tone", "enum": ["warm", "dry"]}],
            "template": "Hi {{ who }}{% if tone %}, {{ tone }}{% endif %}",
            "samples": [{"who": "Ada"}, {"who": "Bob", "tone": "dry"}],
        }
    )
    items = sample_checks(spec)
    assert [(i.status, i.title) for i in items] == [("pass", "2 sample sets render")]


def test_no_samples_is_a_warning_and_renders_with_defaults() -> None:
    spec = spec_of({"name": "p", "arguments": [{**WHO, "enum": ["x", "y"]}], "template": "Hi {{ who }}"})
    items = sample_checks(spec)
    assert [i.status for i in items] == ["warn", "pass"]
    assert items[0].title == "No stored samples"


def test_an_undefined_variable_fails() -> None:
    # Declared, so it saves; `who.name` is undefined for a string argument (StrictUndefined).
    spec = spec_of({"name": "p", "arguments": [WHO], "template": "Hi {{ who.name }}", "samples": [{"who": "Ada"}]})
    items = sample_checks(spec)
    assert items[-1].status == "fail"
    assert "sample 1" in items[-1].detail and "has no attribute 'name'" in items[-1].detail


def test_a_render_cap_exceeded_fails() -> None:
    spec = spec_of(
        {"name": "p", "arguments": [WHO], "template": "{{ who * 500 }}", "samples": [{"who": "x"}, {"who": "y" * 10}]}
    )
    limits = Limits(render_output_chars=1000)
    items = sample_checks(spec, limits=limits)
    failed = items[-1]
    assert failed.status == "fail"
    assert "sample 2" in failed.detail and "REGISTRY_LIMIT_RENDER_OUTPUT_CHARS" in failed.detail
    assert "sample 1" not in failed.detail
    assert run_checks("prompt", dump_spec(spec), None, label="production", limits=limits).failed


def test_a_missing_embedded_resource_fails_the_render() -> None:
    spec = spec_of({"name": "p", "messages": [{"role": "user", "content": {"type": "resource", "uri": "docs://gone"}}]})
    items = sample_checks(spec, lambda _uri: None)
    assert items[-1].status == "fail" and "docs://gone" in items[-1].detail
    served = [{"uri": "docs://gone", "text": "here"}]
    assert sample_checks(spec, lambda _uri: served)[-1].status == "pass"


def test_samples_are_bounded_and_name_declared_arguments() -> None:
    catalog = SpecValidator(Limits(prompt_samples=2))  # parse_spec needs only the limits and no URL guard
    base = {"name": "p", "arguments": [WHO], "template": "Hi {{ who }}"}
    catalog.parse_spec("prompt", {**base, "samples": [{"who": "a"}, {"who": "b"}]})
    with pytest.raises(Invalid, match="REGISTRY_LIMIT_PROMPT_SAMPLES"):
        catalog.parse_spec("prompt", {**base, "samples": [{"who": "a"}] * 3})
    with pytest.raises(Invalid, match="undeclared argument"):
        catalog.parse_spec("prompt", {**base, "samples": [{"whom": "a"}]})
    with pytest.raises(Invalid, match="REGISTRY_LIMIT_ARGUMENT_CHARS"):
        catalog.limits = Limits(argument_chars=5)
        catalog.parse_spec("prompt", {**base, "samples": [{"who": "abcdefgh"}]})
    # No samples and empty samples store the same definition (versions without them keep their form).
    assert "samples" not in dump_spec(catalog.parse_spec("prompt", {**base, "samples": []}))


def test_the_first_publication_has_nothing_to_compare() -> None:
    report = run_checks("tool", tool(BASE), None, label="production")
    assert [(i.check, i.status) for i in report.items] == [("breaking_changes", "pass")]
    assert report.as_dict()["failed"] is False
