"""Item 5 of issue 7: regular expressions that an agent's input cannot make backtrack.

Before: ``resources/read`` of ``"repo://" + "/" * 2000`` against ``repo://{+owner}/{+repo}/{+path}/raw``
held the event loop for 27 s (cubic in the slashes), and a ``tools/call`` argument of 30 ``a``s and
a ``!`` against an ``inputSchema`` pattern ``^(a+)+$`` for 36 s (doubling per character); /healthz
waited as long. Now URI templates and JSON Schema patterns run on RE2 (linear time), URIs are
capped before matching and strings longer than the argument cap are not matched at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from registry.catalog.schemas import UnsafePattern, check_patterns, safe_validator
from registry.catalog.uritemplates import UriTemplate
from registry.limits import DEFAULT_LIMITS
from tests.costs import measured_in
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.security.conftest import MiB, ResponsivenessProbe
from tests.serve_process import ServerProcess

RSS_BOUND = 64 * MiB
#: One answer to an attack request; under the old code these took seconds to minutes.
ANSWER_BOUND_S = 1.0  # CPU seconds of the server

REPO_TEMPLATE = {
    "name": "repo-raw",
    "kind": "template",
    "uriTemplate": "repo://{+owner}/{+repo}/{+path}/raw",
    "text": "{{ owner }}|{{ repo }}|{{ path }}",
}
PATTERN_TOOL = {
    "name": "pattern-echo",
    "inputSchema": {
        "type": "object",
        "properties": {"message": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "string"}},
        "additionalProperties": False,
    },
    "webhook": {"url": "builtin://echo"},
}


@pytest.fixture(scope="module")
def entries(server: ServerProcess) -> None:
    with server.admin() as api:
        for collection, body in (("resources", REPO_TEMPLATE), ("tools", PATTERN_TOOL)):
            created = api.post(f"/api/v1/{collection}", json=body)
            assert created.status_code == 201, created.text


@pytest.fixture
def mcp(server: ServerProcess, entries: None) -> Iterator[StreamableHttpClient]:
    with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-11-25")
        yield client


def timed(server: ServerProcess, client: StreamableHttpClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The answer, having checked that the server spent little CPU on it: backtracking burns CPU
    (seconds to hours for these inputs), whatever else the machine is doing."""
    with measured_in(server.pid) as cost:
        answer = client.request(method, params)
    assert cost.cpu_seconds < ANSWER_BOUND_S, f"{method}: {cost.cpu_seconds:.2f} s of server CPU: it backtracked"
    return answer


def tool_text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    return "".join(item["text"] for item in result["content"] if item["type"] == "text")


# ------------------------------------------------------------------ URI templates


def test_uri_template_matching_does_not_backtrack(
    server: ServerProcess, mcp: StreamableHttpClient, healthz_probe: ResponsivenessProbe
) -> None:
    before = server.rss()
    with healthz_probe:
        for slashes in (1000, 2000, 2040):  # all under the URI cap: the engine is what holds
            answer = timed(server, mcp, "resources/read", {"uri": "repo://" + "/" * slashes})
            assert answer["error"]["code"] == -32002, answer  # no match: resource not found
        answer = timed(server, mcp, "resources/read", {"uri": "repo://" + "/" * 500 + "raw"})
        assert answer["result"]["contents"][0]["text"] == "||" + "/" * 497, "reserved expressions stay lazy"
        read = timed(server, mcp, "resources/read", {"uri": "repo://acme/tools/src/main.py/raw"})
        assert read["result"]["contents"][0]["text"] == "acme|tools|src/main.py", read
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


