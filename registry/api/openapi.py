"""``/openapi.json``: FastAPI's document, completed into the admin API's contract.

FastAPI documents what it parses and returns. This adds what it cannot know:

* **Entry bodies.** ``POST``/``PUT``/``PATCH`` bodies are parsed by the catalog service (which
  validates them with the server's limits and names each field and limit it refuses), so the
  routes take them as JSON objects; here they reference their named schemas (``PromptWrite``,
  ``ToolPatch``, ...; ``registry/api/models.py``), which are added here too.
* **Entry names per kind.** One set of handlers serves the three kinds (``registry/api/kinds.py``);
  each kind's ``{name}`` says what it names, with an example from the demo bundle.
* **The server's limits.** Request fields carry the bounds this server enforces
  (``maxLength`` of a title is ``REGISTRY_LIMIT_TITLE_CHARS``, and so on), read from its settings.
* **Links** from each create to the operations on the entry it made, and from a created token to
  its revocation, so a client (or a stateful test generator) can follow them with real names.
* **Cleanup.** No FastAPI ``HTTPValidationError`` (errors are problem+json, documented per
  operation), no ``"default": null`` on fields that cannot be null.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from registry.api import models
from registry.limits import DEFAULT_LIMITS, Limits
from registry.runtime import registry_of

REF_PREFIX = "#/components/schemas/"

#: The named schemas of entry request bodies, per collection: (create, full replace, merge patch).
BODY_MODELS: dict[str, tuple[type[BaseModel], type[BaseModel], type[BaseModel]]] = {
    "prompts": (models.PromptWrite, models.PromptReplace, models.PromptPatch),
    "resources": (models.ResourceWrite, models.ResourceReplace, models.ResourcePatch),
    "tools": (models.ToolWrite, models.ToolReplace, models.ToolPatch),
}
#: Schemas no operation declares but the contract includes.
EXTRA_MODELS: tuple[type[BaseModel], ...] = (models.Problem,)
KINDS = {"prompts": "Prompt", "resources": "Resource", "tools": "Tool"}
#: A name per kind for the reference page to prefill: entries of the demo bundle (the first run's catalog).
DEMO_NAMES = {"prompt": "summarize", "resource": "server-info", "tool": "echo"}


def body_ref(model: type[BaseModel]) -> dict[str, str]:
    """A ``$ref`` to the schema of ``model`` (added to the document by :func:`install`)."""
    return {"$ref": REF_PREFIX + model.__name__}


def install(app: FastAPI, limits: Limits | None = None) -> None:
    """Make ``app.openapi()`` return the completed document (built once, then cached).

    ``limits``: the bounds to publish; by default the running registry's settings', else the defaults.
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = FastAPI.openapi(app)
            try:
                applied = limits or registry_of(app).settings.limits
            except AttributeError:  # an app built without a registry
                applied = DEFAULT_LIMITS
            complete(document, applied)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def complete(document: dict[str, Any], limits: Limits) -> None:
    components = document.setdefault("components", {}).setdefault("schemas", {})
    request_side = _add_models(components, [m for bodies in BODY_MODELS.values() for m in bodies])
    _add_models(components, EXTRA_MODELS, rename=False)
    for name in request_side:
        _apply_limits(components[name], limits)
        _apply_formats(components[name])
    _discriminators_are_required(components)
    _describe_free_form(components)
    _restore_example_nulls(components)
    _bound_search(document, limits)
    _entries_per_kind(document)
    _patch_accepts_json(document)
    _parameters_are_never_null(document)
    _add_links(document)
    _drop_fastapi_validation_error(document)
    _drop_null_defaults(document)


# ------------------------------------------------------------------ components


def _add_models(
    components: dict[str, Any], model_types: Iterable[type[BaseModel]], *, rename: bool = True
) -> list[str]:
    """Add the schemas of ``model_types`` (and what they reference) to ``components``.

    Nested schemas whose name FastAPI already used for a response (``PromptArgument`` in an
    entry's ``spec``) are added as ``<name>-Input``: request schemas carry the server's limits,
    which must not constrain what responses show (versions saved under higher limits). Returns
    the names added.
    """
    keys = [(model, "validation") for model in model_types]
    _, generated = models_json_schema(keys, ref_template=REF_PREFIX + "{model}")  # type: ignore[arg-type]
    definitions: dict[str, Any] = generated.get("$defs", {})
    tops = {model.__name__ for model in model_types}
    renames = {name: f"{name}-Input" for name in definitions if rename and name in components and name not in tops}
    added = []
    for name, schema in definitions.items():
        target = renames.get(name, name)
        components[target] = _rewrite_refs(schema, renames)
        added.append(target)
    return added


