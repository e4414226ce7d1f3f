"""A tool's ``inputSchema`` as an HTML form, and that form's fields back as tool arguments.

The test-call page (``registry.ui.tool_test``) lets a person fill a form instead of writing JSON.
Only what a form expresses well is generated, one field per top-level property:

- ``string`` → a text input, with a "send an empty string" box (an empty field is otherwise not
  sent); anything with ``enum`` (or ``const``) of plain values → a select;
- ``number`` / ``integer`` → a number input with ``minimum``/``maximum``;
- ``boolean`` → a checkbox when required (unchecked: ``false``), else a select of "leave out" /
  true / false, so an optional boolean can be left out (its default chosen when it has one);
- everything else (arrays, objects, unions, ``$ref``, no type) → a JSON text area for that property.

Titles label the fields, descriptions are their help, defaults fill them, ``required`` marks
them. Schemas a form cannot express as a whole (not an object, combinators at the top, too many
properties) are left to the page's raw JSON text area, which is always offered besides.

Reading the form back never guesses: a field left empty (or "leave out" chosen) is not sent, and
a required field left so is a form error at that field, before anything is sent (an empty string
is sent only when its box says so); a number that is not one is a form error naming the field.
Why refuse rather than send ``""`` and let the tool's validator speak: a required string accepts
``""`` unless its schema says ``minLength``, so the call would go out with a value nobody typed.
Otherwise the tool's validator judges the arguments exactly as it judges an agent's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.boundedjson import JsonStructureError, loads
from registry.limits import DEFAULT_LIMITS, Limits

#: Most properties turned into form fields; a schema with more is edited as raw JSON.
MAX_FORM_PROPERTIES = 100
#: Most ``enum`` values offered in one select; more, and the property gets a JSON text area.
MAX_ENUM_OPTIONS = 200
#: Keywords at the top of a schema that a flat form of its properties would misrepresent.
_TOP_COMBINATORS = ("oneOf", "anyOf", "allOf", "not", "if", "dependentSchemas", "dependentRequired", "$ref")
#: The form field that carries the raw JSON arguments, and the one choosing between the two.
ARGUMENTS_FIELD = "arguments_json"
MODE_FIELD = "mode"
FIELD_PREFIX = "arg."
#: The "send an empty string" box of a text field (another prefix: property names are any string).
EMPTY_PREFIX = "empty."
#: An optional boolean's choices (the select's option values are their indexes).
BOOLEAN_CHOICES: list[tuple[str, str, Any]] = [("0", "true", True), ("1", "false", False)]


#: What a required field left empty is told, per widget.
_REQUIRED = {
    "text": "required: type a value, or tick “send an empty string” to send one",
    "select": "required: choose a value",
    "number": "required: enter a number",
    "integer": "required: enter a whole number",
    "json": "required: enter a JSON value",
}


@dataclass
class FormField:
    """One property of the schema as one form control, with the value it shows."""

    name: str  # the property name (any string)
    key: str  # the form field's name
    id: str  # the HTML id (property names may hold characters ids should not)
    widget: str  # text | select | number | integer | checkbox | json (an optional boolean: a select)
    label: str
    description: str
    required: bool
    type_note: str  # what the schema says the value is, shown beside the label
    value: str = ""  # text, number and JSON fields; a select's chosen option index
    checked: bool = False
    options: list[tuple[str, str, Any]] = field(default_factory=list)  # (index, label, value)
    minimum: str | None = None
    maximum: str | None = None
    max_length: int | None = None
    error: str | None = None
    #: A text field's "send an empty string" box, ticked.
    send_empty: bool = False

    @property
    def required_message(self) -> str:
        """What this field says when it is required and left empty (the page's script says the
        same before sending)."""
        return _REQUIRED.get(self.widget, "") if self.required else ""

    @property
    def empty_key(self) -> str:
        """The form field of a text field's "send an empty string" box."""
        return EMPTY_PREFIX + self.name

    @property
    def described_by(self) -> str:
        """The ids of its help and error texts (``aria-describedby``)."""
        ids = [f"{self.id}-help"] if self.description else []
        return " ".join([*ids, f"{self.id}-error"] if self.error else ids)


