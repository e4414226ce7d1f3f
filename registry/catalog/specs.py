"""The shapes of catalog entries, as admins write them and as versions store them.

A version stores ``Spec.model_dump(mode="json", exclude_none=True)``; reading a version back
through the same model gives the same document, which is what makes import idempotent and the
export round trip exact.

Writes validate with the registry's limits as pydantic validation context
(``Model.model_validate(data, context={"limits": limits})``, see ``CatalogService.parse_spec``):
field sizes and counts, display-safe titles, header values without CR/LF, regular expressions
the linear-time engine can run. A stored version read back is validated without context, so
what was accepted once keeps being served even after a limit is lowered.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sized
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from registry.catalog.schemas import UnsafePattern, check_patterns
from registry.limits import LimitExceeded, Limits

# Anchored with ^...$ for pydantic (whose Rust engine lets $ match only at the very end) and for the
# OpenAPI schema; Python code must use fullmatch (``is_label``), since Python's $ also matches
# before a trailing newline ("prod\n").
NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
LABEL_PATTERN = r"^[a-z0-9][a-z0-9_.\-]{0,63}$"
TAG_PATTERN = r"^[A-Za-z0-9_.:\-]{1,64}$"
ARGUMENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_LABEL_RE = re.compile(LABEL_PATTERN)
#: RFC 9110 token: what an HTTP header name may be.
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def is_label(value: str) -> bool:
    """Whether ``value`` is a valid label name (the whole string: no trailing newline)."""
    return _LABEL_RE.fullmatch(value) is not None


# ------------------------------------------------------------------ save-time checks


def write_limits(info: ValidationInfo) -> Limits | None:
    """The limits a write is validated against, or None when a stored version is read back."""
    context = info.context
    if isinstance(context, Mapping):
        limits = context.get("limits")
        if isinstance(limits, Limits):
            return limits
    return None


def _cap_chars(value: str | None, cap: int, limit: str, what: str) -> None:
    if value is not None and len(value) > cap:
        raise LimitExceeded(limit, f"{what} has {len(value)} characters; at most {cap} are allowed")


def _cap_count(value: Any, cap: int, limit: str, what: str) -> None:
    """Counts are checked before the items are validated (``mode="before"``): refusing 100,000
    arguments should not first validate each of them."""
    if isinstance(value, Sized) and not isinstance(value, str) and len(value) > cap:
        raise LimitExceeded(limit, f"{len(value)} {what}; at most {cap} are allowed")


def _capped(*fields: str, limit: str, what: str | None = None, count: bool = False) -> Any:
    """A field validator refusing, on writes only, a value longer than ``Limits.<limit>``: its
    characters, or with ``count`` its items (then checked before they are validated, see
    ``_cap_count``). ``what`` names the value in the error; None names the field."""
    cap = _cap_count if count else _cap_chars

    def check(value: Any, info: ValidationInfo) -> Any:
        limits = write_limits(info)
        if limits is not None:
            cap(value, getattr(limits, limit), limit, what or str(info.field_name))
        return value

    return field_validator(*fields, mode="before" if count else "after")(check)


#: Format characters that scripts need (Persian, Indic, emoji sequences) and that cannot reorder text.
_JOINERS = frozenset("\u200c\u200d")


def _check_display_text(value: str | None, what: str) -> None:
    """Names and titles are shown to people and models: no control characters, line breaks, or
    invisible format characters such as the bidi overrides (U+202E) and isolates (U+2066-2069)
    that make text display differently from what it says."""
    if value is None:
        return
    for char in value:
        category = unicodedata.category(char)
        if category in ("Cc", "Cs", "Zl", "Zp") or (category == "Cf" and char not in _JOINERS):
            name = unicodedata.name(char, "control character")
            raise ValueError(
                f"{what} contains U+{ord(char):04X} ({name}); control, line-break and bidi/format "
                "characters are not allowed"
            )


def _check_headers(headers: Mapping[Any, Any], what: str) -> None:
    """A CR or LF in a header would let the saved value add headers (or a body) of its own to
    every outbound call; refused when saved, not discovered when called."""
    for name, value in headers.items():
        if not isinstance(name, str) or _HEADER_NAME_RE.fullmatch(name) is None:
            raise ValueError(f"{what} header name {name!r} is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)")
        bad = (
            next((c for c in value if (c < " " and c != "\t") or c == "\x7f"), None) if isinstance(value, str) else None
        )
        if bad is not None:
            raise ValueError(
                f"{what} header {name!r}: its value contains the control character U+{ord(bad):04X} "
                "(CR, LF and other control characters are not allowed in header values)"
            )


def _check_title(value: str | None, info: ValidationInfo, what: str = "title") -> str | None:
    limits = write_limits(info)
    if limits is not None:
        _cap_chars(value, limits.title_chars, "title_chars", what)
        _check_display_text(value, what)
    return value


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

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _check_title(value, info, "argument title")

    _description = _capped("description", limit="description_chars")

    @field_validator("enum", "default")
    @classmethod
    def _values(cls, value: list[str] | str | None, info: ValidationInfo) -> list[str] | str | None:
        limits = write_limits(info)
        if limits is not None and value is not None:
            for item in [value] if isinstance(value, str) else value:
                _cap_chars(item, limits.argument_chars, "argument_chars", f"argument {info.field_name} value")
        return value

    @model_validator(mode="after")
    def _default_in_enum(self) -> PromptArgument:
        if self.enum is not None and self.default is not None and self.default not in self.enum:
            raise ValueError(f"argument {self.name!r}: default {self.default!r} is not one of its enum values")
        return self


class TextContent(_Model):
    type: Literal["text"] = "text"
    #: A Jinja2 template (sandboxed) over the prompt's arguments.
    text: str

    _size = _capped("text", limit="template_chars", what="template text")


class ImageContent(_Model):
    type: Literal["image"]
    data: str = Field(description="base64")
    mimeType: str

    _data = _capped("data", limit="blob_chars")


class AudioContent(_Model):
    type: Literal["audio"]
    data: str = Field(description="base64")
    mimeType: str

    _data = _capped("data", limit="blob_chars")


class ResourceRefContent(_Model):
    """An embedded resource, resolved by URI from the same label's catalog when rendered."""

    type: Literal["resource"]
    uri: str

    _uri = _capped("uri", limit="uri_chars")