def test_overlong_uris_are_refused_before_matching(
    server: ServerProcess, mcp: StreamableHttpClient, healthz_probe: ResponsivenessProbe
) -> None:
    cap = DEFAULT_LIMITS.uri_chars
    uri = "repo://" + "/" * 200_000
    before = server.rss()
    with healthz_probe:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("resources/read", {"uri": uri}),
            ("resources/subscribe", {"uri": uri}),
            (
                "completion/complete",
                {"ref": {"type": "ref/resource", "uri": uri}, "argument": {"name": "x", "value": ""}},
            ),
        ]
        for method, params in calls:
            answer = timed(server, mcp, method, params)
            error = answer["error"]
            assert error["code"] == -32602, (method, error)
            assert "REGISTRY_LIMIT_URI_CHARS" in error["message"], (method, error)
            assert len(error["message"]) < 1000, f"{method} echoed the URI back"
        answer = timed(server, mcp, "resources/read", {"uri": "repo://" + "a" * (cap - len("repo://"))})
        assert answer["error"]["code"] == -32002, "a URI of exactly the cap is matched, not refused"
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


# ------------------------------------------------------------------ JSON Schema patterns


def test_schema_patterns_do_not_backtrack(
    server: ServerProcess, mcp: StreamableHttpClient, healthz_probe: ResponsivenessProbe
) -> None:
    before = server.rss()
    with healthz_probe:
        for length in (30, 40, 1000):
            answer = timed(
                server, mcp, "tools/call", {"name": "pattern-echo", "arguments": {"message": "a" * length + "!"}}
            )
            assert answer["result"]["isError"] is True, answer
            assert "does not match '^(a+)+$'" in tool_text(answer)
            # patternProperties and additionalProperties match property names against patterns too
            answer = timed(server, mcp, "tools/call", {"name": "pattern-echo", "arguments": {"b" * length + "!": "x"}})
            assert answer["result"]["isError"] is True, answer
            assert "not match any of the regexes" in tool_text(answer), answer
        ok = timed(server, mcp, "tools/call", {"name": "pattern-echo", "arguments": {"message": "aaaa", "bbb": "x"}})
        assert ok["result"]["isError"] is False, ok
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


def test_strings_over_the_argument_cap_are_not_matched(
    server: ServerProcess, mcp: StreamableHttpClient, healthz_probe: ResponsivenessProbe
) -> None:
    cap = DEFAULT_LIMITS.argument_chars
    before = server.rss()
    with healthz_probe:
        answer = timed(server, mcp, "tools/call", {"name": "pattern-echo", "arguments": {"message": "a" * (cap + 1)}})
        assert answer["result"]["isError"] is True, answer
        text = tool_text(answer)
        assert "REGISTRY_LIMIT_ARGUMENT_CHARS" in text, text
        assert len(text) < 2000, "the refusal does not echo the string"
        ok = timed(server, mcp, "tools/call", {"name": "pattern-echo", "arguments": {"message": "a" * cap}})
        assert ok["result"]["isError"] is False, "a string of exactly the cap is matched"
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


