"""What a write is checked against before anything is stored: the definition (shape, JSON
Schemas, templates, outbound URLs), the change note's size and the label names."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from registry.catalog.errors import Invalid, NotFound
from registry.catalog.protection import LATEST
from registry.catalog.rendering import check_prompt_templates, check_resource_templates
from registry.catalog.specs import KINDS, SPEC_MODELS, PromptSpec, ResourceSpec, Spec, ToolSpec, is_label
from registry.catalog.templates import TemplateError
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits, env_name

#: The label a save publishes to by default: what agents are served.
PRODUCTION = "production"

#: Checks an outbound URL (webhook or http resource) at save time; raises ValueError to refuse it.
UrlGuard = Callable[[str], None]


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors():
        item = {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"].removeprefix("Value error, ")}
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, LimitExceeded):
            item["limit"] = env_name(cause.limit)
        errors.append(item)
    return errors


def check_labels(labels: Iterable[str]) -> list[str]:
    """``labels`` as given, each a valid label name a write may move (never ``latest``); else 422."""
    result = []
    for label in labels:
        if not is_label(label):
            raise Invalid(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
        if label == LATEST:
            raise Invalid("the 'latest' label moves by itself and cannot be set")
        result.append(label)
    return result


class SpecValidator:
    """Checks definitions and change notes against the catalog's ``limits`` and outbound URLs
    against ``url_guard`` (None: any URL)."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS, url_guard: UrlGuard | None = None) -> None:
        self.limits = limits
        self.url_guard = url_guard

    def parse_spec(self, kind: str, raw: Mapping[str, Any]) -> Spec:
        """Validate a definition (shape, JSON Schemas, templates, outbound URLs); 422 on any problem."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        try:
            spec = SPEC_MODELS[kind].model_validate(dict(raw), context={"limits": self.limits})
        except ValidationError as exc:
            errors = validation_errors(exc)
            summary = "; ".join(f"{e['loc'] or kind}: {e['msg']}" for e in errors[:5])
            raise Invalid(f"invalid {kind}: {summary}", errors=errors) from None
        try:
            if isinstance(spec, PromptSpec):
                check_prompt_templates(spec, limits=self.limits)
            elif isinstance(spec, ResourceSpec):
                check_resource_templates(spec, limits=self.limits)
        except TemplateError as exc:
            raise Invalid(f"invalid {kind} template: {exc}") from None
        self._check_urls(spec)
        return spec

    def check_note(self, note: str | None) -> None:
        cap = self.limits.change_note_chars
        if note is not None and len(note) > cap:
            refusal = LimitExceeded("change_note_chars", f"change_note has {len(note)} characters; at most {cap}")
            raise Invalid(
                str(refusal), errors=[{"loc": "change_note", "msg": str(refusal), "limit": env_name(refusal.limit)}]
            )

    def _check_urls(self, spec: Spec) -> None:
        if self.url_guard is None:
            return
        url: str | None = None
        if isinstance(spec, ToolSpec):
            url = spec.webhook.url
        elif isinstance(spec, ResourceSpec) and spec.kind == "http":
            url = spec.url
        if url:
            try:
                self.url_guard(url)
            except ValueError as exc:
                raise Invalid(f"refused outbound URL: {exc}") from None
