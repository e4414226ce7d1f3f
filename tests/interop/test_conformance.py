"""The official MCP conformance suite against a real ``mcp-registry serve --seed conformance``.

Two pinned versions of the suite (``@modelcontextprotocol/conformance``), each with its dependencies
locked: the release, 0.1.16 (``tests/interop/node``), and the newest pre-release, 0.2.0-alpha.12
(``tests/interop/conformance-next``), which knows protocol 2026-07-28. Both need Node >= 22;
``tests/interop/setup_node_tools.sh`` installs one from PyPI into ``.tools/node-venv`` and the two
suites. Without them these tests skip, except under CI (``CI`` set), where they fail.

* 0.1.16: every active server scenario must pass (the expected-failure list is empty), so a
  regression anywhere fails the test.
* 0.2.0-alpha.12 with ``--requirements 2025-11-25`` and ``--requirements 2026-07-28``: every scenario
  that revision's requirement set scores must pass. The scenarios it runs but does not score
  (pending ones, the tasks extension) are printed with their result and, where they fail, the
  reason is recorded in :data:`NOT_SCORED_REASONS`; they do not fail the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry.db.engine import normalize_database_url
from tests.conftest import fresh_postgres_schema
from tests.serve_process import ServerProcess, mcp_registry_command

pytestmark = pytest.mark.interop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_VENV_BIN = REPO_ROOT / ".tools" / "node-venv" / "bin"
NODE_TOOLS = REPO_ROOT / "tests" / "interop" / "node"
SUITE_PACKAGE = NODE_TOOLS / "node_modules" / "@modelcontextprotocol" / "conformance"
SETUP_HINT = "run `bash tests/interop/setup_node_tools.sh` to install them"

SUITE_VERSION = "0.1.16"
NEXT_TOOLS = REPO_ROOT / "tests" / "interop" / "conformance-next"
NEXT_SUITE_PACKAGE = NEXT_TOOLS / "node_modules" / "@modelcontextprotocol" / "conformance"
NEXT_SUITE_VERSION = "0.2.0-alpha.12"
MIN_NODE_MAJOR = 22

#: ``conformance list --server`` of 0.1.16 without the pending ones (json-schema-2020-12, server-sse-polling).
ACTIVE_SCENARIOS = frozenset(
    {
        "server-initialize",
        "logging-set-level",
        "ping",
        "completion-complete",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-with-logging",
        "tools-call-error",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "elicitation-sep1034-defaults",
        "server-sse-multiple-streams",
        "elicitation-sep1330-enums",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
        "dns-rebinding-protection",
    }
)
#: None: sampling and elicitation mid-call go through the webhook input round trip.
EXPECTED_FAILURES: frozenset[str] = frozenset()
#: Check statuses that make a scenario fail (as the suite's own --expected-failures counts them).
FAILING_STATUSES = frozenset({"FAILURE", "WARNING"})

#: ``-o DIR`` writes ``DIR/server-<scenario>-<ISO timestamp, ':' and '.' as '-'>/checks.json``.
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")

SERVER_START_TIMEOUT_S = 120.0
SUITE_TIMEOUT_S = 600.0


def _unavailable(reason: str) -> None:
    message = f"MCP conformance suite not available: {reason}; {SETUP_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so this fails instead of skipping)")
    pytest.skip(message)


def _suite(package_dir: Path, version: str) -> tuple[Path, Path]:
    """(node, the suite's entry script), checked for presence and versions."""
    node = NODE_VENV_BIN / "node"
    if not node.exists():
        _unavailable(f"no Node at {node}")
    manifest = package_dir / "package.json"
    if not manifest.exists():
        _unavailable(f"{package_dir} is not installed")
    # Present but wrong: a stale install is never a reason to skip.
    package = json.loads(manifest.read_text(encoding="utf-8"))
    assert package["version"] == version, (
        f"installed conformance suite is {package['version']}, the test expects {version}; {SETUP_HINT}"
    )
    node_version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True).stdout
    assert int(node_version.strip().lstrip("v").split(".")[0]) >= MIN_NODE_MAJOR, (
        f"{node} is {node_version.strip()}, need >= {MIN_NODE_MAJOR}"
    )
    bin_entry = package["bin"]["conformance"] if isinstance(package["bin"], dict) else package["bin"]
    return node, package_dir / bin_entry


@pytest.fixture
def node_tools() -> tuple[Path, Path]:
    return _suite(SUITE_PACKAGE, SUITE_VERSION)


