"""HttpResourceCache against the loopback server: bounded fetches, errors naming no address, a bounded cache."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from registry.limits import Limits
from registry.webhooks import HttpResourceCache, OutboundClient, ResourceFetchError, make_guarded_client

from .conftest import WebhookServer


@dataclass(frozen=True)
class Spec:
    url: str | None
    headers: Mapping[str, str] | None = field(default=None)
    mimeType: str | None = None
    cache_ttl_s: float | None = 60.0


class Refused(Exception):
    """What the MCP layer would make a JSON-RPC error of."""


def _cache(client: OutboundClient, **limits: float) -> HttpResourceCache:
    return HttpResourceCache(lambda: client, Limits(**limits), error=Refused)


async def test_content_is_fetched_typed_and_cached(webhook_server: WebhookServer, client: OutboundClient) -> None:
    cache = _cache(client)
    spec = Spec(webhook_server.url("/plain-object"), mimeType="application/json")
    before = webhook_server.state.hits["/plain-object"]
    for _ in range(3):
        contents = await cache.read("weather://now", spec)
        assert contents[0]["mimeType"] == "application/json"
        assert json.loads(contents[0]["text"]) == {"temperature": 21.5, "unit": "C"}
    assert webhook_server.state.hits["/plain-object"] == before + 1


async def test_headers_are_decrypted_and_sent_but_reserved_ones_are_not(
    webhook_server: WebhookServer, client: OutboundClient
) -> None:
    cache = HttpResourceCache(lambda: client, decrypt=lambda stored: stored.removeprefix("sealed:"))
    spec = Spec(
        webhook_server.url("/inspect"),
        headers={"Authorization": "sealed:Bearer t0k", "Host": "sealed:evil.example", "Accept-Encoding": "sealed:br"},
        cache_ttl_s=0,
    )
    seen = json.loads((await cache.read("inspect://me", spec))[0]["text"])
    assert seen["method"] == "GET"
    assert seen["headers"]["authorization"] == "Bearer t0k"
    assert seen["headers"]["host"] == f"127.0.0.1:{webhook_server.port}"
    assert seen["headers"]["accept-encoding"] == "gzip, deflate"


async def test_cache_keys_include_the_headers(webhook_server: WebhookServer, client: OutboundClient) -> None:
    cache = _cache(client)
    url = webhook_server.url("/inspect")
    first = await cache.read("inspect://shared", Spec(url, headers={"X-Team": "a"}))
    second = await cache.read("inspect://shared", Spec(url, headers={"X-Team": "b"}))
    assert json.loads(first[0]["text"])["headers"]["x-team"] == "a"
    assert json.loads(second[0]["text"])["headers"]["x-team"] == "b"


async def test_the_body_cap_names_its_limit(webhook_server: WebhookServer, client: OutboundClient) -> None:
    cache = _cache(client, http_resource_bytes=1000)
    refusal = re.escape("larger than 1000 bytes (limit REGISTRY_LIMIT_HTTP_RESOURCE_BYTES)")
    for path in ("/big?n=5000", "/big-chunked?n=5000"):
        with pytest.raises(Refused, match=refusal):
            await cache.read("big://one", Spec(webhook_server.url(path), cache_ttl_s=0))


async def test_the_deadline_covers_the_whole_fetch(webhook_server: WebhookServer, client: OutboundClient) -> None:
    cache = _cache(client, http_resource_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(Refused, match=re.escape("longer than 0.3 s (limit REGISTRY_LIMIT_HTTP_RESOURCE_SECONDS)")):
        await cache.read("slow://one", Spec(webhook_server.url("/slow?s=3")))
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(("path", "fragment"), [("/redirect", "HTTP 302"), ("/status/404", "HTTP 404")])
async def test_redirects_and_errors_are_errors_not_content(
    webhook_server: WebhookServer, client: OutboundClient, path: str, fragment: str
) -> None:
    before = webhook_server.state.hits["/plain-object"]
    with pytest.raises(Refused, match=fragment) as info:
        await _cache(client).read("status://one", Spec(webhook_server.url(path)))
    message = str(info.value)
    assert "127.0.0.1" not in message and str(webhook_server.port) not in message and path not in message
    assert "exploded" not in message, "the upstream's error body is not passed on"
    assert webhook_server.state.hits["/plain-object"] == before, "redirects are not followed"


async def test_connection_failures_name_no_address(client: OutboundClient, free_port: int) -> None:
    with pytest.raises(Refused, match="could not connect") as info:
        await _cache(client).read("gone://one", Spec(f"http://127.0.0.1:{free_port}/x"))
    assert "127.0.0.1" not in str(info.value) and str(free_port) not in str(info.value)


async def test_ssrf_refusals_name_no_address(webhook_server: WebhookServer) -> None:
    async with make_guarded_client((), timeout=5.0) as strict:
        cache = HttpResourceCache(lambda: strict)
        with pytest.raises(ResourceFetchError, match=re.escape("refusing to connect to 'localhost' (loopback")) as info:
            await cache.read("inner://one", Spec(webhook_server.url("/canary", host="localhost")))
    assert "127.0.0.1" not in str(info.value)


async def test_the_cache_is_bounded_in_entries_and_bytes(webhook_server: WebhookServer, client: OutboundClient) -> None:
    cache = _cache(client, http_resource_cache_entries=2, http_resource_cache_bytes=3000)
    for n in range(4):
        await cache.read(f"big://{n}", Spec(webhook_server.url("/big?n=100")))
    assert len(cache) == 2
    await cache.read("big://large", Spec(webhook_server.url("/big?n=2000")))
    await cache.read("big://larger", Spec(webhook_server.url("/big?n=2000")))
    assert cache.cached_bytes <= 3000
    await cache.read("big://too-large", Spec(webhook_server.url("/big?n=5000")))
    assert cache.cached_bytes <= 3000


async def test_expired_entries_are_fetched_again(webhook_server: WebhookServer, client: OutboundClient) -> None:
    now = [0.0]
    cache = HttpResourceCache(lambda: client, clock=lambda: now[0])
    spec = Spec(webhook_server.url("/plain-list"), cache_ttl_s=10)
    before = webhook_server.state.hits["/plain-list"]
    await cache.read("list://one", spec)
    now[0] = 9.0
    await cache.read("list://one", spec)
    now[0] = 10.5
    await cache.read("list://one", spec)
    assert webhook_server.state.hits["/plain-list"] == before + 2