def _rewrite_refs(node: Any, renames: dict[str, str]) -> Any:
    """``node`` with references to renamed schemas (``$ref``, discriminator mappings) updated."""
    if isinstance(node, dict):
        return {key: _rewrite_refs(value, renames) for key, value in node.items()}
    if isinstance(node, list):
        return [_rewrite_refs(item, renames) for item in node]
    if isinstance(node, str) and node.startswith(REF_PREFIX):
        name = node.removeprefix(REF_PREFIX)
        return REF_PREFIX + renames.get(name, name)
    return node


# ------------------------------------------------------------------ limits


def _string_bounds(limits: Limits) -> dict[str, int]:
    return {
        "title": limits.title_chars,
        "description": limits.description_chars,
        "change_note": limits.change_note_chars,
        "text": limits.template_chars,
        "template": limits.template_chars,
        "data": limits.blob_chars,
        "blob": limits.blob_chars,
        "uri": limits.uri_chars,
        "uriTemplate": limits.uri_chars,
        "url": limits.uri_chars,
        "default": limits.argument_chars,
    }


def _branches(schema: dict[str, Any], json_type: str) -> Iterator[dict[str, Any]]:
    """``schema`` itself or its ``anyOf`` branches that have type ``json_type``."""
    if schema.get("type") == json_type:
        yield schema
    for branch in schema.get("anyOf", []):
        if isinstance(branch, dict) and branch.get("type") == json_type:
            yield branch


def _apply_limits(schema: dict[str, Any], limits: Limits) -> None:
    """Publish the bounds the catalog service enforces on a request schema's fields."""
    strings = _string_bounds(limits)
    counts = {
        "tags": limits.tags,
        "arguments": limits.prompt_arguments,
        "messages": limits.prompt_messages,
        "samples": limits.prompt_samples,
        "enum": None,
    }
    for name, prop in schema.get("properties", {}).items():
        if not isinstance(prop, dict):
            continue
        if name in strings:
            for branch in _branches(prop, "string"):
                branch["maxLength"] = strings[name]
        if name in counts:
            for branch in _branches(prop, "array"):
                if counts[name] is not None:
                    branch["maxItems"] = counts[name]
                if name == "enum" and isinstance(branch.get("items"), dict):
                    branch["items"]["maxLength"] = limits.argument_chars
        if name == "headers":
            for branch in _branches(prop, "object"):
                branch["maxProperties"] = limits.webhook_headers


#: What the catalog service demands of URLs and URIs in a save, by field, as JSON Schema patterns
#: (unanchored patterns match anywhere, as the service's checks do).
_URL_PATTERNS = {
    "WebhookSpec-Input": {"url": "^(https?|builtin)://"},
    "WebhookPatch": {"url": "^(https?|builtin)://"},
    "ResourceWrite": {"url": "^https?://", "uri": ":"},
    "ResourceReplace": {"url": "^https?://", "uri": ":"},
}


def _apply_formats(schema: dict[str, Any]) -> None:
    title = schema.get("title", "")
    for name, pattern in _URL_PATTERNS.get(title, {}).items():
        prop = schema.get("properties", {}).get(name)
        for branch in _branches(prop, "string") if isinstance(prop, dict) else ():
            branch["pattern"] = pattern


def _discriminators_are_required(components: dict[str, Any]) -> None:
    """Content types are told apart by ``type``, which pydantic publishes as optional when it has a
    default (``TextContent``); the parser needs it, so the schema says so."""
    for schema in list(components.values()):
        for node in _walk(schema):
            discriminator = node.get("discriminator")
            if not isinstance(discriminator, dict):
                continue
            prop = discriminator.get("propertyName")
            for ref in discriminator.get("mapping", {}).values():
                target = components.get(str(ref).removeprefix(REF_PREFIX))
                if target is not None and prop not in target.setdefault("required", []):
                    target["required"].append(prop)


#: Members whose value is any JSON object by nature, and what it holds.
_FREE_FORM = {
    "inputSchema": "a JSON Schema 2020-12 (`type: object`) for the tool's arguments",
    "outputSchema": "a JSON Schema 2020-12 (`type: object`) for the tool's structuredContent",
    "annotations": "annotations (any JSON object)",
}


def _restore_example_nulls(components: dict[str, Any]) -> None:
    """FastAPI drops every ``null`` from the document it builds, examples included; a response
    example then lacks its required-but-null members (``"change_note": null``). Put them back
    (for the models of every admin-API module: ``registry.api.models`` and the routers' own)."""
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("registry.api.") and m is not None]
    for value in [v for module in modules for v in vars(module).values()]:
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__name__ in components:
            extra = value.model_config.get("json_schema_extra")
            if isinstance(extra, dict) and "examples" in extra:
                components[value.__name__]["examples"] = copy.deepcopy(extra["examples"])


