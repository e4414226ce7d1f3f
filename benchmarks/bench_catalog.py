"""The benchmark catalog: one definition of what the registry, the SDK peer and the bare ceiling serve.

Every server in a comparison must answer the same requests with the same bytes, or a difference in
size would hide in the figures. This module holds the catalog's shape and texts (1,000 prompts
rendering ~500 characters, 1,000 static text resources, 50 tools with ``echo``) and the JSON-RPC
results the bare ceiling answers with; ``peer_server.py`` builds the SDK's server from it,
``mcp_throughput.py`` loads the registry with it and ``ceiling_server.py`` answers with it. No
imports beyond the standard library: every process can load it, whatever else it has.
"""

from __future__ import annotations

import json
from typing import Any

N_PROMPTS = 1000
N_RESOURCES = 1000
N_TOOLS = 50  # echo + tool01..tool49

#: The arguments the load generator sends to every prompts/get.
TOPIC, AUDIENCE = "caching", "SREs"

FILLER = (
    "You are a careful assistant. Write a concise, well structured briefing about the topic for "
    "the given audience. Cover background, current state, open questions and practical next steps. "
    "Prefer plain language, short paragraphs and concrete examples; avoid speculation and marketing "
    "tone. Cite assumptions explicitly and flag anything that needs verification. "
)


def prompt_name(i: int) -> str:
    return f"p{i:04d}"


def prompt_text(i: int, topic: str, audience: str) -> str:
    """Prompt ``i`` rendered: ~500 characters for short arguments."""
    return f"[prompt p{i:04d}] Topic: {topic}. Audience: {audience}. {FILLER}{FILLER[:120]}"


def prompt_template(i: int) -> str:
    """Prompt ``i`` as the registry's Jinja template: renders exactly ``prompt_text``."""
    return prompt_text(i, "{{ topic }}", "{{ audience }}")


def resource_uri(i: int) -> str:
    return f"res://static/r{i:04d}"


def resource_text(i: int) -> str:
    return f"[resource r{i:04d}] " + FILLER + FILLER[:150]


def tool_name(i: int) -> str:
    """Tool 0 is ``echo``; the others are ``tool01``..``tool49``."""
    return "echo" if i == 0 else f"tool{i:02d}"


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


#: What the bare ceiling answers per method: the same results, of the same size, the peer gives.
CEILING_RESULTS: dict[str, bytes] = {
    "initialize": _compact(
        {
            "capabilities": {
                "prompts": {"listChanged": False},
                "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False},
            },
            "protocolVersion": "2025-11-25",
            "serverInfo": {"name": "ceiling", "version": "1.0"},
        }
    ),
    "prompts/get": _compact(
        {
            "description": "Briefing prompt number 42",
            "messages": [{"content": {"text": prompt_text(42, TOPIC, AUDIENCE), "type": "text"}, "role": "user"}],
        }
    ),
    "tools/call": _compact(
        {
            "content": [{"text": "hello world", "type": "text"}],
            "isError": False,
            "structuredContent": {"result": "hello world"},
        }
    ),
    "resources/read": _compact(
        {"contents": [{"mimeType": "text/plain", "text": resource_text(7), "uri": resource_uri(7)}]}
    ),
    "ping": b"{}",
}
