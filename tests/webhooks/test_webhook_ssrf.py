"""SSRF guard: address classification, the save-time URL check and the call-time connect guard."""

from __future__ import annotations

import ipaddress

import pytest

from registry.webhooks import (
    ForbiddenDestination,
    InvalidWebhookURL,
    WebhookTarget,
    call_webhook,
    check_url,
    check_url_sync,
    forbidden_reason,
    is_forbidden_address,
    make_guarded_client,
    parse_networks,
    validate_webhook_url,
    validate_webhook_url_sync,
)

from .conftest import WebhookServer

LOOPBACK = parse_networks("127.0.0.0/8")

# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        # Deprecated site-local (RFC 3879): neither private nor non-global to ``ipaddress``.
        ("fec0::1", "site-local (fec0::/10)"),
        ("feff:ffff::1", "site-local (fec0::/10)"),
        ("100.64.0.1", "carrier-grade NAT (100.64.0.0/10)"),
        ("100.127.255.254", "carrier-grade NAT (100.64.0.0/10)"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        # IPv4-mapped IPv6 is judged as the IPv4 address it is.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::ffff:100.64.0.1", "carrier-grade NAT (100.64.0.0/10)"),
        # IPv4 tunnelled in 6to4 and NAT64 addresses is unwrapped too.
        ("2002:7f00:1::1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
    ],
)
def test_forbidden_addresses(address: str, reason: str) -> None:
    assert forbidden_reason(address) == reason
    assert is_forbidden_address(address)
    assert is_forbidden_address(ipaddress.ip_address(address.split("%")[0]))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert forbidden_reason(address) is None
    assert not is_forbidden_address(address)


def test_allow_list_overrides_classification() -> None:
    allowed = parse_networks("10.0.0.0/8, 127.0.0.0/8")
    assert not is_forbidden_address("10.20.30.40", allowed)
    assert not is_forbidden_address("127.0.0.1", allowed)
    assert not is_forbidden_address("::ffff:127.0.0.1", allowed)  # unwrapped before matching
    assert is_forbidden_address("192.168.0.1", allowed)
    assert is_forbidden_address("::1", allowed)  # IPv6 loopback is not in 127.0.0.0/8
    assert not is_forbidden_address("::1", parse_networks("::1/128"))


def test_parse_networks() -> None:
    assert parse_networks(None) == ()
    assert parse_networks("") == ()
    assert parse_networks(" , ") == ()
    assert parse_networks("10.0.0.0/8, fd00::/8,127.0.0.1/8,192.0.2.7") == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("192.0.2.7/32"),
    )


@pytest.mark.parametrize("value", ["nope", "10.0.0.0/33", "10.0.0.0/8,300.1.1.1/32"])
def test_parse_networks_rejects_invalid_cidrs(value: str) -> None:
    with pytest.raises(ValueError, match="REGISTRY_WEBHOOK_ALLOWED_NETWORKS") as info:
        parse_networks(value)
    assert "invalid network" in str(info.value)


# --------------------------------------------------------------------------- save-time check


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8080/hook",
        "http://[::1]/hook",
        "https://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",  # 127.0.0.1 spelled as an integer
        "http://127.1/",
    ],
)
async def test_check_url_refuses_internal_destinations(url: str) -> None:
    with pytest.raises(ForbiddenDestination) as info:
        await check_url(url, ())
    assert "refusing to connect" in str(info.value)
    with pytest.raises(ForbiddenDestination):
        check_url_sync(url, ())


async def test_forbidden_destination_message_names_host_and_address() -> None:
    with pytest.raises(ForbiddenDestination) as info:
        await check_url("http://localhost:1/secret-path?token=abc", ())
    message = str(info.value)
    assert "'localhost'" in message
    assert "127.0.0.1" in message or "::1" in message
    assert "secret-path" not in message and "token" not in message
    assert info.value.host == "localhost"