def _describe_free_form(components: dict[str, Any]) -> None:
    """The catalog's definitions say in comments what their free-form members hold; say it here."""
    for schema in components.values():
        for name, prop in schema.get("properties", {}).items():
            if name in _FREE_FORM and isinstance(prop, dict) and not prop.get("description"):
                prop["description"] = _FREE_FORM[name]


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _bound_search(document: dict[str, Any], limits: Limits) -> None:
    """``q`` on listings (``REGISTRY_LIMIT_SEARCH_CHARS``)."""
    for operation in _each_operation(document):
        for parameter in operation.get("parameters", []):
            if parameter.get("name") == "q" and parameter.get("in") == "query":
                for branch in _branches(parameter.get("schema", {}), "string"):
                    branch["maxLength"] = limits.search_chars


# ------------------------------------------------------------------ parameters and bodies


def _each_operation(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict):
                yield operation


def _entries_per_kind(document: dict[str, Any]) -> None:
    """Each kind's entry bodies as its named schemas, and its ``{name}`` parameters described."""
    operations = _operations(document)
    for collection, title in KINDS.items():
        for verb, model in zip(("create", "update", "patch"), BODY_MODELS[collection], strict=True):
            for media in operations.get(verb + title, {}).get("requestBody", {}).get("content", {}).values():
                media["schema"] = body_ref(model)
        kind = title.lower()
        for path, path_item in document.get("paths", {}).items():
            if not path.startswith(f"/api/v1/{collection}/{{name}}"):
                continue
            for operation in path_item.values():
                for parameter in operation.get("parameters", []):
                    if parameter["name"] == "name" and parameter["in"] == "path":
                        schema, described = parameter["schema"], f"the {kind}'s name"
                        schema.update(description=described, examples=[DEMO_NAMES[kind]], title=schema.pop("title"))
                        parameter["description"] = described


def _patch_accepts_json(document: dict[str, Any]) -> None:
    """Merge patches are also accepted as ``application/json`` (what most clients send)."""
    for operation in _each_operation(document):
        content = operation.get("requestBody", {}).get("content", {})
        if "application/merge-patch+json" in content:
            content.setdefault("application/json", copy.deepcopy(content["application/merge-patch+json"]))


def _parameters_are_never_null(document: dict[str, Any]) -> None:
    """An optional query or header parameter is absent, never null: ``anyOf: [string, null]`` from
    ``str | None`` becomes the string schema."""
    for operation in _each_operation(document):
        for parameter in operation.get("parameters", []):
            schema = parameter.get("schema", {})
            branches = [b for b in schema.get("anyOf", []) if b != {"type": "null"}]
            if "anyOf" in schema and len(branches) == 1:
                del schema["anyOf"]
                schema.update(branches[0])


# ------------------------------------------------------------------ links


def _entry_links(collection: str) -> dict[str, Any]:
    kind = KINDS[collection]
    name = {"name": "$response.body#/name"}
    version = "$response.body#/version"
    #: A save on top of what was just read: its ETag as the precondition.
    conditional = {**name, "header.if-match": "$response.header.ETag"}
    links: dict[str, Any] = {
        f"Get{kind}": {"operationId": f"get{kind}", "parameters": name, "description": "read what was saved"},
        f"Update{kind}": {
            "operationId": f"update{kind}",
            "parameters": conditional,
            "requestBody": {"name": "$response.body#/name"},
            "description": "save a new version",
        },
        f"Patch{kind}": {
            "operationId": f"patch{kind}",
            "parameters": conditional,
            "description": "edit part of it",
        },
        f"Archive{kind}": {"operationId": f"archive{kind}", "parameters": name, "description": "archive it"},
        f"Restore{kind}": {"operationId": f"restore{kind}", "parameters": name, "description": "restore it"},
        f"List{kind}Versions": {"operationId": f"list{kind}Versions", "parameters": name},
        f"Get{kind}Usage": {"operationId": f"get{kind}Usage", "parameters": name, "description": "who uses it"},
        f"Get{kind}Version": {
            "operationId": f"get{kind}Version",
            "parameters": {**name, "number": version},
            "description": "the version just saved",
        },
        f"Restore{kind}Version": {
            "operationId": f"restore{kind}Version",
            "parameters": {**name, "number": version, "header.if-match": "$response.header.ETag"},
            "description": "restore the version just saved (as the newest: a no-op until later saves)",
        },
        f"Diff{kind}Versions": {
            "operationId": f"diff{kind}Versions",
            "parameters": {**name, "from": version, "to": version},
        },
        f"Move{kind}Label": {
            "operationId": f"move{kind}Label",
            "parameters": {**name, "label": "staging"},
            "requestBody": {"version": version},
            "description": "point `staging` at the version just saved",
        },
        f"Delete{kind}Label": {
            "operationId": f"delete{kind}Label",
            "parameters": {**name, "label": "production"},
            "description": "withdraw it from agents served `production`",
        },
        f"Move{kind}Team": {
            "operationId": f"move{kind}Team",
            "parameters": name,
            "requestBody": {"team": None},
            "description": "make it global (or move it to a team)",
        },
    }
    if collection == "prompts":
        links["RenderPrompt"] = {
            "operationId": "renderPrompt",
            "parameters": name,
            "requestBody": {"arguments": {}, "version": version},
            "description": "preview the version just saved",
        }
    links[f"Check{kind}"] = {
        "operationId": f"check{kind}",
        "parameters": {**name, "version": version},
        "description": "the pre-publish checks of the version just saved",
    }
    if collection == "tools":
        links["TestTool"] = {
            "operationId": "testTool",
            "parameters": name,
            "requestBody": {"arguments": {}, "version": version},
            "description": "run the version just saved",
        }
    return links


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for op in _each_operation(document) if "operationId" in op}


