"""Save-time validation of a tool's webhook URL, whatever its scheme.

``builtin://`` URLs need no SSRF check but must name a registered hook; http(s) URLs go through
the SSRF save-time check. Doing both here keeps callers from having to know about either.
"""

from __future__ import annotations

from collections.abc import Iterable

from .builtin import BUILTINS, builtin_name
from .ssrf import InvalidWebhookURL, IPNetwork, check_url, check_url_sync

__all__ = ["validate_webhook_url", "validate_webhook_url_sync"]


def _check_builtin(name: str) -> None:
    if name not in BUILTINS:
        known = ", ".join(BUILTINS.names()) or "none"
        raise InvalidWebhookURL(f"unknown built-in hook {name!r} (known: {known})")


async def validate_webhook_url(url: str, allowed: Iterable[IPNetwork] = ()) -> None:
    """Raise :class:`InvalidWebhookURL` or :class:`ForbiddenDestination` unless ``url`` may be
    saved as a tool's webhook."""
    name = builtin_name(url)
    if name is not None:
        _check_builtin(name)
    else:
        await check_url(url, allowed)


def validate_webhook_url_sync(url: str, allowed: Iterable[IPNetwork] = ()) -> None:
    """Blocking twin of :func:`validate_webhook_url`."""
    name = builtin_name(url)
    if name is not None:
        _check_builtin(name)
    else:
        check_url_sync(url, allowed)