Content = Annotated[TextContent | ImageContent | AudioContent | ResourceRefContent, Field(discriminator="type")]


class PromptMessage(_Model):
    role: Literal["user", "assistant"]
    content: Content


class _EntrySpec(_Model):
    name: Name
    title: str | None = None
    description: str | None = None
    tags: list[Tag] = Field(default_factory=list)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _check_title(value, info)

    _description = _capped("description", limit="description_chars")

    _tag_count = _capped("tags", limit="tags", count=True)

    @field_validator("tags")
    @classmethod
    def _unique_tags(cls, tags: list[str]) -> list[str]:
        return sorted(set(tags))


#: One sample argument set: argument name -> value (the values a pre-publish check renders with).
#: Its keys must be the prompt's declared arguments (checked by ``PromptSpec``).
SampleSet = Annotated[dict[str, str], Field(json_schema_extra={"propertyNames": {"pattern": ARGUMENT_PATTERN}})]


class PromptSpec(_EntrySpec):
    arguments: list[PromptArgument] = Field(default_factory=list)
    messages: list[PromptMessage] = Field(min_length=1)
    #: Argument sets the pre-publish checks render every message with (``registry.catalog.checks``);
    #: never sent to agents. None (not ``[]``) when there are none, so stored versions without
    #: samples keep their exact form.
    samples: list[SampleSet] | None = None

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

    _argument_count = _capped("arguments", limit="prompt_arguments", count=True)
    _message_count = _capped("messages", limit="prompt_messages", count=True)

    @field_validator("samples", mode="before")
    @classmethod
    def _sample_count(cls, samples: Any, info: ValidationInfo) -> Any:
        limits = write_limits(info)
        if limits is not None:
            _cap_count(samples, limits.prompt_samples, "prompt_samples", "sample argument sets")
            for index, sample in enumerate(samples if isinstance(samples, list) else ()):
                _cap_count(sample, limits.prompt_arguments, "prompt_arguments", f"values in samples[{index}]")
        return samples

    @field_validator("samples")
    @classmethod
    def _sample_values(cls, samples: list[dict[str, str]] | None, info: ValidationInfo) -> Any:
        if not samples:
            return None  # [] is stored as no samples: one form for "none"
        limits = write_limits(info)
        if limits is not None:
            for index, sample in enumerate(samples):
                for key, value in sample.items():
                    _cap_chars(value, limits.argument_chars, "argument_chars", f"samples[{index}].{key}")
        return samples

    @model_validator(mode="after")
    def _unique_arguments(self) -> PromptSpec:
        names = [a.name for a in self.arguments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate argument names: {', '.join(duplicates)}")
        declared = set(names)
        for index, sample in enumerate(self.samples or ()):
            undeclared = sorted(set(sample) - declared)
            if undeclared:
                raise ValueError(
                    f"samples[{index}] names undeclared argument(s) {', '.join(undeclared[:5])}; samples may "
                    "only give values for the prompt's arguments"
                )
        return self


class ResourceSpec(_EntrySpec):
    kind: Literal["static", "template", "http"] = "static"
    #: static and http resources: the URI agents read.
    uri: str | None = None
    #: template resources: an RFC 6570 URI template whose variables feed ``text``.
    uriTemplate: str | None = None
    mimeType: str | None = None
    #: static: the content; template: a Jinja2 template over the URI template's variables.
    text: str | None = None
    #: static: base64 content for binary resources.
    blob: str | None = None
    #: http: where the content is fetched from, and for how long it is cached.
    url: str | None = None
    cache_ttl_s: float | None = Field(default=None, ge=0)
    #: http: headers sent with each fetch; write-only like a webhook's (stored encrypted, shown masked).
    headers: dict[str, str] | None = None
    annotations: dict[str, Any] | None = None

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, headers: Any, info: ValidationInfo) -> Any:
        limits = write_limits(info)
        if limits is None or not isinstance(headers, Mapping):
            return headers
        _cap_count(headers, limits.webhook_headers, "webhook_headers", "resource headers")
        _check_headers(headers, "resource")
        return headers

    _uri_size = _capped("uri", "uriTemplate", "url", limit="uri_chars")
    _text_size = _capped("text", limit="template_chars")
    _blob_size = _capped("blob", limit="blob_chars")

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
        elif self.headers:
            raise ValueError(f"a {self.kind} resource takes no 'headers' (only http resources send any)")
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

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _check_title(value, info, "annotations title")


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
    def _scheme(cls, url: str, info: ValidationInfo) -> str:
        limits = write_limits(info)
        if limits is not None:
            _cap_chars(url, limits.uri_chars, "uri_chars", "webhook url")
        if not url.startswith(("http://", "https://", "builtin://")):
            raise ValueError("webhook url must be http(s):// (or builtin:// for the registry's own hooks)")
        return url

    _header_count = _capped("headers", limit="webhook_headers", what="webhook headers", count=True)

    @field_validator("headers")
    @classmethod
    def _header_syntax(cls, headers: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """A CR or LF in a header would let the saved value add headers (or a body) of its own to
        every webhook call; refused when saved, not discovered when called."""
        if write_limits(info) is not None:
            _check_headers(headers, "webhook")
        return headers


def _check_json_schema(schema: dict[str, Any], what: str, info: ValidationInfo) -> dict[str, Any]:
    limits = write_limits(info)
    if limits is not None:
        size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode())
        if size > limits.schema_bytes:
            raise LimitExceeded(
                "schema_bytes", f"{what} is {size} bytes as JSON; at most {limits.schema_bytes} are allowed"
            )
    try:
        Draft202012Validator.check_schema(schema)
        if limits is not None:
            check_patterns(schema, what)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"{what} is not a valid JSON Schema 2020-12 at {path}: {exc.message}") from None
    except UnsafePattern as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        # check_schema compiles each pattern with Python's re, which recurses per group: "(((...)))"
        raise ValueError(f"{what} is nested too deeply (subschemas or groups in a pattern)") from None
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
    def _input_schema(cls, schema: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _check_json_schema(schema, "inputSchema", info)

    @field_validator("outputSchema")
    @classmethod
    def _output_schema(cls, schema: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        return None if schema is None else _check_json_schema(schema, "outputSchema", info)


Spec = PromptSpec | ResourceSpec | ToolSpec
SPEC_MODELS: dict[str, type[PromptSpec] | type[ResourceSpec] | type[ToolSpec]] = {
    "prompt": PromptSpec,
    "resource": ResourceSpec,
    "tool": ToolSpec,
}


def dump_spec(spec: Spec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_none=True)