@pytest.mark.parametrize(
    ("where", "schema"),
    [
        ("/properties/s/pattern", {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?=a)a+$"}}}),
        ("/properties/s/pattern", {"type": "object", "properties": {"s": {"type": "string", "pattern": r"^(a)\1$"}}}),
        ("/patternProperties", {"type": "object", "patternProperties": {"^(?!x)": {}}}),
        ("/$defs/d/items/pattern", {"type": "object", "$defs": {"d": {"items": {"pattern": "(?<=a)b"}}}}),
    ],
)
def test_patterns_the_engine_cannot_run_are_refused_at_save(
    server: ServerProcess, healthz_probe: ResponsivenessProbe, where: str, schema: dict[str, Any]
) -> None:
    body = {"name": "lookaround", "inputSchema": schema, "webhook": {"url": "builtin://echo"}}
    before = server.rss()
    with server.admin() as api, healthz_probe:
        refused = api.post("/api/v1/tools", json=body)
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "inputSchema" in problem["detail"] and where in problem["detail"], problem
        assert "RE2" in problem["detail"] and "Lookaround and backreferences" in problem["detail"], problem
        assert api.get("/api/v1/tools/lookaround").status_code == 404, "nothing was written"
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


def test_deeply_grouped_pattern_is_a_422_not_a_crash(server: ServerProcess, healthz_probe: ResponsivenessProbe) -> None:
    """Saving compiles patterns with Python's re (the metaschema's "format": "regex"), which recurses
    per group: 5,000 nested groups were a RecursionError and a 500."""
    pattern = "(" * 5000 + "a" + ")" * 5000
    body = {"name": "deep-groups", "inputSchema": {"type": "object", "properties": {"s": {"pattern": pattern}}}}
    with server.admin() as api, healthz_probe:
        refused = api.post("/api/v1/tools", json={**body, "webhook": {"url": "builtin://echo"}})
        assert refused.status_code == 422, refused.text
        assert "nested too deeply" in refused.json()["detail"]
        assert api.get("/api/v1/tools/deep-groups").status_code == 404
    healthz_probe.assert_responsive()


# ------------------------------------------------------------------ same answers as before, for what worked


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("repo://{+owner}/{+repo}/{+path}/raw", "repo://a/b/c/d/raw", {"owner": "a", "repo": "b", "path": "c/d"}),
        ("repo://{+owner}/{+repo}/{+path}/raw", "repo://a/b/raw", None),
        ("sprint://{team}/current", "sprint://core%20team/current", {"team": "core team"}),
        ("sprint://{team}/current", "sprint://a/b/current", None),
        ("sprint://{team}/current", "sprint://core/current\n", None),  # Python's $ accepted this
        ("x://{a,b}", "x://1,2", {"a": "1", "b": "2"}),
        ("x://h{/p,q}", "x://h/1/2", {"p": "1", "q": "2"}),
        ("x://h{.ext}", "x://h.json", {"ext": "json"}),
        ("x://h{;v}", "x://h;7", {"v": "7"}),
        ("x://h{?q,page}", "x://h?q=mcp&page=2", {"q": "mcp", "page": "2"}),
        ("x://h{?q,page}", "x://h", {}),
        ("x://h{?q}{&r}", "x://h?q=1&r=2", {"q": "1", "r": "2"}),
        ("x://h{#frag}", "x://h#top", {"frag": "top"}),
        ("x://{a.b}/{a.b}", "x://1/2", {"a.b": "1"}),  # names Python's named groups refused
    ],
)
def test_uri_template_answers(template: str, uri: str, expected: dict[str, str] | None) -> None:
    assert UriTemplate(template).match(uri) == expected


SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+b?$"}}},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}, "b$": {"type": "string"}}},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
    {"type": "object", "allOf": [{"patternProperties": {"^x": {}}}], "unevaluatedProperties": {"type": "string"}},
    {
        "type": "object",
        "$defs": {"d": {"patternProperties": {"b": {}}}},
        "$ref": "#/$defs/d",
        "unevaluatedProperties": False,
    },
    {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
]
INSTANCES: list[dict[str, Any]] = [
    {},
    {"s": "aab"},
    {"s": "ba"},
    {"x1": 1},
    {"x1": "no"},
    {"xb": "s", "a": 1},
    {"y": 1},
    {"ab": 2, "A": True},
    {"b": "s", "q": None},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_safe_validator_agrees_with_jsonschema_on_safe_patterns(schema: dict[str, Any]) -> None:
    stock, safe = Draft202012Validator(schema), safe_validator(schema)
    for instance in INSTANCES:
        expected = sorted(e.message for e in stock.iter_errors(instance))
        assert sorted(e.message for e in safe.iter_errors(instance)) == expected, instance


def test_patterns_stored_before_the_check_fail_calls_not_the_server() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?=a)a$"}}}
    with pytest.raises(UnsafePattern, match="RE2"):
        check_patterns(schema, "inputSchema")
    (error,) = safe_validator(schema).iter_errors({"s": "a"})
    assert "cannot run on the registry's linear-time" in error.message
