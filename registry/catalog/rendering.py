"""Turning stored definitions into what agents receive: rendered prompt messages, resource contents.

Shared by the REST preview and the MCP handlers, so a preview shows exactly what agents get.
Each renderer compiles its templates once; the MCP catalog snapshot keeps renderers around.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from registry.catalog.specs import (
    AudioContent,
    ImageContent,
    PromptArgument,
    PromptSpec,
    ResourceRefContent,
    ResourceSpec,
    TextContent,
)
from registry.catalog.templates import CompiledTemplate, TemplateError, check_template, compiled
from registry.catalog.uritemplates import UriTemplate


class ArgumentError(ValueError):
    """The caller's arguments do not fit the prompt (missing required, wrong type, not in enum)."""


#: Resolves a URI to MCP resource contents (``[{"uri", "mimeType", "text"|"blob"}]``) or None.
ResourceResolver = Callable[[str], list[dict[str, Any]] | None]


def bind_arguments(declared: list[PromptArgument], given: Mapping[str, Any] | None) -> dict[str, str]:
    """Values for every declared argument: given, else its default, else ``""`` when optional."""
    given = dict(given or {})
    bound: dict[str, str] = {}
    missing: list[str] = []
    for arg in declared:
        value = given.get(arg.name)
        if value is None:
            if arg.default is not None:
                bound[arg.name] = arg.default
            elif arg.required:
                missing.append(arg.name)
            else:
                bound[arg.name] = ""
            continue
        if not isinstance(value, str):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ArgumentError(f"argument {arg.name!r} must be a string")
            value = str(value)
        if arg.enum is not None and value not in arg.enum:
            raise ArgumentError(f"argument {arg.name!r} must be one of: {', '.join(arg.enum)}")
        bound[arg.name] = value
    if missing:
        raise ArgumentError(f"missing required argument(s): {', '.join(missing)}")
    return bound


def check_prompt_templates(spec: PromptSpec) -> None:
    declared = [a.name for a in spec.arguments]
    for index, message in enumerate(spec.messages):
        if isinstance(message.content, TextContent):
            check_template(message.content.text, declared, where=f"messages[{index}].content.text")


class PromptRenderer:
    """Renders one prompt version. Templates are compiled on first use (a catalog of thousands of
    prompts would otherwise spend seconds compiling ones nobody asks for) and shared by source."""

    def __init__(self, spec: PromptSpec) -> None:
        self.spec = spec
        self._templates: list[CompiledTemplate | None] | None = None

    @property
    def templates(self) -> list[CompiledTemplate | None]:
        if self._templates is None:
            self._templates = [
                compiled(m.content.text) if isinstance(m.content, TextContent) else None for m in self.spec.messages
            ]
        return self._templates

    def render(self, arguments: Mapping[str, Any] | None, resolve: ResourceResolver | None = None) -> dict[str, Any]:
        """An MCP GetPromptResult. Raises ArgumentError or TemplateError with a user-safe message."""
        bound = bind_arguments(self.spec.arguments, arguments)
        messages: list[dict[str, Any]] = []
        for message, template in zip(self.spec.messages, self.templates, strict=True):
            content = message.content
            rendered: dict[str, Any]
            if template is not None:
                rendered = {"type": "text", "text": template.render(bound)}
            elif isinstance(content, ImageContent | AudioContent):
                rendered = {"type": content.type, "data": content.data, "mimeType": content.mimeType}
            else:
                assert isinstance(content, ResourceRefContent)
                contents = resolve(content.uri) if resolve is not None else None
                if not contents:
                    raise TemplateError(f"embedded resource {content.uri!r} is not available")
                rendered = {"type": "resource", "resource": contents[0]}
            messages.append({"role": message.role, "content": rendered})
        result: dict[str, Any] = {"messages": messages}
        if self.spec.description:
            result["description"] = self.spec.description
        return result


class ResourceRenderer:
    """Reads static and template resources (``http`` ones are fetched by the MCP layer)."""

    def __init__(self, spec: ResourceSpec) -> None:
        self.spec = spec
        self.uri_template = UriTemplate(spec.uriTemplate) if spec.uriTemplate else None
        self._template = compiled(spec.text) if spec.kind == "template" and spec.text is not None else None

    def match(self, uri: str) -> dict[str, str] | None:
        if self.uri_template is not None:
            return self.uri_template.match(uri)
        return {} if uri == self.spec.uri else None

    def read(self, uri: str) -> list[dict[str, Any]] | None:
        variables = self.match(uri)
        if variables is None:
            return None
        item: dict[str, Any] = {"uri": uri}
        if self.spec.mimeType:
            item["mimeType"] = self.spec.mimeType
        if self._template is not None:
            assert self.uri_template is not None
            bound = {name: variables.get(name, "") for name in self.uri_template.variables}
            item["text"] = self._template.render(bound)
        elif self.spec.blob is not None:
            item["blob"] = self.spec.blob
        elif self.spec.text is not None:
            item["text"] = self.spec.text
        else:
            return None
        return [item]


def check_resource_templates(spec: ResourceSpec) -> None:
    if spec.kind == "template" and spec.uriTemplate and spec.text is not None:
        try:
            variables = UriTemplate(spec.uriTemplate).variables
        except ValueError as exc:
            raise TemplateError(f"uriTemplate: {exc}") from None
        if not variables:
            raise TemplateError("uriTemplate has no {variables}; use a static resource instead")
        check_template(spec.text, variables, where="text")
