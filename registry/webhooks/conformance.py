"""Built-in hooks behind the ``seed_data/conformance`` bundle: the tools the official MCP conformance
suite (``@modelcontextprotocol/conformance``) calls, with the behaviour its reference server has.

Each tool in the bundle points at ``builtin://conformance-<what>``. The tools that need the user
or the model mid-call (sampling, elicitation, roots) are ordinary input-asking hooks (see
:mod:`.input_required`): they answer ``{"input_required": ...}`` and are called again with the
answers. The server does the rest exactly as for any webhook: a session-era client is sent the
requests on its session, a 2026-07-28 client gets an ``InputRequiredResult`` and retries.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ._types import JSONObject
from .builtin import HookContext, HookError, builtin
from .results import text_result

#: A 1x1 red pixel (the suite's reference image).
PNG_1X1_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
#: A 44-byte WAV header with a 2-byte data chunk (the suite's reference audio).
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

#: Pause between the notifications of the logging and progress tools, as in the reference server.
STEP_DELAY_S = 0.05


def _image() -> JSONObject:
    return {"type": "image", "data": PNG_1X1_BASE64, "mimeType": "image/png"}


@builtin("conformance-simple-text")
async def simple_text(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return text_result("This is a simple text response for testing.")


@builtin("conformance-image")
async def image_content(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return {"content": [_image()]}


@builtin("conformance-audio")
async def audio_content(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return {"content": [{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]}


@builtin("conformance-embedded-resource")
async def embedded_resource(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    resource = {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }
    return {"content": [{"type": "resource", "resource": resource}]}


@builtin("conformance-mixed-content")
async def mixed_content(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    resource = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    }
    return {
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            _image(),
            {"type": "resource", "resource": resource},
        ]
    }


@builtin("conformance-logging")
async def with_logging(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    await ctx.log("info", "Tool execution started")
    await asyncio.sleep(STEP_DELAY_S)
    await ctx.log("info", "Tool processing data")
    await asyncio.sleep(STEP_DELAY_S)
    await ctx.log("info", "Tool execution completed")
    return text_result("Tool with logging executed successfully")


@builtin("conformance-progress")
async def with_progress(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    for step, value in enumerate((0, 50, 100)):
        if step:
            await asyncio.sleep(STEP_DELAY_S)
        await ctx.progress(value, 100, f"Completed step {value} of 100")
    return text_result("Progress reported: 0, 50 and 100 of 100")


@builtin("conformance-error")
async def error_handling(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    raise HookError("This tool intentionally returns an error for testing")


def _sampling_request(text: str, max_tokens: int = 100) -> JSONObject:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
    }


def _elicitation_request(message: str, properties: JSONObject, required: list[str]) -> JSONObject:
    schema: JSONObject = {"type": "object", "properties": properties, "required": required}
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


_ROOTS_REQUEST: JSONObject = {"method": "roots/list", "params": {}}


def _sampled_text(answer: JSONObject) -> str:
    content = answer.get("content")
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return "No response"


def _elicited(answer: JSONObject) -> str:
    content = answer.get("content")
    return f"action={answer.get('action')}, content={json.dumps(content or {}, separators=(',', ':'))}"


@builtin("conformance-sampling")
async def sampling(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_sampling``: asks the client's model, answers ``LLM response: <its text>``."""
    answer = ctx.response("sample")
    if answer is None:
        prompt = arguments.get("prompt")
        text = prompt if isinstance(prompt, str) else "Test prompt for sampling"
        return ctx.input_required({"sample": _sampling_request(text)})
    return text_result(f"LLM response: {_sampled_text(answer)}")


