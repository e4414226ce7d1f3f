"""The admin API's contract: ``/openapi.json`` is a valid, fully typed OpenAPI 3.1 document, and the
live server keeps it.

The last test runs schemathesis against a real server process over HTTP, with an admin token,
through all its phases (examples, coverage, fuzzing, and the stateful one that follows the links
from each create to the operations on what it made): no server error, no response that contradicts
the schema (status, content type, headers, body), and no operation it could only reach with
401/403/404.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi

from registry.api.models import INT32_MAX, INT64_MAX
from registry.config import Settings
from registry.limits import Limits
from tests.http import TLS
from tests.serve_process import ServerProcess

HERE = Path(__file__).resolve().parent
PROBLEM = "application/problem+json"
METHODS = ("get", "put", "post", "delete", "patch")
#: Test cases schemathesis generates per operation and phase (more: slower, deeper).
MAX_EXAMPLES = int(os.environ.get("REGISTRY_TEST_SCHEMATHESIS_EXAMPLES", "20"))
#: At most this many stateful scenarios (chains of calls that follow the links).
STATEFUL_EXAMPLES = 5 * MAX_EXAMPLES
#: The whole schemathesis run may take this long (it takes some 30 s on 2 busy cores).
RUN_TIMEOUT_S = 600

#: Free-form JSON by nature, so typed as "any object" (with a description saying what it holds):
#: JSON Schemas, what a tool returns, MCP annotations, a tool's arguments, a log's data.
FREE_FORM = {"inputSchema", "outputSchema", "structuredContent", "annotations", "arguments", "data"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``mcp-registry serve`` with the demo catalog, on SQLite."""
    # TEST-NET-2 is where generated event subscriptions send (schemathesis_hooks.SUBSCRIBER): saved, never answered.
    env = {"REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "198.51.100.0/24"}
    with ServerProcess(
        tmp_path_factory.mktemp("contract"), args=["--seed", "demo"], name="contract", env=env
    ) as server:
        yield server


@pytest.fixture(scope="module")
def document(served: ServerProcess) -> dict[str, Any]:
    response = httpx.get(served.url + "/openapi.json", timeout=30, verify=TLS)
    assert response.status_code == 200, response.text
    doc: dict[str, Any] = response.json()
    return doc


def operations(document: dict[str, Any], prefix: str = "/api/v1") -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        if path.startswith(prefix):
            for method in METHODS:
                if method in item:
                    yield method, path, item[method]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


# ------------------------------------------------------------------ the document


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate_openapi(document)


def test_no_untyped_bodies(document: dict[str, Any]) -> None:
    """Every request and response body is a named schema, and no object in one has members of
    unknown type (Swagger UI's ``additionalProp1``) unless it says what it holds."""
    bodies: list[tuple[str, dict[str, Any]]] = []
    for method, path, operation in operations(document, prefix="/"):
        for media, content in operation.get("requestBody", {}).get("content", {}).items():
            bodies.append((f"{method.upper()} {path} request {media}", content["schema"]))
        for status, response in operation["responses"].items():
            for media, content in response.get("content", {}).items():
                if media == "text/plain":
                    assert content["schema"] == {"type": "string"}, (path, status)
                    continue
                bodies.append((f"{method.upper()} {path} {status} {media}", content["schema"]))
    assert len(bodies) > 100
    for where, schema in bodies:
        assert "$ref" in schema, f"{where}: not a named schema: {schema}"
        assert resolve(document, schema).get("properties"), f"{where}: no properties"

    untyped = []
    for name, schema in document["components"]["schemas"].items():
        for path, node in _walk(schema, name):
            is_object = node.get("type") == "object" or "additionalProperties" in node
            if not is_object or node.get("properties"):
                continue
            members = node.get("additionalProperties", True)
            if members in (True, {}) and path.rsplit(".", 1)[-1] not in FREE_FORM:
                untyped.append(path)
            elif members in (True, {}) and not node.get("description"):
                untyped.append(f"{path} (free-form, but not described)")
    assert not untyped, f"objects with members of unknown type: {untyped}"


def _walk(node: Any, path: str, description: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each schema node with its dotted path; a union's branches carry the union's description."""
    if isinstance(node, dict):
        yield path, ({"description": description, **node} if description else node)
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for name, child in value.items():
                    yield from _walk(child, f"{path}.{name}")
            elif key in ("items", "additionalProperties", "not"):
                yield from _walk(value, path if key != "items" else f"{path}[]")
            elif key in ("anyOf", "oneOf", "allOf"):
                for child in value:
                    yield from _walk(child, path, node.get("description", description))


def test_every_admin_operation_documents_its_problems(document: dict[str, Any]) -> None:
    """401/403/503 everywhere, 422 wherever there is something to validate, 400/413 with a body,
    404 on named entries, 409/412 on saves: each an RFC 9457 problem (no FastAPI validation shape)."""
    assert "HTTPValidationError" not in json.dumps(document)
    for method, path, operation in operations(document):
        responses = operation["responses"]
        expected = {"401", "403", "503"}
        if operation.get("parameters") or operation.get("requestBody"):
            expected.add("422")
        if operation.get("requestBody"):
            expected |= {"400", "413"}
        if "{name}" in path or "{token_id}" in path:
            expected.add("404")
        if method in ("put", "patch") and path.endswith("/{name}"):
            expected |= {"409", "412"}
        if method == "post" and path.count("/") == 3 and path != "/api/v1/tokens":
            expected.add("409")  # a create
        missing = expected - set(responses)
        assert not missing, f"{method.upper()} {path} does not document {sorted(missing)}"
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                assert list(response["content"]) == [PROBLEM], (method, path, status)
                assert response["content"][PROBLEM]["schema"] == {"$ref": "#/components/schemas/Problem"}
                assert response["description"]


def test_a_bearer_scheme_guards_every_admin_operation(document: dict[str, Any]) -> None:
    """The Authorize button on /docs: an HTTP bearer scheme, required by each admin operation."""
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"]["type"] == "http"
    assert schemes["bearerAuth"]["scheme"] == "bearer"
    for method, path, operation in operations(document):
        assert operation.get("security") == [{"bearerAuth": []}], f"{method.upper()} {path}"


def test_examples_match_their_schemas(document: dict[str, Any]) -> None:
    """Every model has examples, and every example is valid against its schema (a wrong example
    in a contract is a wrong contract)."""
    schemas = document["components"]["schemas"]
    checked = 0
    for method, path, operation in operations(document):
        body = operation.get("requestBody", {}).get("content", {})
        refs = [c["schema"] for c in body.values()]
        refs += [c["schema"] for r in operation["responses"].values() for c in r.get("content", {}).values()]
        for ref in refs:
            schema = resolve(document, ref)
            assert schema.get("examples"), f"{method.upper()} {path}: {ref} has no examples"
    for name, schema in schemas.items():
        for example in schema.get("examples", []):
            validator = Draft202012Validator(
                {"$ref": f"#/components/schemas/{name}", "components": {"schemas": schemas}}
            )
            errors = [e.message for e in validator.iter_errors(example)]
            assert not errors, f"example of {name} is invalid: {errors[:3]}"
            checked += 1
    assert checked >= 30


def test_each_create_links_to_the_operations_on_what_it_made(document: dict[str, Any]) -> None:
    by_id = {op["operationId"]: (method, path) for method, path, op in operations(document)}
    for kind, collection in (("Prompt", "prompts"), ("Resource", "resources"), ("Tool", "tools")):
        links = document["paths"][f"/api/v1/{collection}"]["post"]["responses"]["201"]["links"]
        targets = {link["operationId"] for link in links.values()}
        on_entry = {op for op, (_m, path) in by_id.items() if path.startswith(f"/api/v1/{collection}/{{name}}")}
        assert targets == on_entry, f"{kind}: links miss {sorted(on_entry - targets)}"
        for link in links.values():
            assert link["parameters"]["name"] == "$response.body#/name"
        update = links[f"Update{kind}"]
        assert update["parameters"]["header.if-match"] == "$response.header.ETag"
    token_links = document["paths"]["/api/v1/tokens"]["post"]["responses"]["201"]["links"]
    assert token_links["RevokeToken"]["parameters"] == {"token_id": "$response.body#/id"}


def test_parameters_are_bounded_in_the_schema(document: dict[str, Any]) -> None:
    for method, path, operation in operations(document):
        for parameter in operation.get("parameters", []):
            schema = parameter["schema"]
            where = f"{method.upper()} {path} {parameter['in']} {parameter['name']}"
            if schema.get("type") == "integer":
                assert schema.get("maximum", INT64_MAX + 1) <= INT64_MAX, where
                assert "minimum" in schema, where
            elif schema.get("type") == "string":
                assert schema.get("maxLength"), where
            else:
                assert schema.get("type") == "boolean", where


def test_published_limits_are_the_servers_own(tmp_path: Path) -> None:
    """The schema carries this server's limits: a title longer than REGISTRY_LIMIT_TITLE_CHARS, a
    search longer than REGISTRY_LIMIT_SEARCH_CHARS, more tags than REGISTRY_LIMIT_TAGS."""
    from registry.app import create_app
    from registry.runtime import Registry

    limits = Limits(title_chars=40, search_chars=17, tags=3)
    registry = Registry(Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'r.db'}", limits=limits))
    try:
        doc = create_app(registry).api.openapi()
    finally:
        registry.close()
    schemas = doc["components"]["schemas"]
    assert schemas["PromptWrite"]["properties"]["title"]["anyOf"][0]["maxLength"] == 40
    assert schemas["PromptWrite"]["properties"]["tags"]["maxItems"] == 3
    assert schemas["PromptArgument-Input"]["properties"]["title"]["anyOf"][0]["maxLength"] == 40
    # Responses show what was saved under any limit: no bound there.
    assert "maxLength" not in json.dumps(schemas["PromptSpec"]["properties"]["title"])
    q = next(p for p in doc["paths"]["/api/v1/prompts"]["get"]["parameters"] if p["name"] == "q")
    assert q["schema"]["maxLength"] == 17


# ------------------------------------------------------------------ bounds on the live server


def test_out_of_range_parameters_are_422_not_500(served: ServerProcess) -> None:
    """Before: ``GET /changes?after=160145445562224818230657024`` reached the database (an integer
    beyond 64 bits) and answered 500."""
    huge = 160145445562224818230657024
    with served.admin() as api:
        cases = [
            ("/api/v1/changes", {"after": huge}, "after"),
            ("/api/v1/changes", {"after": INT64_MAX + 1}, "after"),
            ("/api/v1/prompts", {"offset": INT32_MAX + 1}, "offset"),
            ("/api/v1/prompts/summarize/versions/" + str(INT32_MAX + 1), {}, "number"),
            ("/api/v1/prompts/summarize/diff", {"from": 1, "to": huge}, "to"),
            ("/api/v1/prompts/" + "n" * 129, {}, "name"),
            ("/api/v1/prompts", {"tag": "t" * 65}, "tag"),
        ]
        for path, params, field in cases:
            answer = api.get(path, params=params)
            assert answer.status_code == 422, (path, params, answer.text)
            assert answer.headers["content-type"].startswith(PROBLEM)
            assert field in answer.json()["detail"], answer.json()
        revoke = api.delete(f"/api/v1/tokens/{huge}")
        assert revoke.status_code == 422, revoke.text
        assert api.get("/api/v1/changes", params={"after": INT64_MAX}).json()["items"] == []

        search = api.get("/api/v1/prompts", params={"q": "x" * 257})
        assert search.status_code == 422, search.text
        assert "REGISTRY_LIMIT_SEARCH_CHARS" in search.json()["detail"]
        assert search.json()["errors"][0]["limit"] == "REGISTRY_LIMIT_SEARCH_CHARS"
        assert api.get("/api/v1/prompts", params={"q": "x" * 256}).status_code == 200


def test_405_names_every_method_the_path_serves(served: ServerProcess) -> None:
    with served.admin() as api:
        answer = api.request("OPTIONS", "/api/v1/prompts/summarize")
        assert answer.status_code == 405
        assert set(answer.headers["allow"].split(", ")) >= {"GET", "PUT", "PATCH", "DELETE"}
        assert answer.headers["content-type"].startswith(PROBLEM)


# ------------------------------------------------------------------ schemathesis


def schemathesis_config(tmp_path: Path) -> Path:
    """The run's settings, each exception with its reason."""
    writes = [f"{verb}{kind}" for verb in ("create", "update", "patch") for kind in ("Prompt", "Resource", "Tool")]
    writes += [f"restore{kind}Version" for kind in ("Prompt", "Resource", "Tool")]
    label_ops = [f"{verb}{kind}Label" for verb in ("move", "delete") for kind in ("Prompt", "Resource", "Tool")]
    review_ops = [
        f"{verb}ChangeRequest" for verb in ("open", "get", "submit", "approve", "reject", "withdraw", "publish")
    ]
    config = f"""
hooks = {json.dumps(str(HERE / "schemathesis_hooks.py"))}
workers = 1
request-timeout = 60

[generation]
max-examples = {MAX_EXAMPLES}
deterministic = true
database = "none"

[warnings]
# No operation reached only with 401/403 (missing_auth) or only with 404 (missing_test_data), and no
# schema problem schemathesis can see. Not `validation_mismatch`: saves are checked beyond what JSON
# Schema can say (below), so for some operations a scenario's valid-looking data is all refused.
fail-on = ["missing_auth", "missing_test_data", "base_url_mismatch", "missing_deserializer",
           "unused_openapi_auth", "unsupported_regex", "unresolvable_reference", "method_not_allowed"]

[checks]
# DELETE archives: the entry stays readable (`archived: true`) and restorable, as documented.
use_after_free.enabled = false

[phases.stateful.inference]
# Follow the schema's own links; dependency analysis pairs a `name` in one entry's body with
# another entry's URL.
algorithms = ["location-headers"]

[phases.stateful.generation]
# Scenarios (chains of linked calls); each is short, and this phase finds what the others cannot.
max-examples = {STATEFUL_EXAMPLES}

[[operations]]
# A save is validated beyond its JSON Schema: templates must compile and declare their variables,
# inputSchemas must be valid JSON Schemas, URLs must pass the SSRF guard, titles must be
# display-safe, a body's name must be the URL's; so schema-valid data may be refused with 422.
# 412: a generated If-Match names a version that is not the newest. 400: for optional headers it
# cannot generate (If-Match's pattern), schemathesis sends "0", which is not an entity tag.
include-operation-id = {json.dumps(writes)}
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "412", "422"]

[[operations]]
# Previews and test runs take arguments the prompt or tool must declare; tokens may not expire in
# the past, and the teams a token joins must exist: semantic checks, answered 422.
include-operation-id = ["renderPrompt", "testTool", "createToken", "setTokenTeams"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
# A version or label named in the body that does not exist is a 404 for it, not for the entry.
checks.ensure_resource_availability.enabled = false

[[operations]]
# An entry's move names a team that must exist (as a create's `team` does): 422 otherwise.
include-operation-id = ["movePromptTeam", "moveResourceTeam", "moveToolTeam"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422"]

[[operations]]
# The same for a label move's version, and for a label the entry was created without.
include-operation-id = {json.dumps(label_ops)}
checks.ensure_resource_availability.enabled = false

[[operations]]
# Change requests: a generated one names an entry, version or label that may not exist or not be
# protected (404, 409); a generated state may not allow the step (409); overriding checks needs a
# reason, which JSON Schema cannot tie to the flag (422).
include-operation-id = {json.dumps(review_ops)}
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
checks.ensure_resource_availability.enabled = false

[[operations]]
# Bundles: generated files are rarely valid entry files (YAML, templates, schemas: 422), a history
# file may conflict with the catalog (409), and an export cannot take a label and all_versions at once.
include-operation-id = ["planBundle", "applyBundle", "exportBundle"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
# Event subscriptions: a generated URL is refused by the SSRF guard (the test server allows no
# network), a generated secret may not decode to 24-64 bytes, a filter's team or label may not be
# a valid name: semantic checks, answered 422; past the count bound, 409.
include-operation-id = ["createEventSubscription", "updateEventSubscription", "rotateEventSubscriptionSecret"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
checks.ensure_resource_availability.enabled = false
"""
    path = tmp_path / "schemathesis.toml"
    path.write_text(config, encoding="utf-8")
    return path


def test_schemathesis_finds_no_contract_violation(
    served: ServerProcess, document: dict[str, Any], tmp_path: Path
) -> None:
    with served.admin() as api:
        tokens = api.get("/api/v1/tokens").json()["items"]
        reviewer = api.post("/api/v1/tokens", json={"name": "contract-reviewer", "scopes": ["reviewer"]})
        assert reviewer.status_code == 201, reviewer.text
    protected = [t["id"] for t in tokens if t["name"] == "admin (REGISTRY_ADMIN_TOKEN)"]
    assert protected, tokens
    config = schemathesis_config(tmp_path)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        served.url + "/openapi.json",
        "--header",
        f"Authorization: Bearer {served.admin_token}",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--report",
        "har",
        "--report-dir",
        str(tmp_path / "report"),
        "--no-color",
    ]
    env = {
        **os.environ,
        "REGISTRY_TEST_PROTECTED_TOKEN_IDS": ",".join(map(str, [*protected, reviewer.json()["id"]])),
        "REGISTRY_TEST_ADMIN_TOKEN": served.admin_token,
        "REGISTRY_TEST_BASE_URL": served.url,
        "REGISTRY_TEST_REVIEWER_TOKEN": reviewer.json()["token"],
    }
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, cwd=tmp_path, check=False
    )
    output = run.stdout + run.stderr
    summary = output[output.rfind("SUMMARY") :]
    assert run.returncode == 0, f"schemathesis failed (exit {run.returncode}):\n{_tail(output)}"
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, f"phase {phase} did not pass:\n{summary}"

    # Every operation was reached: at least one answer in 2xx for each.
    har = json.loads(next((tmp_path / "report").glob("*.json")).read_text(encoding="utf-8"))
    reached = _statuses_by_operation(document, har)
    unreached = {op: dict(counts) for op, counts in reached.items() if not any(200 <= s < 300 for s in counts)}
    assert not unreached, f"operations never answered 2xx: {unreached}"
    never_called = {f"{m.upper()} {p}" for m, p, _op in operations(document, prefix="/")} - set(reached)
    assert not never_called, f"operations never called: {sorted(never_called)}"


def _statuses_by_operation(document: dict[str, Any], har: dict[str, Any]) -> dict[str, Counter[int]]:
    patterns = []
    for path, item in document["paths"].items():
        regex = re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(path)) + "$")
        patterns += [(method, regex, f"{method.upper()} {path}") for method in METHODS if method in item]
    # More specific templates first: /prompts/{name}/versions before /prompts/{name}.
    patterns.sort(key=lambda p: -p[1].pattern.count("/"))
    statuses: dict[str, Counter[int]] = defaultdict(Counter)
    for entry in har["log"]["entries"]:
        method = entry["request"]["method"].lower()
        path = "/" + entry["request"]["url"].split("/", 3)[3].split("?")[0]
        for wanted, regex, label in patterns:
            if wanted == method and regex.match(path):
                statuses[label][entry["response"]["status"]] += 1
                break
    return statuses


def _tail(text: str, lines: int = 120) -> str:
    return "\n".join(line[:400] for line in text.splitlines()[-lines:])
