"""``http`` resources: content fetched from a URL for ``resources/read``, bounded, and cached.

The upstream is a server the registry does not control, reached from inside its network, on an
agent's request. So a fetch goes through the SSRF-guarded client, follows no redirect, sends only
the entry's own (write-only) headers, and is bounded three ways: the body by
``limits.http_resource_bytes`` counted on *decoded* bytes as they arrive (a gzip bomb is cut off
after a few MiB, see :mod:`.bodies`), the whole exchange (connect, headers, body) by
``limits.http_resource_seconds`` (a drip-fed body cannot hold the request open), and the cache by
``limits.http_resource_cache_entries`` and ``limits.http_resource_cache_bytes``. A redirect or a
non-2xx answer is an error, never empty content, and error texts name the resource URI the agent
asked for and at most the upstream's host name (see :mod:`.messages`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

from .bodies import ACCEPT_ENCODING, BodyError, BodyTooLarge, read_body
from .caps import CapReached
from .headers import InvalidHeader, configured_headers
from .messages import host_for_messages, transport_failure
from .outbound import (
    ConnectFailed,
    InvalidRequest,
    InvalidURL,
    OutboundClient,
    OutboundError,
    OutboundTimeout,
)
from .ssrf import ForbiddenDestination

__all__ = ["HttpResourceCache", "HttpResourceSpec", "ResourceFetchError"]

log = logging.getLogger("registry.webhooks")

USER_AGENT: Final = "mcp-registry"
#: How long content is kept when the entry does not say.
DEFAULT_TTL_S: Final = 60.0
_TEXT_TYPES: Final = frozenset({"application/json", "application/xml", "application/yaml", "application/x-yaml"})

Contents = list[dict[str, Any]]


class HttpResourceSpec(Protocol):
    """What a fetch needs from an ``http`` resource entry (``registry.catalog.specs.ResourceSpec``)."""

    @property
    def url(self) -> str | None: ...

    @property
    def headers(self) -> Mapping[str, str] | None: ...

    @property
    def mimeType(self) -> str | None: ...

    @property
    def cache_ttl_s(self) -> float | None: ...


class ResourceFetchError(Exception):
    """The default error: a fetch failed; the message is safe to show the agent."""


class _Failed(Exception):
    """Internal: the fetch failed for the (already safe) reason in the message."""


@dataclass(slots=True)
class _Cached:
    expires: float
    contents: Contents
    size: int


def _is_text(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _charset(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def _decode(body: bytes, charset: str) -> str:
    try:
        return body.decode(charset, "replace")
    except LookupError:  # an unknown charset name
        return body.decode("utf-8", "replace")


class HttpResourceCache:
    """Fetches ``http`` resources through the SSRF-guarded client and keeps them for their TTL.

    ``decrypt`` turns a stored header value into the one to send (header values are write-only
    and stored encrypted); ``error`` builds the exception :meth:`read` raises, so the MCP layer
    can have its own protocol error without this package knowing about JSON-RPC.
    """

    def __init__(
        self,
        client_factory: Callable[[], OutboundClient],
        limits: Limits = DEFAULT_LIMITS,
        *,
        decrypt: Callable[[str], str] | None = None,
        error: Callable[[str], Exception] = ResourceFetchError,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._limits = limits
        self._decrypt = decrypt
        self._error = error
        self._clock = clock
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cached_bytes = 0

    # ------------------------------------------------------------------ reading

    async def read(self, uri: str, spec: HttpResourceSpec, *, caller: str | None = None) -> Contents:
        """The contents of ``uri``, served by the ``http`` resource ``spec``: from the cache while
        fresh, else fetched (``caller``, :func:`~.outbound.caller_key`, is whose fetch it is, for
        the per-caller outbound cap). Raises what ``error`` builds when the fetch fails, a fetch
        past an outbound cap included (its message names the limit)."""
        if not spec.url:
            raise self._error(f"resource {uri} has no URL to fetch")
        stored_headers = dict(spec.headers or {})
        key = self._key(uri, spec.url, stored_headers)
        cached = self._lookup(key)
        if cached is not None:
            return cached
        try:
            contents = await self._fetch(uri, spec, stored_headers, caller)
        except _Failed as exc:
            raise self._error(str(exc)) from None
        ttl = spec.cache_ttl_s if spec.cache_ttl_s is not None else DEFAULT_TTL_S
        if ttl > 0:
            self._store(key, contents, ttl)
        return contents

    async def _fetch(
        self, uri: str, spec: HttpResourceSpec, stored_headers: dict[str, str], caller: str | None
    ) -> Contents:
        assert spec.url is not None
        url = spec.url
        host = host_for_messages(url, hide_addresses=True)
        seconds = self._limits.http_resource_seconds
        max_bytes = self._limits.http_resource_bytes
        failed = f"could not fetch resource {uri}"
        try:
            headers = self._request_headers(stored_headers, failed)
            async with asyncio.timeout(seconds):
                media_type, charset, body = await self._get(url, headers, max_bytes, f"{failed}: {host}", caller)
        except (TimeoutError, OutboundTimeout):
            limit = LimitExceeded("http_resource_seconds", f"fetching resource {uri} took longer than {seconds:g} s")
            raise _Failed(str(limit)) from None
        except BodyTooLarge:
            limit = LimitExceeded("http_resource_bytes", f"resource {uri} is larger than {max_bytes} bytes")
            raise _Failed(str(limit)) from None
        except BodyError as exc:
            raise _Failed(f"{failed}: the answer from {host} could not be read: {exc}") from None
        except CapReached as exc:  # an outbound cap: nothing was sent
            raise _Failed(f"{failed}: {exc}") from None
        except ForbiddenDestination as exc:
            log.warning("http resource fetch refused: %s", exc)  # the operator's view, with the address
            raise _Failed(f"{failed}: refusing to connect to {host} ({exc.reason} destination)") from None
        except InvalidURL:
            raise _Failed(f"{failed}: its URL is not valid") from None
        except ConnectFailed as exc:
            raise _Failed(f"{failed}: could not connect to {host}: {transport_failure(exc)}") from None
        except InvalidRequest:
            raise _Failed(f"{failed}: the request to {host} could not be sent") from None
        except OutboundError as exc:
            raise _Failed(f"{failed}: the exchange with {host} failed: {transport_failure(exc)}") from None
        mime = spec.mimeType or media_type or "text/plain"
        item: dict[str, Any] = {"uri": uri, "mimeType": mime}
        if _is_text(mime):
            item["text"] = _decode(body, charset)
        else:
            item["blob"] = base64.b64encode(body).decode("ascii")
        return [item]

    def _request_headers(self, stored: Mapping[str, str], failed: str) -> list[tuple[str, str]]:
        try:
            plain = {name: self._decrypt(value) if self._decrypt else value for name, value in stored.items()}
            headers = configured_headers(plain, "resource")
        except InvalidHeader as exc:
            raise _Failed(f"{failed}: {exc}") from None
        except Exception as exc:  # a value that cannot be decrypted: the operator's problem
            log.error("http resource headers cannot be used: %s", exc)
            raise _Failed(f"{failed}: its stored headers cannot be used") from None
        return [*headers, ("Accept", "*/*"), ("Accept-Encoding", ACCEPT_ENCODING), ("User-Agent", USER_AGENT)]

    async def _get(
        self, url: str, headers: list[tuple[str, str]], max_bytes: int, failed: str, caller: str | None
    ) -> tuple[str, str, bytes]:
        """(media type, charset, decoded body) of a 2xx answer; anything else raises. ``failed``
        starts the message of a non-2xx answer ("could not fetch resource X: 'host'")."""
        seconds = self._limits.http_resource_seconds
        client = self._client_factory()
        async with client.stream("GET", url, headers=headers, timeout=seconds, caller=caller) as response:
            if not response.is_success:
                status = f"{response.status_code} {response.reason_phrase}".strip()
                note = " (redirects are not followed)" if response.is_redirect else ""
                raise _Failed(f"{failed} answered HTTP {status}{note}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise BodyTooLarge(max_bytes)
            content_type = response.headers.get("content-type", "")
            body = await read_body(response, max_bytes)
        return content_type.split(";", 1)[0].strip().lower(), _charset(content_type), body

    # ------------------------------------------------------------------ the cache

    @staticmethod
    def _key(uri: str, url: str, headers: Mapping[str, str]) -> str:
        """Content depends on the URL and on the headers sent (another label's entry may send
        other credentials to the same URL), so both are part of the key."""
        material = repr((uri, url, sorted(headers.items()))).encode("utf-8", "surrogatepass")
        return hashlib.sha256(material).hexdigest()

    def _lookup(self, key: str) -> Contents | None:
        cached = self._cache.get(key)
        if cached is None:
            return None
        if cached.expires <= self._clock():
            self._forget(key)
            return None
        self._cache.move_to_end(key)
        return cached.contents

    def _store(self, key: str, contents: Contents, ttl: float) -> None:
        size = sum(len(item.get("text", "")) + len(item.get("blob", "")) for item in contents)
        max_entries = self._limits.http_resource_cache_entries
        max_bytes = self._limits.http_resource_cache_bytes
        if size > max_bytes:
            return
        self._forget(key)
        now = self._clock()
        for stale in [k for k, v in self._cache.items() if v.expires <= now]:
            self._forget(stale)
        while self._cache and (len(self._cache) >= max_entries or self._cached_bytes + size > max_bytes):
            self._forget(next(iter(self._cache)))  # least recently used first
        self._cache[key] = _Cached(now + ttl, contents, size)
        self._cached_bytes += size

    def _forget(self, key: str) -> None:
        cached = self._cache.pop(key, None)
        if cached is not None:
            self._cached_bytes -= cached.size

    @property
    def cached_bytes(self) -> int:
        """What the cache holds (text and base64 characters), for tests and metrics."""
        return self._cached_bytes

    def __len__(self) -> int:
        return len(self._cache)