@builtin("conformance-elicitation")
async def elicitation(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_elicitation``: asks the user for a username and an email address."""
    answer = ctx.response("user")
    if answer is None:
        message = arguments.get("message")
        properties = {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        }
        text = message if isinstance(message, str) and message else "Please provide your information"
        return ctx.input_required({"user": _elicitation_request(text, properties, ["username", "email"])})
    return text_result(f"User response: {_elicited(answer)}")


@builtin("conformance-elicitation-defaults")
async def elicitation_defaults(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_elicitation_sep1034_defaults``: a form whose every field has a default (SEP-1034)."""
    answer = ctx.response("form")
    if answer is None:
        properties = {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        }
        message = "Please review and update the form fields with defaults"
        return ctx.input_required({"form": _elicitation_request(message, properties, [])})
    return text_result(f"Elicitation completed: {_elicited(answer)}")


def _choices(prefix: str, titles: tuple[str, ...]) -> list[JSONObject]:
    return [{"const": f"{prefix}{n}", "title": title} for n, title in enumerate(titles, start=1)]


@builtin("conformance-elicitation-enums")
async def elicitation_enums(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_elicitation_sep1330_enums``: the five enum shapes of SEP-1330."""
    answer = ctx.response("form")
    if answer is None:
        options = ["option1", "option2", "option3"]
        properties = {
            "untitledSingle": {"type": "string", "description": "Select one option", "enum": options},
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": _choices("value", ("First Option", "Second Option", "Third Option")),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": options},
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {"anyOf": _choices("value", ("First Choice", "Second Choice", "Third Choice"))},
            },
        }
        message = "Please select options from the enum fields"
        return ctx.input_required({"form": _elicitation_request(message, properties, [])})
    return text_result(f"Elicitation completed: {_elicited(answer)}")


# ------------------------------------------------------------------ 2026-07-28 fixtures

_NAME_REQUEST = _elicitation_request("What is your name?", {"name": {"type": "string"}}, ["name"])


@builtin("conformance-missing-capability")
async def missing_capability(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_missing_capability``: cannot proceed without sampling, whatever the client declared
    (the server refuses it to a client without the capability: -32021)."""
    answer = ctx.response("sample")
    if answer is None:
        return ctx.input_required({"sample": _sampling_request("Say something")})
    return text_result(f"LLM response: {_sampled_text(answer)}")


@builtin("conformance-streaming-elicitation")
async def streaming_elicitation(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_streaming_elicitation``: reports progress, then asks the user (never a request on the
    response stream in 2026-07-28: an InputRequiredResult)."""
    await ctx.progress(0, 1, "about to ask")
    answer = ctx.response("user_name")
    if answer is None:
        return ctx.input_required({"user_name": _NAME_REQUEST})
    return text_result(f"Elicitation completed: {_elicited(answer)}")


@builtin("conformance-irr-elicitation")
async def irr_elicitation(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """``test_input_required_result_elicitation``: ``Hello, <name>!`` once ``user_name`` is answered."""
    answer = ctx.response("user_name")
    content = answer.get("content") if answer is not None else None
    if answer is None or not isinstance(content, dict) or not isinstance(content.get("name"), str):
        return ctx.input_required({"user_name": _NAME_REQUEST})
    return text_result(f"Hello, {content['name']}!")


@builtin("conformance-irr-sampling")
async def irr_sampling(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    answer = ctx.response("capital_question")
    if answer is None:
        return ctx.input_required({"capital_question": _sampling_request("What is the capital of France?")})
    return text_result(f"The model said: {_sampled_text(answer)}")


@builtin("conformance-irr-list-roots")
async def irr_list_roots(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    answer = ctx.response("client_roots")
    roots = answer.get("roots") if answer is not None else None
    if not isinstance(roots, list):
        return ctx.input_required({"client_roots": _ROOTS_REQUEST})
    uris = [str(r.get("uri")) for r in roots if isinstance(r, dict)]
    return text_result(f"Client roots: {', '.join(uris) or '(none)'}")


@builtin("conformance-irr-request-state")
async def irr_request_state(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """Asks for a confirmation and keeps a state of its own, checked on the retry (``state-ok``)."""
    answer = ctx.response("confirm")
    if answer is None or ctx.state != "awaiting-confirmation":
        confirm = _elicitation_request("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
        return ctx.input_required({"confirm": confirm}, state="awaiting-confirmation")
    return text_result(f"state-ok: confirmation {_elicited(answer)}")


@builtin("conformance-irr-multiple-inputs")
async def irr_multiple_inputs(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    requests = {
        "user_name": _NAME_REQUEST,
        "greeting": _sampling_request("Generate a greeting", 50),
        "client_roots": _ROOTS_REQUEST,
    }
    missing = {key: request for key, request in requests.items() if ctx.response(key) is None}
    if missing:
        return ctx.input_required(missing, state="multiple-inputs")
    return text_result("Received all inputs: user_name, greeting, client_roots")


@builtin("conformance-irr-multi-round")
async def irr_multi_round(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """Two rounds of questions, each with its own state, then the result."""
    if ctx.state == "round-2" and ctx.response("step2") is not None:
        return text_result("Completed both rounds")
    if ctx.state == "round-1" and ctx.response("step1") is not None:
        step2 = _elicitation_request("Step 2: confirm", {"confirm": {"type": "boolean"}}, ["confirm"])
        return ctx.input_required({"step2": step2}, state="round-2")
    step1 = _elicitation_request("Step 1: what is your name?", {"name": {"type": "string"}}, ["name"])
    return ctx.input_required({"step1": step1}, state="round-1")


@builtin("conformance-irr-capabilities")
async def irr_capabilities(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    """Asks only for what the client can answer (``client_capabilities``): a name if it can elicit,
    a model's suggestion if it can sample."""
    requests: JSONObject = {}
    if "elicitation" in ctx.client_capabilities and ctx.response("user_name") is None:
        requests["user_name"] = _NAME_REQUEST
    if "sampling" in ctx.client_capabilities and ctx.response("suggestion") is None:
        requests["suggestion"] = _sampling_request("Suggest a name")
    if requests:
        return ctx.input_required(requests)
    return text_result("Done with the inputs this client could give")


# ------------------------------------------------------------------ change triggers

#: Hidden fixture entries the trigger tools publish and archive again: a real catalog change, so
#: the normal change feed notifies every open stream and listener.
TRIGGER_TOOL: JSONObject = {
    "name": "conformance_change_marker",
    "description": "Published and archived again by test_trigger_tool_change",
    "inputSchema": {"type": "object", "properties": {}},
    "webhook": {"url": "builtin://conformance-simple-text"},
}
TRIGGER_PROMPT: JSONObject = {
    "name": "conformance_change_marker",
    "description": "Published and archived again by test_trigger_prompt_change",
    "template": "A marker prompt.",
}
_TRIGGER_ACTOR = "conformance-trigger"


def _flip(catalog: Any, kind: str, spec: JSONObject) -> None:
    """Show the marker entry, then hide it again: two changes to every list it is in."""
    from registry.catalog.errors import NotFound
    from registry.catalog.values import WriteOptions

    name = spec["name"]
    try:
        catalog.get(kind, name)
    except NotFound:
        catalog.create(kind, spec, WriteOptions(actor=_TRIGGER_ACTOR))
    else:
        catalog.set_archived(kind, name, False, WriteOptions(actor=_TRIGGER_ACTOR))
    catalog.set_archived(kind, name, True, WriteOptions(actor=_TRIGGER_ACTOR))


async def _trigger(ctx: HookContext, kind: str, spec: JSONObject) -> JSONObject:
    catalog = getattr(ctx.services, "catalog", None)
    if catalog is None:
        raise HookError("this hook changes the catalog, and was called without one")
    await asyncio.to_thread(_flip, catalog, kind, spec)
    return text_result(f"The {kind} list changed")


@builtin("conformance-trigger-tool-change")
async def trigger_tool_change(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return await _trigger(ctx, "tool", TRIGGER_TOOL)


@builtin("conformance-trigger-prompt-change")
async def trigger_prompt_change(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return await _trigger(ctx, "prompt", TRIGGER_PROMPT)


@builtin("conformance-json-schema-2020-12")
async def json_schema_2020_12(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return text_result(f"JSON Schema 2020-12 tool called with: {json.dumps(arguments)}")