@pytest.fixture
def next_node_tools() -> tuple[Path, Path]:
    return _suite(NEXT_SUITE_PACKAGE, NEXT_SUITE_VERSION)


@pytest.fixture(params=["sqlite", "postgresql"])
def server_database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None (the server's default, SQLite in its data dir) or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield None
        return
    server_url = os.environ.get("REGISTRY_TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("PostgreSQL run needs REGISTRY_TEST_DATABASE_URL")
    server_url = normalize_database_url(server_url)
    with fresh_postgres_schema(server_url) as url:
        yield url


@pytest.fixture
def conformance_server(tmp_path: Path, server_database: str | None) -> Iterator[str]:
    """``mcp-registry serve --seed conformance`` on a free loopback port; yields its MCP URL."""
    data_dir = tmp_path / "data"
    server = ServerProcess(
        data_dir,
        database_url=server_database,
        args=["--seed", "conformance", "--host", "127.0.0.1", "--data-dir", str(data_dir)],
        program=mcp_registry_command(),
        cwd=tmp_path,
        log_path=tmp_path / "server.log",
        bare=True,
        name="conformance-server",
    )
    try:
        server.start(wait="/healthz", timeout=SERVER_START_TIMEOUT_S)
        yield f"{server.url}/mcp"
    finally:
        server.stop()


def _scenario_results(output_dir: Path) -> dict[str, list[dict[str, object]]]:
    results: dict[str, list[dict[str, object]]] = {}
    for checks_file in sorted(output_dir.glob("*/checks.json")):
        match = _RESULT_DIR.match(checks_file.parent.name)
        assert match, f"unexpected results folder name {checks_file.parent.name!r}"
        scenario = match["scenario"]
        assert scenario not in results, f"scenario {scenario} ran twice"
        results[scenario] = json.loads(checks_file.read_text(encoding="utf-8"))
    return results


def _describe(checks: list[dict[str, object]]) -> str:
    return (
        "; ".join(
            f"[{c.get('id')}] {c.get('status')}: {c.get('errorMessage') or c.get('description')}"
            for c in checks
            if c.get("status") in FAILING_STATUSES
        )
        or "no successful check"
    )


def _failing(results: dict[str, list[dict[str, object]]], *, need_success: bool = True) -> dict[str, str]:
    """Scenario -> why, for each scenario with a failing check (or, with ``need_success``, without
    a successful one)."""
    return {
        scenario: _describe(checks)
        for scenario, checks in results.items()
        if any(c.get("status") in FAILING_STATUSES for c in checks)
        or (need_success and not any(c.get("status") == "SUCCESS" for c in checks))
    }


def _run_suite(
    node: Path, suite: Path, url: str, output_dir: Path, args: list[str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    env = dict(os.environ)
    # The suite's scripts start `node` from PATH: the pinned one must win over the system's.
    env["PATH"] = f"{NODE_VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    command = [str(node), str(suite), "server", "--url", url, "-o", str(output_dir), *args]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    output = run.stdout + run.stderr
    summary = output[output.find("=== SUMMARY ===") :] if "=== SUMMARY ===" in output else output[-4000:]
    print(summary)
    return run, output


def test_conformance_suite(node_tools: tuple[Path, Path], conformance_server: str, tmp_path: Path) -> None:
    node, suite = node_tools
    output_dir = tmp_path / "results"
    args: list[str] = []
    if EXPECTED_FAILURES:
        expected_failures = tmp_path / "expected-failures.yml"
        expected_failures.write_text(
            "server:\n" + "".join(f"  - {name}\n" for name in sorted(EXPECTED_FAILURES)), encoding="utf-8"
        )
        args = ["--expected-failures", str(expected_failures)]
    run, output = _run_suite(node, suite, conformance_server, output_dir, args)
    summary = output[output.find("=== SUMMARY ===") :] if "=== SUMMARY ===" in output else output[-4000:]

    results = _scenario_results(output_dir)
    assert set(results) == ACTIVE_SCENARIOS, (
        f"scenarios run differ from the active ones: missing {sorted(ACTIVE_SCENARIOS - set(results))}, "
        f"unexpected {sorted(set(results) - ACTIVE_SCENARIOS)}\n{summary}"
    )
    failing = _failing(results)
    unexpected = {name: why for name, why in failing.items() if name not in EXPECTED_FAILURES}
    assert not unexpected, "scenarios that should pass failed:\n" + "\n".join(
        f"  {name}: {why}" for name, why in sorted(unexpected.items())
    )
    now_passing = sorted(EXPECTED_FAILURES - set(failing))
    assert not now_passing, f"expected failures now pass; remove them from EXPECTED_FAILURES: {now_passing}"
    # The suite agrees: it exits 0 only if nothing (beyond the expected failures) failed.
    assert run.returncode == 0, f"conformance exited {run.returncode}:\n{output[-8000:]}"


# ------------------------------------------------------------------ 0.2.0-alpha.12, per revision

#: What ``--requirements <revision>`` scores in 0.2.0-alpha.12 (its ``requirements/*.yaml``).
SCORED: dict[str, frozenset[str]] = {
    "2025-11-25": (ACTIVE_SCENARIOS - {"json-schema-2020-12"}),
    "2026-07-28": frozenset(
        {
            "server-stateless",
            "completion-complete",
            "tools-list",
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-error",
            "tools-call-with-progress",
            "server-sse-multiple-streams",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "sep-2164-resource-not-found",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
            "dns-rebinding-protection",
            "caching",
            "input-required-result-basic-elicitation",
            "input-required-result-basic-sampling",
            "input-required-result-basic-list-roots",
            "input-required-result-request-state",
            "input-required-result-multiple-input-requests",
            "input-required-result-multi-round",
            "input-required-result-missing-input-response",
            "input-required-result-non-tool-request",
            "input-required-result-result-type",
            "input-required-result-unsupported-methods",
            "input-required-result-tampered-state",
            "input-required-result-capability-check",
            "input-required-result-ignore-extra-params",
            "input-required-result-validate-input",
        }
    ),
}
#: Scored scenarios allowed to fail, per revision, with the reason (none today).
NEXT_EXPECTED_FAILURES: dict[str, dict[str, str]] = {"2025-11-25": {}, "2026-07-28": {}}
_TASKS = "the io.modelcontextprotocol/tasks extension is not implemented (not scored: extension)"
#: Why the scenarios a revision runs but does not score fail, where they do (printed, not asserted).
NOT_SCORED_REASONS: dict[str, str] = {
    **{
        f"tasks-{name}": _TASKS
        for name in (
            "lifecycle",
            "capability-negotiation",
            "wire-fields",
            "request-state-removal",
            "mrtr-input",
            "request-headers",
            "dispatch-and-envelope",
            "required-task-error",
            "mrtr-composition",
        )
    },
    "http-custom-header-server-validation": "pending: no tool declares x-mcp-header (Mcp-Param-* not validated)",
    "server-sse-polling": "pending",
}


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_conformance_next_requirements(
    next_node_tools: tuple[Path, Path], conformance_server: str, tmp_path: Path, revision: str
) -> None:
    node, suite = next_node_tools
    output_dir = tmp_path / "results"
    _run, output = _run_suite(node, suite, conformance_server, output_dir, ["--requirements", revision])
    results = _scenario_results(output_dir)
    # As the suite counts: a scenario whose checks were all skipped (server-sse-polling when nothing
    # is resumable) has not failed.
    failing = _failing(results, need_success=False)
    scored = SCORED[revision]
    print(f"\nconformance {NEXT_SUITE_VERSION} --requirements {revision}, per scenario:")
    for scenario in sorted(results):
        kind = "scored" if scenario in scored else "not scored"
        verdict = "FAIL" if scenario in failing else "pass"
        reason = f" ({NOT_SCORED_REASONS.get(scenario, failing[scenario])})" if scenario in failing else ""
        print(f"  {verdict} [{kind}] {scenario}{reason}")

    assert scored <= set(results), f"scored scenarios that did not run: {sorted(scored - set(results))}"
    expected = NEXT_EXPECTED_FAILURES[revision]
    unexpected = {name: why for name, why in failing.items() if name in scored and name not in expected}
    assert not unexpected, f"{revision} scenarios that should pass failed:\n" + "\n".join(
        f"  {name}: {why}" for name, why in sorted(unexpected.items())
    )
    now_passing = sorted(set(expected) - set(failing))
    assert not now_passing, f"expected failures now pass; remove them from NEXT_EXPECTED_FAILURES: {now_passing}"
    # Unscored failures need a recorded reason, so a new one is noticed.
    unexplained = sorted(name for name in failing if name not in scored and name not in NOT_SCORED_REASONS)
    assert not unexplained, f"unscored scenarios failing without a recorded reason: {unexplained}"
    assert "Server test error" not in output, output[-4000:]
