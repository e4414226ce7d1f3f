"""Built-in hooks behind the ``seed_data/conformance`` bundle: the tools the official MCP conformance
suite (``@modelcontextprotocol/conformance``) calls, with the behaviour its reference server has.

Each tool in the bundle points at ``builtin://conformance-<what>``. The tools that need a
server-to-client request in the middle of the call (sampling, elicitation) answer with an
``isError`` result for now: the registry does not send such requests yet.
"""

from __future__ import annotations

import asyncio
import json

from ._types import JSONObject
from .builtin import HookContext, HookError, builtin
from .results import error_result, text_result

#: A 1x1 red pixel (the suite's reference image).
PNG_1X1_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
#: A 44-byte WAV header with a 2-byte data chunk (the suite's reference audio).
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

#: Pause between the notifications of the logging and progress tools, as in the reference server.
STEP_DELAY_S = 0.05

SERVER_TO_CLIENT_UNSUPPORTED = (
    "{what} needs a server-to-client request ({method}) in the middle of a tool call, "
    "which mcp-registry does not support yet."
)


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


@builtin("conformance-sampling")
async def sampling(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return error_result(SERVER_TO_CLIENT_UNSUPPORTED.format(what="Sampling", method="sampling/createMessage"))


@builtin("conformance-elicitation")
async def elicitation(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return error_result(SERVER_TO_CLIENT_UNSUPPORTED.format(what="Elicitation", method="elicitation/create"))


@builtin("conformance-json-schema-2020-12")
async def json_schema_2020_12(arguments: JSONObject, ctx: HookContext) -> JSONObject:
    return text_result(f"JSON Schema 2020-12 tool called with: {json.dumps(arguments)}")
