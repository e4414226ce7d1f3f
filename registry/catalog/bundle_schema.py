"""The JSON Schema of a bundle's entry files, for editors (the YAML language server) and CI.

Generated from the very pydantic models the bundle parser validates with (``registry.catalog.specs``),
so it cannot drift from what an import accepts: ``docs/bundle.schema.json`` is this module's output
(``python -m registry.catalog.bundle_schema > docs/bundle.schema.json``; a test compares them), and
the server serves it at ``/api/v1/bundles/schema.json``. It checks the shape of a file (fields, types,
patterns, the prompt's ``template:`` shorthand); what only the parser can check (templates compile
and declare their variables, tool schemas are valid JSON Schemas, samples render, limits) is
``mcp-registry lint``'s.

One schema serves every folder: a file with ``webhook`` is a tool, one with ``template`` or
``messages`` a prompt, any other a resource (``if``/``then``), so an editor reports the problems of
the kind the file is rather than "matches none of three".
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic.json_schema import models_json_schema

from registry.catalog.specs import PromptSpec, ResourceSpec, ToolSpec

#: The file's name, in the repository's ``docs/`` and in the folder ``mcp-registry pull`` writes.
SCHEMA_FILE = "bundle.schema.json"
_REF = "#/$defs/{model}"


def _with_template_shorthand(prompt: dict[str, Any]) -> dict[str, Any]:
    """A prompt file may give ``template: "..."`` (one user text message) instead of ``messages``."""
    prompt = dict(prompt)
    properties = dict(prompt["properties"])
    properties["template"] = {
        "type": "string",
        "title": "Template",
        "description": "shorthand for one user text message: a Jinja2 template over the arguments",
    }
    prompt["properties"] = properties
    prompt["required"] = [name for name in prompt.get("required", []) if name != "messages"]
    prompt["oneOf"] = [{"required": ["template"]}, {"required": ["messages"]}]
    return prompt


def bundle_schema() -> dict[str, Any]:
    """The schema of one entry file (``prompts/``, ``resources/`` or ``tools/`` ``<name>.yaml``)."""
    _, top = models_json_schema(
        [(PromptSpec, "validation"), (ResourceSpec, "validation"), (ToolSpec, "validation")], ref_template=_REF
    )
    definitions: dict[str, Any] = dict(top["$defs"])
    definitions["PromptSpec"] = _with_template_shorthand(definitions["PromptSpec"])

    def ref(name: str) -> dict[str, str]:
        return {"$ref": _REF.format(model=name)}

    prompt_keys = {"anyOf": [{"required": ["template"]}, {"required": ["messages"]}]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mcp-registry bundle entry file",
        "description": "One catalog entry of an mcp-registry bundle: prompts/<name>.yaml, resources/<name>.yaml or "
        "tools/<name>.yaml. Generated from the registry's own models; `mcp-registry lint` checks the rest "
        "(templates, JSON Schemas, samples, limits).",
        "type": "object",
        "if": {"required": ["webhook"]},
        "then": ref("ToolSpec"),
        "else": {"if": prompt_keys, "then": ref("PromptSpec"), "else": ref("ResourceSpec")},
        "$defs": dict(sorted(definitions.items())),
    }


def schema_text() -> str:
    """The schema as the committed file holds it."""
    return json.dumps(bundle_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