async def test_check_url_allows_allow_listed_and_public_literals() -> None:
    await check_url("http://127.0.0.1:9/hook", LOOPBACK)
    check_url_sync("http://127.0.0.1:9/hook", LOOPBACK)
    await check_url("http://localhost:9/hook", parse_networks("127.0.0.0/8,::1/128"))
    await check_url("https://8.8.8.8/hook", ())
    check_url_sync("https://[2606:4700:4700::1111]/hook", ())


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "file:///etc/passwd", "gopher://x/", "http:///nohost", "builtin://echo"]
)
async def test_check_url_rejects_non_http_urls(url: str) -> None:
    with pytest.raises(InvalidWebhookURL):
        await check_url(url, ())
    with pytest.raises(InvalidWebhookURL):
        check_url_sync(url, ())


async def test_check_url_rejects_unresolvable_hosts() -> None:
    with pytest.raises(InvalidWebhookURL, match="does not resolve"):
        await check_url("http://does-not-exist.invalid/", ())


async def test_validate_webhook_url_handles_builtins_and_http() -> None:
    await validate_webhook_url("builtin://echo")
    validate_webhook_url_sync("builtin://add")
    with pytest.raises(InvalidWebhookURL, match="unknown built-in hook 'nope'"):
        await validate_webhook_url("builtin://nope")
    with pytest.raises(ForbiddenDestination):
        await validate_webhook_url("http://127.0.0.1/")
    with pytest.raises(ForbiddenDestination):
        validate_webhook_url_sync("http://127.0.0.1/")
    await validate_webhook_url("http://127.0.0.1/", LOOPBACK)


# --------------------------------------------------------------------------- call-time guard


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_call_time_guard_refuses_loopback_without_allow_list(webhook_server: WebhookServer, host: str) -> None:
    # No save-time check ran: the guard in the transport alone must stop the call, including for a
    # hostname (as a DNS-rebinding attack would use) that resolves to loopback only at call time.
    before = webhook_server.state.hits["/canary"]
    async with make_guarded_client((), timeout=5.0) as client:
        result = await call_webhook(
            WebhookTarget(url=webhook_server.url("/canary", host=host), secret="k"), {"x": 1}, client=client
        )
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "refusing to connect" in text and "loopback" in text and f"'{host}'" in text
    if host == "localhost":  # the address it resolved to is for the operator's log, not the agent
        assert "127.0.0.1" not in text and "::1" not in text and "REGISTRY_" not in text
    assert webhook_server.state.hits["/canary"] == before, "the request must not reach the server"


async def test_call_time_guard_raises_forbidden_destination_through_the_client(webhook_server: WebhookServer) -> None:
    async with make_guarded_client((), timeout=5.0) as client:
        with pytest.raises(ForbiddenDestination) as info:
            async with client.stream("GET", webhook_server.url("/canary", host="localhost")):
                pass
    assert info.value.address is not None and info.value.address.is_loopback


async def test_call_time_guard_allows_allow_listed_networks(webhook_server: WebhookServer) -> None:
    url = webhook_server.url("/plain-object")
    await check_url(url, LOOPBACK)
    async with make_guarded_client(LOOPBACK, timeout=5.0) as client:
        result = await call_webhook(WebhookTarget(url=url), {}, client=client)
    assert result == {
        "content": [{"type": "text", "text": '{"temperature": 21.5, "unit": "C"}'}],
        "structuredContent": {"temperature": 21.5, "unit": "C"},
        "isError": False,
    }


async def test_call_time_guard_allows_localhost_when_loopback_is_allowed(webhook_server: WebhookServer) -> None:
    async with make_guarded_client(parse_networks("127.0.0.0/8,::1/128"), timeout=5.0) as client:
        result = await call_webhook(
            WebhookTarget(url=webhook_server.url("/plain-list", host="localhost")), {}, client=client
        )
    assert result["isError"] is False
    assert "structuredContent" not in result  # only objects are structured content
    assert result["content"][0]["text"] == '[1, "two", {"three": 3}]'


async def test_guarded_client_ignores_proxy_environment(
    webhook_server: WebhookServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy would make the proxy the peer, so the guard could not see the real destination.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    async with make_guarded_client(LOOPBACK, timeout=5.0) as client:
        result = await call_webhook(WebhookTarget(url=webhook_server.url("/plain-object")), {}, client=client)
    assert result["isError"] is False