def _add_links(document: dict[str, Any]) -> None:
    operations = _operations(document)
    for collection, kind in KINDS.items():
        create = operations.get(f"create{kind}")
        if create is None:
            continue
        links = {name: link for name, link in _entry_links(collection).items() if link["operationId"] in operations}
        for status in ("201", "200"):  # created, and the answers that show the entry after a save
            response = create.get("responses", {}).get(status)
            if response is not None:
                response["links"] = copy.deepcopy(links)
        for operation_id in (f"update{kind}", f"patch{kind}", f"restore{kind}"):
            operation = operations.get(operation_id)
            response = operation.get("responses", {}).get("200") if operation else None
            if response is not None:
                response["links"] = {
                    name: copy.deepcopy(link)
                    for name, link in links.items()
                    if name.startswith((f"Get{kind}", f"Diff{kind}", f"Move{kind}", "Render", "Test"))
                }
    create_team = operations.get("createTeam")
    if create_team is not None:
        team = {"team": "$response.body#/name"}
        create_team["responses"]["201"]["links"] = {
            f"{verb.capitalize()}Team": {"operationId": f"{verb}Team", "parameters": team, "description": what}
            for verb, what in (("get", "read it"), ("update", "retitle it"), ("delete", "delete it"))
            if f"{verb}Team" in operations
        }
    opened = operations.get("openChangeRequest")
    if opened is not None:
        ident = {"request_id": "$response.body#/id"}
        opened["responses"]["201"]["links"] = {
            operation_id[0].upper() + operation_id[1:]: {"operationId": operation_id, "parameters": ident}
            for operation_id in (
                "getChangeRequest",
                "submitChangeRequest",
                "approveChangeRequest",
                "rejectChangeRequest",
                "withdrawChangeRequest",
                "publishChangeRequest",
            )
            if operation_id in operations
        }
    create_token = operations.get("createToken")
    if create_token is not None and "revokeToken" in operations:
        create_token["responses"]["201"]["links"] = {
            "RevokeToken": {
                "operationId": "revokeToken",
                "parameters": {"token_id": "$response.body#/id"},
                "description": "revoke the token just created",
            }
        }
        if "setTokenTeams" in operations:
            create_token["responses"]["201"]["links"]["SetTokenTeams"] = {
                "operationId": "setTokenTeams",
                "parameters": {"token_id": "$response.body#/id"},
                "description": "change the teams of the token just created",
            }

    subscribed = operations.get("createEventSubscription")
    if subscribed is not None:
        ident = {"subscription_id": "$response.body#/id"}
        subscribed["responses"]["201"]["links"] = {
            operation_id[0].upper() + operation_id[1:]: {"operationId": operation_id, "parameters": ident}
            for operation_id in (
                "getEventSubscription",
                "updateEventSubscription",
                "deleteEventSubscription",
                "rotateEventSubscriptionSecret",
                "listEventDeliveries",
            )
            if operation_id in operations
        }


# ------------------------------------------------------------------ cleanup


def _drop_fastapi_validation_error(document: dict[str, Any]) -> None:
    """FastAPI adds ``HTTPValidationError`` to operations that declare no 422; every admin operation
    declares its problem+json 422, so what remains is unused."""
    schemas = document.get("components", {}).get("schemas", {})
    text = repr(document.get("paths", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        if REF_PREFIX + name not in text:
            schemas.pop(name, None)


def _drop_null_defaults(node: Any) -> None:
    """``"default": null`` on a field whose schema does not allow null (``SkipJsonSchema[None]``
    fields: optional, but never null)."""
    if isinstance(node, dict):
        if "default" in node and node["default"] is None and not _allows_null(node):
            del node["default"]
        for value in node.values():
            _drop_null_defaults(value)
    elif isinstance(node, list):
        for item in node:
            _drop_null_defaults(item)


def _allows_null(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(isinstance(b, dict) and _allows_null(b) for b in schema.get("anyOf", []) + schema.get("oneOf", []))