@dataclass
class SchemaForm:
    """The generated form: its fields, and whether the raw JSON text area should be the default
    (``note`` says why when the schema is beyond a form)."""

    fields: list[FormField]
    prefer_json: bool
    note: str | None
    example: dict[str, Any]  # the defaults, as the raw JSON text area starts

    @property
    def has_errors(self) -> bool:
        return any(f.error for f in self.fields)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _number_text(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return str(value)


def _simple_type(schema: Mapping[str, Any]) -> str | None:
    declared = schema.get("type")
    if isinstance(declared, list):
        kinds = [t for t in declared if t != "null"]
        declared = kinds[0] if len(kinds) == 1 else None
    if declared in ("string", "number", "integer", "boolean"):
        return str(declared)
    return None


def _type_note(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any JSON"
    declared = schema.get("type")
    if isinstance(declared, list):
        return " or ".join(str(t) for t in declared)
    if isinstance(declared, str):
        return declared
    if "enum" in schema or "const" in schema:
        return "one of the values"
    return "any JSON"


def _field_for(index: int, name: str, schema: Any, required: bool) -> FormField:
    spec: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
    title = spec.get("title")
    description = spec.get("description")
    built = FormField(
        name=name,
        key=FIELD_PREFIX + name,
        id=f"arg-{index}",
        widget="json",
        label=title if isinstance(title, str) and title.strip() else name,
        description=description if isinstance(description, str) else "",
        required=required,
        type_note=_type_note(schema),
    )
    default = spec.get("default")
    has_default = "default" in spec
    choices: list[Any] | None = None
    if isinstance(spec.get("enum"), list):
        choices = list(spec["enum"])
    elif "const" in spec:
        choices = [spec["const"]]
    if choices is not None and 0 < len(choices) <= MAX_ENUM_OPTIONS and all(_scalar(c) for c in choices):
        built.widget = "select"
        built.options = [(str(i), c if isinstance(c, str) else json.dumps(c), c) for i, c in enumerate(choices)]
        if has_default:
            built.value = next((str(i) for i, c in enumerate(choices) if c == default and type(c) is type(default)), "")
        return built
    kind = _simple_type(spec)
    if kind == "string":
        built.widget = "text"
        built.value = default if isinstance(default, str) else ""
        max_length = spec.get("maxLength")
        built.max_length = max_length if isinstance(max_length, int) and not isinstance(max_length, bool) else None
    elif kind in ("number", "integer"):
        built.widget = kind
        built.value = _number_text(default) or ""
        built.minimum = _number_text(spec.get("minimum"))
        built.maximum = _number_text(spec.get("maximum"))
    elif kind == "boolean" and required:
        built.widget = "checkbox"
        built.checked = default is True
    elif kind == "boolean":  # optional: left out unless chosen, so a select with "leave out"
        built.widget = "select"
        built.options = list(BOOLEAN_CHOICES)
        built.value = next((i for i, _text, c in BOOLEAN_CHOICES if default is c), "")
    else:
        built.value = json.dumps(default, indent=2, ensure_ascii=False) if has_default else ""
    return built


def build_form(schema: Any) -> SchemaForm:
    """The form for ``schema`` (a tool's ``inputSchema``), its fields showing their defaults."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        return SchemaForm(
            [], True, "The input schema is not an object with properties: write the arguments as JSON.", {}
        )
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    required_names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    if len(properties) > MAX_FORM_PROPERTIES:
        note = f"The input schema has {len(properties)} properties; forms are made for at most {MAX_FORM_PROPERTIES}."
        return SchemaForm([], True, note + " Write the arguments as JSON.", {})
    fields = [
        _field_for(i, str(name), sub, str(name) in required_names) for i, (name, sub) in enumerate(properties.items())
    ]
    example = {
        str(name): sub["default"] for name, sub in properties.items() if isinstance(sub, Mapping) and "default" in sub
    }
    combinators = [k for k in _TOP_COMBINATORS if k in schema]
    if combinators:
        note = f"The input schema uses {', '.join(combinators)}, which a form of its properties cannot express."
        return SchemaForm(fields, True, note + " The JSON arguments are used unless you choose the form.", example)
    if not fields and schema.get("additionalProperties") is not False:
        note = "The input schema names no properties but accepts any: write the arguments as JSON."
        return SchemaForm(fields, True, note, example)
    return SchemaForm(fields, False, None, example)


class FormInputError(ValueError):
    """The form's arguments cannot be read (a field's value, or the raw JSON): a form error."""


def _text(form: Mapping[str, Any], key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _read_json(text: str, limits: Limits) -> Any:
    try:
        return loads(text, limits)
    except JsonStructureError as exc:
        raise FormInputError(str(exc)) from None
    except ValueError as exc:
        raise FormInputError(f"not valid JSON ({exc})") from None


def _number(raw: str, integer: bool) -> int | float:
    text = raw.strip()
    try:
        return int(text)
    except ValueError:
        if integer:
            raise FormInputError(f"{text!r} is not a whole number") from None
    try:
        number = float(text)
    except ValueError:
        raise FormInputError(f"{text!r} is not a number") from None
    if not math.isfinite(number):
        raise FormInputError(f"{text!r} is not a finite number")
    return number


def read_fields(form: SchemaForm, submitted: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The arguments the generated form's fields hold. Each field shows what was sent (for the
    page shown again); a field that cannot be read, or a required one left empty, gets its
    ``error`` and is left out."""
    arguments: dict[str, Any] = {}
    for item in form.fields:
        item.error = None
        raw = _text(submitted, item.key)
        item.value = raw
        try:
            if item.widget == "checkbox":
                item.checked = raw != ""
                arguments[item.name] = item.checked
            elif item.widget == "select":
                if raw == "":
                    _left_out(item)
                    continue
                values = {index: value for index, _label, value in item.options}
                if raw not in values:
                    raise FormInputError("choose one of the listed values")
                arguments[item.name] = values[raw]
            elif item.widget in ("number", "integer"):
                if raw.strip() == "":
                    _left_out(item)
                    continue
                arguments[item.name] = _number(raw, item.widget == "integer")
            elif item.widget == "text":
                item.send_empty = _text(submitted, item.empty_key) != ""
                if raw == "" and not item.send_empty:
                    _left_out(item)
                    continue
                arguments[item.name] = raw
            else:
                if raw.strip() == "":
                    _left_out(item)
                    continue
                arguments[item.name] = _read_json(raw, limits)
        except FormInputError as exc:
            item.error = str(exc)
    return arguments


def _left_out(item: FormField) -> None:
    """A field left empty is not sent; a required one is a form error saying what to do."""
    if item.required:
        raise FormInputError(_REQUIRED[item.widget])


def read_raw_json(text: str, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The raw JSON text area's arguments: one JSON object (empty text: no arguments)."""
    if text.strip() == "":
        return {}
    try:
        value = _read_json(text, limits)
    except FormInputError as exc:
        raise FormInputError(f"The JSON arguments: {exc}") from None
    if not isinstance(value, dict):
        raise FormInputError(f"The JSON arguments must be an object ({{...}}), not {_json_kind(value)}")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    return "a number"
