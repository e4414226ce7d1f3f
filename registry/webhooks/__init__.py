"""Tools implemented as outbound HTTP webhooks (or in-process ``builtin://`` hooks).

Typical use::

    allowed = parse_networks(settings.webhook_allowed_networks)
    await validate_webhook_url(url, allowed)            # when a tool is saved
    client = make_guarded_client(allowed)               # once, at startup
    result = await call_webhook(target, arguments, client=client, on_progress=..., on_log=...)
"""

from __future__ import annotations

# Registers the builtin://conformance-* hooks that the seed_data/conformance bundle uses.
from . import conformance as _conformance  # noqa: F401
from ._types import LOG_LEVELS, JSONObject, LogCallback, ProgressCallback
from .builtin import BUILTINS, BuiltinRegistry, Hook, HookContext, HookError, builtin, builtin_name
from .client import DEFAULT_MAX_RESPONSE_BYTES, WebhookTarget, call_webhook
from .results import InvalidResult, error_result, text_result, to_call_tool_result
from .signing import SIGNATURE_HEADER, sign, verify
from .ssrf import (
    ALLOWED_NETWORKS_ENV,
    ForbiddenDestination,
    GuardedNetworkBackend,
    GuardedTransport,
    InvalidWebhookURL,
    IPAddress,
    IPNetwork,
    WebhookURLError,
    check_url,
    check_url_sync,
    forbidden_reason,
    is_forbidden_address,
    make_guarded_client,
    parse_networks,
)
from .validation import validate_webhook_url, validate_webhook_url_sync

__all__ = [
    "ALLOWED_NETWORKS_ENV",
    "BUILTINS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "LOG_LEVELS",
    "SIGNATURE_HEADER",
    "BuiltinRegistry",
    "ForbiddenDestination",
    "GuardedNetworkBackend",
    "GuardedTransport",
    "Hook",
    "HookContext",
    "HookError",
    "IPAddress",
    "IPNetwork",
    "InvalidResult",
    "InvalidWebhookURL",
    "JSONObject",
    "LogCallback",
    "ProgressCallback",
    "WebhookTarget",
    "WebhookURLError",
    "builtin",
    "builtin_name",
    "call_webhook",
    "check_url",
    "check_url_sync",
    "error_result",
    "forbidden_reason",
    "is_forbidden_address",
    "make_guarded_client",
    "parse_networks",
    "sign",
    "text_result",
    "to_call_tool_result",
    "validate_webhook_url",
    "validate_webhook_url_sync",
    "verify",
]
