"""Tools implemented as outbound HTTP webhooks (or in-process ``builtin://`` hooks).

Typical use::

    allowed = parse_networks(settings.webhook_allowed_networks)
    await validate_webhook_url(url, allowed)            # when a tool is saved
    client = make_guarded_client(allowed, limits=limits)  # once, at startup
    caller = caller_key(token_id, user, session_id)     # whose call it is (the per-caller cap)
    result = await call_webhook(target, arguments, client=client, caller=caller, on_progress=..., on_log=...)
    resources = HttpResourceCache(lambda: client, limits)  # http resources, bounded and cached
    contents = await resources.read(uri, resource_spec, caller=caller)
"""

from __future__ import annotations

# Registers the builtin://conformance-* hooks that the seed_data/conformance bundle uses.
from . import conformance as _conformance  # noqa: F401
from ._types import LOG_LEVELS, JSONObject, LogCallback, ProgressCallback
from .bodies import ACCEPT_ENCODING, BodyError, BodyTooLarge, iter_body, read_body
from .builtin import BUILTINS, BuiltinRegistry, Hook, HookContext, HookError, builtin, builtin_name
from .caps import OUTBOUND_CALLS, CapReached, OutboundCalls, caller_key
from .client import DEFAULT_MAX_RESPONSE_BYTES, WebhookAnswer, WebhookTarget, call_webhook
from .input_required import INPUT_METHODS, InputRequest, InputRequired, parse_input_required
from .outbound import (
    ConnectFailed,
    ConnectionLost,
    InvalidRequest,
    OutboundClient,
    OutboundError,
    OutboundResponse,
    OutboundTimeout,
    ProtocolViolation,
    make_guarded_client,
)
from .relay import NotificationRelay
from .resources import HttpResourceCache, HttpResourceSpec, ResourceFetchError
from .results import InvalidResult, error_result, text_result, to_call_tool_result
from .signing import SIGNATURE_HEADER, sign, verify
from .ssrf import (
    ALLOWED_NETWORKS_ENV,
    ConnectedPeerGuard,
    ForbiddenDestination,
    InvalidWebhookURL,
    IPAddress,
    IPNetwork,
    WebhookURLError,
    check_url,
    check_url_sync,
    forbidden_reason,
    is_forbidden_address,
    parse_networks,
)
from .validation import validate_webhook_url, validate_webhook_url_sync

__all__ = [
    "ACCEPT_ENCODING",
    "ALLOWED_NETWORKS_ENV",
    "BUILTINS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "INPUT_METHODS",
    "LOG_LEVELS",
    "OUTBOUND_CALLS",
    "SIGNATURE_HEADER",
    "BodyError",
    "BodyTooLarge",
    "BuiltinRegistry",
    "CapReached",
    "ConnectFailed",
    "ConnectedPeerGuard",
    "ConnectionLost",
    "ForbiddenDestination",
    "Hook",
    "HookContext",
    "HookError",
    "HttpResourceCache",
    "HttpResourceSpec",
    "IPAddress",
    "IPNetwork",
    "InputRequest",
    "InputRequired",
    "InvalidRequest",
    "InvalidResult",
    "InvalidWebhookURL",
    "JSONObject",
    "LogCallback",
    "NotificationRelay",
    "OutboundCalls",
    "OutboundClient",
    "OutboundError",
    "OutboundResponse",
    "OutboundTimeout",
    "ProgressCallback",
    "ProtocolViolation",
    "ResourceFetchError",
    "WebhookAnswer",
    "WebhookTarget",
    "WebhookURLError",
    "builtin",
    "builtin_name",
    "call_webhook",
    "caller_key",
    "check_url",
    "check_url_sync",
    "error_result",
    "forbidden_reason",
    "is_forbidden_address",
    "iter_body",
    "make_guarded_client",
    "parse_input_required",
    "parse_networks",
    "read_body",
    "sign",
    "text_result",
    "to_call_tool_result",
    "validate_webhook_url",
    "validate_webhook_url_sync",
    "verify",
]
