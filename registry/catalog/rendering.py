"""Turning stored definitions into what agents receive: rendered prompt messages, resource contents.

Shared by the REST preview and the MCP handlers, so a preview shows exactly what agents get.
Each renderer compiles its templates once; the MCP catalog snapshot keeps renderers around.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from registry.catalog.render_budget import RenderBudget, active_budget, render_scope
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
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits


class ArgumentError(ValueError):
    """The caller's arguments do not fit the prompt (missing required, wrong type, not in enum)."""


#: Resolves a URI to MCP resource contents (``[{"uri", "mimeType", "text"|"blob"}]``) or None.
ResourceResolver = Callable[[str], list[dict[str, Any]] | None]


def bind_arguments(
    declared: list[PromptArgument], given: Mapping[str, Any] | None, *, limits: Limits = DEFAULT_LIMITS
) -> dict[str, str]:
    """Values for every declared argument: given, else its default, else ``""`` when optional.

    Names the prompt does not declare are refused (an agent can correct a typo; nothing it sends
    is kept or passed on unchecked), and so are values longer than ``limits.argument_chars``.
    """
    given = given or {}
    names = {arg.name for arg in declared}
    undeclared = [key for key in given if key not in names]
    if undeclared:
        raise ArgumentError(_undeclared_message(undeclared, [arg.name for arg in declared]))
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
            try:
                value = str(value)
            except ValueError:  # an integer with more digits than Python will print
                raise _too_long(arg.name, "more than 4300", limits) from None
        if len(value) > limits.argument_chars:
            raise _too_long(arg.name, str(len(value)), limits)
        if arg.enum is not None and value not in arg.enum:
            raise ArgumentError(f"argument {arg.name!r} must be one of: {', '.join(arg.enum)}")
        bound[arg.name] = value
    if missing:
        raise ArgumentError(f"missing required argument(s): {', '.join(missing)}")
    return bound


def _too_long(name: str, length: str, limits: Limits) -> ArgumentError:
    message = f"argument {name!r} has {length} characters; at most {limits.argument_chars}"
    return ArgumentError(str(LimitExceeded("argument_chars", message)))


def _undeclared_message(undeclared: list[str], declared: list[str]) -> str:
    """Names the first few undeclared arguments (never echoes thousands) and the declared ones."""
    shown = ", ".join(repr(key[:64]) for key in undeclared[:5])
    more = f" and {len(undeclared) - 5} more" if len(undeclared) > 5 else ""
    accepted = ", ".join(declared) if declared else "none"
    return f"no argument(s) named {shown}{more}; the prompt accepts: {accepted}"


def _budget_scope(limits: Limits) -> AbstractContextManager[Any]:
    """One budget for a whole render request, unless the caller (the render runner) opened one."""
    return nullcontext() if active_budget() is not None else render_scope(RenderBudget(limits))


def check_prompt_templates(spec: PromptSpec, *, limits: Limits = DEFAULT_LIMITS) -> None:
    declared = [a.name for a in spec.arguments]
    for index, message in enumerate(spec.messages):
        if isinstance(message.content, TextContent):
            check_template(message.content.text, declared, where=f"messages[{index}].content.text", limits=limits)


class PromptRenderer:
    """Renders one prompt version. Templates are compiled on first use (a catalog of thousands of
    prompts would otherwise spend seconds compiling ones nobody asks for) and shared by source."""

    def __init__(self, spec: PromptSpec) -> None:
        self.spec = spec
        self._templates: list[CompiledTemplate | None] | None = None
        self._inline: bool | None = None
        #: The declared argument names (only these are remembered for completion).
        self.declared = frozenset(a.name for a in spec.arguments)

    @property
    def templates(self) -> list[CompiledTemplate | None]:
        if self._templates is None:
            self._templates = [
                compiled(m.content.text) if isinstance(m.content, TextContent) else None for m in self.spec.messages
            ]
        return self._templates

    @property
    def renders_inline(self) -> bool:
        """Only literal text with bare ``{{ name }}`` (and no embedded resource to resolve): such a
        render cannot be slow, so it needs no worker thread, and it depends on its arguments alone."""
        if self._inline is None:
            try:
                templates = self.templates
            except TemplateError:
                return True  # a template that no longer compiles: rendering fails at once, with its reason
            self._inline = all(
                template.is_simple if template is not None else not isinstance(message.content, ResourceRefContent)
                for message, template in zip(self.spec.messages, templates, strict=True)
            )
        return self._inline

    def render(
        self,
        arguments: Mapping[str, Any] | None,
        resolve: ResourceResolver | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
    ) -> dict[str, Any]:
        """An MCP GetPromptResult. Raises ArgumentError or TemplateError with a user-safe message."""
        bound = bind_arguments(self.spec.arguments, arguments, limits=limits)
        with _budget_scope(limits):
            return self._render(bound, resolve)

    def _render(self, bound: dict[str, str], resolve: ResourceResolver | None) -> dict[str, Any]:
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
        self._template: CompiledTemplate | None = None
        #: A stored template this version of the sandbox no longer compiles (a filter that was
        #: dropped, say): reading it fails, the rest of the catalog is still served.
        self._broken: TemplateError | None = None
        if spec.kind == "template" and spec.text is not None:
            try:
                self._template = compiled(spec.text)
            except TemplateError as exc:
                self._broken = exc

    def match(self, uri: str) -> dict[str, str] | None:
        if self.uri_template is not None:
            return self.uri_template.match(uri)
        return {} if uri == self.spec.uri else None

    @property
    def renders_inline(self) -> bool:
        """Static content, or a template of literal text and bare ``{{ name }}`` only."""
        return self._template is None or self._template.is_simple

    def read(self, uri: str, *, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]] | None:
        variables = self.match(uri)
        if variables is None:
            return None
        if self._broken is not None:
            raise self._broken
        item: dict[str, Any] = {"uri": uri}
        if self.spec.mimeType:
            item["mimeType"] = self.spec.mimeType
        if self._template is not None:
            assert self.uri_template is not None
            bound = {name: variables.get(name, "") for name in self.uri_template.variables}
            with _budget_scope(limits):
                item["text"] = self._template.render(bound)
        elif self.spec.blob is not None:
            item["blob"] = self.spec.blob
        elif self.spec.text is not None:
            item["text"] = self.spec.text
        else:
            return None
        return [item]


def check_resource_templates(spec: ResourceSpec, *, limits: Limits = DEFAULT_LIMITS) -> None:
    if spec.kind == "template" and spec.uriTemplate and spec.text is not None:
        try:
            variables = UriTemplate(spec.uriTemplate).variables
        except ValueError as exc:
            raise TemplateError(f"uriTemplate: {exc}") from None
        if not variables:
            raise TemplateError("uriTemplate has no {variables}; use a static resource instead")
        check_template(spec.text, variables, where="text", limits=limits)
