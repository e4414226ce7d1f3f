"""The shapes of catalog entries, as admins write them and as versions store them.

A version stores ``Spec.model_dump(mode="json", exclude_none=True)``; reading a version back
through the same model gives the same document, which is what makes import idempotent and the
export round trip exact.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
LABEL_PATTERN = r"^[a-z0-9][a-z0-9_.\-]{0,63}$"
TAG_PATTERN = r"^[A-Za-z0-9_.:\-]{1,64}$"
ARGUMENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

Name = Annotated[str, Field(pattern=NAME_PATTERN, description="1-128 characters of [A-Za-z0-9_.-]")]
Tag = Annotated[str, Field(pattern=TAG_PATTERN)]

KINDS = ("prompt", "resource", "tool")
#: URL path segment -> kind
KIND_BY_COLLECTION = {"prompts": "prompt", "resources": "resource", "tools": "tool"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PromptArgument(_Model):
    name: Annotated[str, Field(pattern=ARGUMENT_PATTERN)]
    title: str | None = None
    description: str | None = None
    required: bool = False
    #: Allowed values; offered by completion/complete.
    enum: list[str] | None = None
    #: Used when the caller leaves the argument out.
    default: str | None = None

    @model_validator(mode="after")
    def _default_in_enum(self) -> PromptArgument:
        if self.enum is not None and self.default is not None and self.default not in self.enum:
            raise ValueError(f"argument {self.name!r}: default {self.default!r} is not one of its enum values")
        return self


class TextContent(_Model):
    type: Literal["text"] = "text"
    #: A Jinja2 template (sandboxed) over the prompt's arguments.
    text: str


class ImageContent(_Model):
    type: Literal["image"]
    data: str = Field(description="base64")
    mimeType: str


class AudioContent(_Model):
    type: Literal["audio"]
    data: str = Field(description="base64")
    mimeType: str


class ResourceRefContent(_Model):
    """An embedded resource, resolved by URI from the same label's catalog when rendered."""

    type: Literal["resource"]
    uri: str


Content = Annotated[TextContent | ImageContent | AudioContent | ResourceRefContent, Field(discriminator="type")]


class PromptMessage(_Model):
    role: Literal["user", "assistant"]
    content: Content


class _EntrySpec(_Model):
    name: Name
    title: str | None = Field(default=None, max_length=256)
    description: str | None = None
    tags: list[Tag] = Field(default_factory=list)

    @field_validator("tags")
    @classmethod
    def _unique_tags(cls, tags: list[str]) -> list[str]:
        return sorted(set(tags))


class PromptSpec(_EntrySpec):
    arguments: list[PromptArgument] = Field(default_factory=list)
    messages: list[PromptMessage] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _template_shorthand(cls, data: Any) -> Any:
        """``template: "..."`` is one user text message."""
        if isinstance(data, dict) and "template" in data:
            data = dict(data)
            if "messages" in data:
                raise ValueError("give either 'template' or 'messages', not both")
            data["messages"] = [{"role": "user", "content": {"type": "text", "text": data.pop("template")}}]
        return data

    @model_validator(mode="after")
    def _unique_arguments(self) -> PromptSpec:
        names = [a.name for a in self.arguments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate argument names: {', '.join(duplicates)}")
        return self


class ResourceSpec(_EntrySpec):
    kind: Literal["static", "template", "http"] = "static"
    #: static and http resources: the URI agents read.
    uri: str | None = Field(default=None, max_length=2048)
    #: template resources: an RFC 6570 URI template whose variables feed ``text``.
    uriTemplate: str | None = Field(default=None, max_length=2048)
    mimeType: str | None = None
    #: static: the content; template: a Jinja2 template over the URI template's variables.
    text: str | None = None
    #: static: base64 content for binary resources.
    blob: str | None = None
    #: http: where the content is fetched from, and for how long it is cached.
    url: str | None = None
    cache_ttl_s: float | None = Field(default=None, ge=0)
    annotations: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _kind_fields(self) -> ResourceSpec:
        if self.kind == "template":
            if not self.uriTemplate:
                raise ValueError("a template resource needs 'uriTemplate'")
            if self.uri or self.blob or self.url:
                raise ValueError("a template resource takes 'uriTemplate' and 'text', not 'uri', 'blob' or 'url'")
            if self.text is None:
                raise ValueError("a template resource needs 'text' (a Jinja2 template over the URI variables)")
        else:
            if not self.uri:
                raise ValueError(f"a {self.kind} resource needs 'uri'")
            if self.uriTemplate:
                raise ValueError(f"a {self.kind} resource takes 'uri', not 'uriTemplate'")
            if "://" not in self.uri and not self.uri.count(":"):
                raise ValueError(f"'uri' must be an absolute URI with a scheme, got {self.uri!r}")
        if self.kind == "static":
            if (self.text is None) == (self.blob is None):
                raise ValueError("a static resource needs exactly one of 'text' or 'blob'")
            if self.url:
                raise ValueError("a static resource takes no 'url'")
        if self.kind == "http":
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError("an http resource needs an http(s) 'url'")
            if self.text is not None or self.blob is not None:
                raise ValueError("an http resource's content comes from its 'url', not 'text' or 'blob'")
        return self

    @property
    def identity_uri(self) -> str:
        """What must be unique across resources: the URI, or the URI template."""
        return self.uri or self.uriTemplate or ""


class ToolAnnotations(_Model):
    title: str | None = None
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class WebhookSpec(_Model):
    url: str
    method: Literal["POST", "PUT"] = "POST"
    #: Header values are write-only: stored encrypted, shown masked.
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    #: HMAC secret for X-Registry-Signature; write-only like the headers.
    secret: str | None = None

    @field_validator("url")
    @classmethod
    def _scheme(cls, url: str) -> str:
        if not url.startswith(("http://", "https://", "builtin://")):
            raise ValueError("webhook url must be http(s):// (or builtin:// for the registry's own hooks)")
        return url


def _check_json_schema(schema: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"{what} is not a valid JSON Schema 2020-12 at {path}: {exc.message}") from None
    if schema.get("type") != "object":
        raise ValueError(f'{what} must describe an object ("type": "object")')
    return schema


class ToolSpec(_EntrySpec):
    inputSchema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    outputSchema: dict[str, Any] | None = None
    annotations: ToolAnnotations | None = None
    webhook: WebhookSpec

    @field_validator("inputSchema")
    @classmethod
    def _input_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        return _check_json_schema(schema, "inputSchema")

    @field_validator("outputSchema")
    @classmethod
    def _output_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if schema is None else _check_json_schema(schema, "outputSchema")


Spec = PromptSpec | ResourceSpec | ToolSpec
SPEC_MODELS: dict[str, type[PromptSpec] | type[ResourceSpec] | type[ToolSpec]] = {
    "prompt": PromptSpec,
    "resource": ResourceSpec,
    "tool": ToolSpec,
}


def dump_spec(spec: Spec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_none=True)
