"""Every bound the registry puts on what callers send, in one place.

One settings-backed policy, applied the same way by every surface (admin API, MCP over Streamable
HTTP, legacy SSE and stdio, bundles, the web UI): body sizes, JSON structure, field lengths, batch
sizes, per-session state, render time and output, outbound fetches. Each limit is named in the
refusal it causes and has an environment variable (``REGISTRY_LIMIT_<NAME>``) listed in the README;
``tests/security/test_limits_documented.py`` keeps the two in step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    #: Largest request body on any HTTP surface (admin API, /mcp, /messages), checked while reading,
    #: before parsing; also the largest stdio line.
    body_bytes: int = 4 * MiB
    #: Deepest nesting of arrays/objects in any JSON a caller sends.
    json_depth: int = 64
    #: Most array items plus object members in one JSON document.
    json_elements: int = 100_000
    #: Most messages in one JSON-RPC batch (2024-11-05 and 2025-03-26 only).
    batch_messages: int = 32
    #: Longest JSON-RPC method name (longer ones are refused without being echoed).
    method_chars: int = 128
    #: Largest HTTP request head (request line plus headers) on any HTTP surface, counted as it
    #: arrives, before anything is parsed or authenticated; past it the answer is 431 and the
    #: connection is closed (``registry.serving.HeadBoundProtocol``).
    request_head_bytes: int = 64 * 1024

    # -- catalog entries -----------------------------------------------------------------
    #: Longest entry or argument title.
    title_chars: int = 256
    #: Longest description (entries, arguments).
    description_chars: int = 8_192
    #: Most tags on one entry.
    tags: int = 32
    #: Longest change note.
    change_note_chars: int = 2_000
    #: Longest template or static text (prompt message text, resource text).
    template_chars: int = 256 * 1024
    #: Largest inline binary content (resource blob, image/audio data), base64 characters.
    blob_chars: int = 4 * MiB
    #: Largest JSON Schema (inputSchema, outputSchema), serialised bytes.
    schema_bytes: int = 64 * 1024
    #: Most arguments a prompt declares; most messages it has.
    prompt_arguments: int = 64
    prompt_messages: int = 64
    #: Most webhook headers a tool sends.
    webhook_headers: int = 32
    #: Most sample argument sets a prompt stores for its pre-publish checks (``samples``).
    prompt_samples: int = 20
    #: Longest search text (``q``) on an admin-API listing (it travels in the URL).
    search_chars: int = 256

    # -- what agents send ----------------------------------------------------------------
    #: clientInfo plus capabilities of one session, serialised bytes.
    session_metadata_bytes: int = 16 * 1024
    #: Most resource subscriptions one session holds.
    subscriptions: int = 256
    #: Longest URI an agent may read, subscribe to or complete against; also the longest URI, URI
    #: template or URL a catalog entry may declare.
    uri_chars: int = 2_048
    #: Longest prompt argument value; also the longest string (tool argument, property name) matched
    #: against a JSON Schema ``pattern``/``patternProperties``.
    argument_chars: int = 64 * 1024
    #: Completion history per caller: earlier values offered per argument (the newest distinct
    #: ones), and bytes kept in all (the least recently used prompts' and templates' values go first).
    completion_values: int = 20
    completion_bytes: int = 64 * 1024
    #: Callers (token or anonymous session, per label) whose completion history is kept; the least
    #: recently active beyond this forget theirs. Bounds history memory: this times completion_bytes.
    completion_callers: int = 256

    # -- work done for a request ---------------------------------------------------------
    #: Wall-clock deadline of one template render (prompts/get, resources/read, previews).
    render_seconds: float = 2.0
    #: Most characters one render may produce; also the largest value it may build (and its
    #: intermediate values may total 8 times this).
    render_output_chars: int = 1_000_000
    #: Long renders (past a 20 ms CPU slice) running at once; the rest wait their turn within their
    #: deadline. Short renders and plain ``{{ name }}`` templates skip the queue.
    render_concurrency: int = 2
    #: Most loop iterations one render may run, all loops together (items walked by filters such
    #: as ``join`` or ``sort`` included); also the longest list it may build.
    render_loop_iterations: int = 200_000
    #: ``http`` resources: largest body (after decompression) and total time of one fetch.
    http_resource_bytes: int = 4 * MiB
    http_resource_seconds: float = 15.0
    #: ``http`` resources: most fetched contents kept for their TTL, and their total size.
    http_resource_cache_entries: int = 256
    http_resource_cache_bytes: int = 32 * MiB
    #: Outbound calls (webhook calls and ``http`` resource fetches) one process has in flight: in
    #: all, to one origin (scheme, host, port), and for one caller (token, SSO user, or anonymous
    #: session). A call past one of them is refused at once, naming the limit.
    outbound_calls: int = 1_000
    outbound_calls_per_origin: int = 100
    outbound_calls_per_caller: int = 16
    #: Largest uploaded bundle (zip) and most files in it.
    bundle_bytes: int = 32 * MiB
    bundle_files: int = 10_000
    #: Webhook progress/log notifications relayed to a client per second (the rest are coalesced).
    progress_per_second: float = 20.0
    #: Seconds a server-to-client stream may wait for its client to take a write; then the client
    #: is taken as not reading and its stream is dropped (it resumes with Last-Event-ID).
    stream_stall_seconds: float = 30.0
    #: Web UI pages of this process listening for saves of the entry they show (the "someone
    #: else saved" banner); one server-sent event stream each.
    ui_event_streams: int = 1_000
    #: ``subscriptions/listen`` streams (2026-07-28) open in one process, and held by one caller:
    #: a token, a single-sign-on user, or an anonymous client's address (as for the outbound caps).
    listen_streams: int = 10_000
    listen_streams_per_caller: int = 100
    #: Usage counts (entry version, agent, hour) one process holds until they are added to the
    #: database, also while it cannot be reached; uses that would need a further one are not
    #: counted (logged, and ``registry_usage_dropped_total`` on /metrics) until a flush succeeds.
    usage_pending_keys: int = 100_000
    #: New sessions (initialize) of one process waiting for their rows to be written while a batch
    #: is being written; beyond it, initialize answers 503 with Retry-After (the database is slow
    #: or down: nothing is acknowledged that is not stored).
    session_pending_writes: int = 10_000

    # -- change events to other systems (``registry.events``) -----------------------------
    #: Most event subscriptions.
    event_subscriptions: int = 100
    #: Most values in one subscription filter (kinds, teams, labels).
    event_filter_values: int = 32
    #: Largest event body sent (bytes); a longer change note is cut to fit.
    event_payload_bytes: int = 64 * 1024
    #: Event deliveries one process has in flight (each subscription sends one at a time).
    event_deliveries_in_flight: int = 8
    #: Total time of one delivery (connect, send, answer); past it the attempt failed.
    event_delivery_seconds: float = 10.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Limits:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = env.get(env_name(item.name))
            if raw is None and item.name in _FORMER_NAMES:
                raw = env.get(_FORMER_NAMES[item.name])  # the name a limit had before
            if raw is None or not raw.strip():
                continue
            caster = float if item.type in ("float", float) else int
            try:
                value = caster(raw.strip())
            except ValueError:
                raise ValueError(f"{env_name(item.name)} must be a number, got {raw!r}") from None
            if value <= 0:
                raise ValueError(f"{env_name(item.name)} must be positive, got {raw!r}")
            values[item.name] = value
        return cls(**values)


#: Limits whose environment variable had another name before: still read when the new one is unset.
_FORMER_NAMES = {
    "body_bytes": "REGISTRY_MAX_BODY_BYTES",  # before limits had one home
    "listen_streams_per_caller": "REGISTRY_LIMIT_LISTEN_STREAMS_PER_TOKEN",  # when only tokens were counted
}


def env_name(field_name: str) -> str:
    """The environment variable that sets a limit: ``REGISTRY_LIMIT_BODY_BYTES`` for ``body_bytes``."""
    return "REGISTRY_LIMIT_" + field_name.upper()


class LimitExceeded(ValueError):
    """Input over one of the limits. ``limit`` names it (the field, so the README entry is findable)."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"{message} (limit {env_name(limit)})")
        self.limit = limit


DEFAULT_LIMITS = Limits()
