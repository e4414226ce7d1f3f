"""builtin:// hooks: dispatched in-process, same payload, callbacks and result mapping as HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from registry.webhooks import (
    BUILTINS,
    HookContext,
    HookError,
    OutboundClient,
    WebhookTarget,
    builtin,
    builtin_name,
    call_webhook,
    make_guarded_client,
    text_result,
)


@pytest_asyncio.fixture
async def no_network_client() -> AsyncIterator[OutboundClient]:
    """Built-ins must not touch the client; this one could not reach anything local anyway."""
    async with make_guarded_client((), timeout=1.0) as client:
        yield client


@pytest.fixture
def temporary_hooks() -> Iterator[list[str]]:
    """Names registered by a test, removed afterwards so the global registry stays clean."""
    names: list[str] = []
    yield names
    for name in names:
        BUILTINS.unregister(name)


async def _call(url: str, payload: dict[str, Any], client: OutboundClient, **kwargs: Any) -> dict[str, Any]:
    return await call_webhook(WebhookTarget(url=url), payload, client=client, **kwargs)


async def test_echo(no_network_client: OutboundClient) -> None:
    result = await _call("builtin://echo", {"message": "hello"}, no_network_client)
    assert result == {"content": [{"type": "text", "text": "Echo: hello"}], "isError": False}


@pytest.mark.parametrize(
    ("a", "b", "text"),
    [
        (42, 58, "42 + 58 = 100"),
        (1.5, 2, "1.5 + 2 = 3.5"),
        (0.5, 0.5, "0.5 + 0.5 = 1"),
        (2.0, 3, "2 + 3 = 5"),
        (-1, 0.25, "-1 + 0.25 = -0.75"),
        (0.1, 0.2, "0.1 + 0.2 = 0.30000000000000004"),
    ],
)
async def test_add(no_network_client: OutboundClient, a: float, b: float, text: str) -> None:
    result = await _call("builtin://add", {"a": a, "b": b}, no_network_client)
    assert result == {"content": [{"type": "text", "text": text}], "isError": False}


async def test_echo_text_returns_the_input_verbatim(no_network_client: OutboundClient) -> None:
    text = "  multi\nline ✓ text  "
    result = await _call("builtin://echo_text", {"text": text}, no_network_client)
    assert result == {"content": [{"type": "text", "text": text}], "isError": False}


@pytest.mark.parametrize(
    ("url", "payload", "fragment"),
    [
        ("builtin://echo", {}, "'message' must be a string"),
        ("builtin://add", {"a": 1, "b": "2"}, "'b' must be a number"),
        ("builtin://add", {"a": True, "b": 2}, "'a' must be a number"),
        ("builtin://echo_text", {"text": 3}, "'text' must be a string"),
        ("builtin://nope", {}, "unknown built-in hook 'nope'"),
    ],
)
async def test_bad_calls_are_errors(
    no_network_client: OutboundClient, url: str, payload: dict[str, Any], fragment: str
) -> None:
    result = await _call(url, payload, no_network_client)
    assert result["isError"] is True
    assert fragment in result["content"][0]["text"]


def test_builtin_name() -> None:
    assert builtin_name("builtin://echo") == "echo"
    assert builtin_name("BUILTIN://echo/") == "echo"
    assert builtin_name("https://echo") is None
    assert {"echo", "add", "echo_text"} <= set(BUILTINS.names())


def test_registry_rejects_duplicates_and_bad_names() -> None:
    async def hook(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        return {}

    with pytest.raises(ValueError, match="already registered"):
        BUILTINS.register("echo", hook)
    with pytest.raises(ValueError, match="invalid built-in hook name"):
        BUILTINS.register("Bad Name", hook)


async def test_new_hooks_get_payload_callbacks_and_result_mapping(
    no_network_client: OutboundClient, temporary_hooks: list[str]
) -> None:
    seen: list[Any] = []

    @builtin("test-steps")
    async def steps(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        arguments["mutated"] = True  # must not leak back to the caller's payload
        await ctx.progress(1, 2, "half")
        await ctx.log("notice", {"got": arguments["n"]})
        await ctx.progress(2, 2)
        return {"n": arguments["n"]}  # plain JSON: wrapped like an HTTP answer

    temporary_hooks.append("test-steps")

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", progress, total, message))

    async def on_log(level: str, data: Any) -> None:
        seen.append(("log", level, data))

    payload = {"n": 7}
    result = await _call("builtin://test-steps", payload, no_network_client, on_progress=on_progress, on_log=on_log)
    assert result == {
        "content": [{"type": "text", "text": '{"n": 7}'}],
        "structuredContent": {"n": 7},
        "isError": False,
    }
    assert seen == [("progress", 1, 2, "half"), ("log", "notice", {"got": 7}), ("progress", 2, 2, None)]
    assert payload == {"n": 7}


async def test_hook_failures_are_errors(no_network_client: OutboundClient, temporary_hooks: list[str]) -> None:
    @builtin("test-hook-error")
    async def hook_error(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        raise HookError("the fixture failed on purpose")

    @builtin("test-crash")
    async def crash(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        raise RuntimeError("boom")

    @builtin("test-bad-level")
    async def bad_level(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        await ctx.log("loud", "x")
        return text_result("unreachable")

    @builtin("test-bad-result")
    async def bad_result(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        return {"content": [{"no": "type"}]}

    temporary_hooks.extend(["test-hook-error", "test-crash", "test-bad-level", "test-bad-result"])

    expected = {
        "test-hook-error": "the fixture failed on purpose",
        "test-crash": "built-in hook 'test-crash' failed: RuntimeError: boom",
        "test-bad-level": "invalid log level 'loud'",
        "test-bad-result": "content[0] must be an object with a string 'type'",
    }
    for name, fragment in expected.items():
        result = await _call(f"builtin://{name}", {}, no_network_client)
        assert result["isError"] is True
        assert fragment in result["content"][0]["text"]


async def test_hooks_are_bounded_by_the_timeout_and_cancellable(
    no_network_client: OutboundClient, temporary_hooks: list[str]
) -> None:
    started = asyncio.Event()

    @builtin("test-sleep")
    async def sleep(arguments: dict[str, Any], ctx: HookContext) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(arguments["s"])
        return text_result("woke")

    temporary_hooks.append("test-sleep")

    target = WebhookTarget(url="builtin://test-sleep", timeout_s=0.1)
    result = await call_webhook(target, {"s": 5}, client=no_network_client)
    assert result["isError"] is True and "timed out" in result["content"][0]["text"]

    task = asyncio.create_task(
        call_webhook(WebhookTarget(url="builtin://test-sleep"), {"s": 5}, client=no_network_client)
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
