"""Item 4 of issue 7: template caps that hold *during* a render, and renders off the event loop.

Before (each reproduced against a real server): nested loops ran to the 2 s cap on the event loop
(loops over strings past it) while /healthz waited; a string doubled in a loop reached 268 MB;
saving ``{{ "%50000000s" % 1 }}`` allocated 50 MB (Jinja folded it at compile time), ``center``,
``indent`` and ``'%.Nf'`` likewise at render; a batch of five slow prompts held the event loop for
five deadlines in a row; an agent could send any number of undeclared arguments, of any length.

Now every loop of a render draws from one iteration budget, every operation that can build a
large value is sized before it runs, sizes visible in the source are refused at save time, renders
run in worker threads under a hard deadline with bounded concurrency, and undeclared or overlong
arguments are refused with -32602 naming the problem. Each test asserts the refusal (naming the
limit), that the server kept answering while the attack ran, and a bound on the server's RSS.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.limits import DEFAULT_LIMITS
from tests.costs import measured_in
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, response_messages
from tests.security.conftest import MiB, PeakRss, ResponsivenessProbe, ask_healthz, prompts_get_asker
from tests.serve_process import ServerProcess

#: A short deadline keeps the slow-prompt tests quick; every other limit is the default.
RENDER_SECONDS = 0.5
ATTACK_PROMPTS: dict[str, dict[str, Any]] = {
    "nested-loops": {
        "template": "{% for i in range(500) %}{% for j in range(500) %}{% for k in range(500) %}"
        "{% endfor %}{% endfor %}{% endfor %}done"
    },
    "nested-string-loops": {
        "template": "{% for i in 'x' * 500 %}{% for j in 'x' * 500 %}{% for k in 'x' * 500 %}"
        "{% endfor %}{% endfor %}{% endfor %}done"
    },
    "doubling": {
        "template": "{% set ns = namespace(s='x') %}{% for i in range(28) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}"
    },
    "doubling-plus": {
        "template": "{% set ns = namespace(s='x') %}{% for i in range(28) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}{{ ns.s | length }}"
    },
    "width-from-argument": {
        "arguments": [{"name": "width", "required": True}],
        "template": '{{ (("%" ~ width ~ "s") % "x") | length }}',
    },
    "center-from-argument": {
        "arguments": [{"name": "width", "required": True}],
        "template": '{{ "x" | center(width | int) | length }}',
    },
    "indent-from-argument": {
        "arguments": [{"name": "width", "required": True}],
        "template": '{{ "a\\nb" | indent(width | int) | length }}',
    },
    "precision-from-argument": {
        "arguments": [{"name": "digits", "required": True}],
        "template": '{{ (("%." ~ digits ~ "f") % 1.0) | length }}',
    },
    # Each iteration compares two 1 MB strings: within every size limit, but slow in all.
    "slow": {
        "template": "{% set a = 'x' * 1000000 %}{% set b = 'x' * 1000000 %}"
        "{% for i in range(400) %}{% for j in range(400) %}{% if a == b %}{% endif %}{% endfor %}{% endfor %}done"
    },
}


@contextmanager
def serving(
    tmp_path_factory: pytest.TempPathFactory, name: str, render_seconds: float, prompts: Iterable[str]
) -> Iterator[ServerProcess]:
    """A server (demo catalog) with render deadline ``render_seconds`` and the named attack prompts."""
    data_dir: Path = tmp_path_factory.mktemp(name)
    env = {"REGISTRY_LIMIT_RENDER_SECONDS": str(render_seconds)}
    with ServerProcess(data_dir, name=name, env=env) as process:
        with process.admin() as api:
            for prompt in prompts:
                created = api.post("/api/v1/prompts", json={"name": prompt, **ATTACK_PROMPTS[prompt]})
                assert created.status_code == 201, created.text
        yield process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """This module's own server, with a short render deadline and every attack prompt."""
    with serving(tmp_path_factory, "template-limits", RENDER_SECONDS, ATTACK_PROMPTS) as process:
        yield process


#: The loop-budget test's deadline: long enough that only the budget can stop its renders, however
#: loaded the machine (with the short one, a starved render reached the deadline first).
ROOMY_RENDER_SECONDS = 30.0


@pytest.fixture(scope="module")
def roomy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose render deadline never comes first, with the nested-loop prompts."""
    prompts = ("nested-loops", "nested-string-loops")
    with serving(tmp_path_factory, "template-limits-roomy", ROOMY_RENDER_SECONDS, prompts) as process:
        yield process


def mcp_client(server: ServerProcess) -> Iterator[StreamableHttpClient]:
    with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-11-25")
        yield client


@pytest.fixture
def mcp(server: ServerProcess) -> Iterator[StreamableHttpClient]:
    yield from mcp_client(server)


@pytest.fixture
def roomy_mcp(roomy_server: ServerProcess) -> Iterator[StreamableHttpClient]:
    yield from mcp_client(roomy_server)


def get_prompt(client: StreamableHttpClient, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return client.request("prompts/get", {"name": name, "arguments": arguments or {}})


def assert_render_refused(answer: dict[str, Any], limit: str) -> str:
    assert "error" in answer, f"the attack rendered: {str(answer)[:200]}"
    error = answer["error"]
    assert error["code"] == -32603, error
    assert f"REGISTRY_LIMIT_{limit}" in error["message"], error["message"]
    assert "Traceback" not in error["message"] and len(error["message"]) < 500, error["message"]
    return str(error["message"])


# ------------------------------------------------------------------ loops


def test_nested_loops_stop_at_the_loop_budget(roomy_server: ServerProcess, roomy_mcp: StreamableHttpClient) -> None:
    """125 million iterations asked for; the budget stops each render, at a small fraction of that
    CPU (the loops used to run to the deadline, and past it over strings)."""
    probe = ResponsivenessProbe(prompts_get_asker(), roomy_server)
    with PeakRss(roomy_server) as rss, probe:
        for name in ("nested-loops", "nested-string-loops", "nested-loops"):
            with measured_in(roomy_server.pid) as cost:
                message = assert_render_refused(get_prompt(roomy_mcp, name), "RENDER_LOOP_ITERATIONS")
            assert f"more than {DEFAULT_LIMITS.render_loop_iterations} iterations" in message
            # ~0.15 s of CPU here when idle: the budget's work, not the deadline's.
            assert cost.cpu_seconds < RENDER_SECONDS, f"{name}: {cost.cpu_seconds:.2f} s of server CPU"
        probe.wait_for_more()  # a few probes after the attacks as well
    probe.assert_responsive()
    rss.assert_within()


# ------------------------------------------------------------------ values built during the render


def test_string_doubled_in_a_loop_stops_at_the_output_cap(server: ServerProcess, mcp: StreamableHttpClient) -> None:
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        for name in ("doubling", "doubling-plus"):
            message = assert_render_refused(get_prompt(mcp, name), "RENDER_OUTPUT_CHARS")
            assert f"exceeds {DEFAULT_LIMITS.render_output_chars}" in message, message
        probe.wait_for_more()
    probe.assert_responsive()
    rss.assert_within()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("width-from-argument", {"width": "300000000"}),
        ("center-from-argument", {"width": "300000000"}),
        ("indent-from-argument", {"width": "300000000"}),
        ("precision-from-argument", {"digits": "300000000"}),
    ],
)
def test_widths_and_precisions_from_arguments_are_bounded_at_render(
    server: ServerProcess, mcp: StreamableHttpClient, name: str, arguments: dict[str, str]
) -> None:
    """``%``-width, ``center``, ``indent`` and ``'%.Nf'`` are sized before Python allocates them."""
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        for _ in range(3):
            with measured_in(server.pid) as cost:
                message = assert_render_refused(get_prompt(mcp, name, arguments), "RENDER_OUTPUT_CHARS")
            assert "would build" in message and f"exceeds {DEFAULT_LIMITS.render_output_chars}" in message, message
            # Building 300 MB (or printing 300 million digits) would cost the server seconds of CPU.
            assert cost.cpu_seconds < 0.5, f"{cost.cpu_seconds:.2f} s of server CPU to refuse"
        probe.wait_for_more()
    probe.assert_responsive()
    rss.assert_within()
    # The same prompts with reasonable values still render.
    small = {key: "12" for key in arguments}
    answer = get_prompt(mcp, name, small)
    assert "result" in answer, answer


def test_sizes_in_the_source_are_refused_at_save_time_without_being_built(server: ServerProcess) -> None:
    templates = [
        '{{ "%50000000s" % 1 }}',
        "{{ '%.99999999f' % 1.0 }}",
        "{{ 'x' | center(300000000) }}",
        "{{ 'x'.ljust(300000000) }}",
        "{% for i in range(10 ** 9) %}{% endfor %}",
        "{{ 'x' * 10 ** 9 }}",
    ]
    with server.admin() as api, PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        for index, template in enumerate(templates):
            with measured_in(server.pid) as cost:
                response = api.post("/api/v1/prompts", json={"name": f"save-{index}", "template": template})
            assert response.status_code == 422, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            detail = response.json()["detail"]
            assert "line 1" in detail and "(limit REGISTRY_LIMIT_RENDER_" in detail, detail
            assert cost.cpu_seconds < 0.5, f"saving {template!r} cost the server {cost.cpu_seconds:.2f} s of CPU"
        probe.wait_for_more()
    probe.assert_responsive()
    rss.assert_within(32 * MiB)


def test_templates_the_sandbox_would_refuse_are_refused_at_save_time(server: ServerProcess) -> None:
    with server.admin() as api:
        for template, fragment in (
            ("{{ ''.__class__.__mro__ }}", "sandbox forbids attribute '__"),
            ("{{ cycler.__init__.__globals__ }}", "sandbox forbids attribute '__"),
            ("{{ text['__class__'] }}", "sandbox forbids attribute '__class__'"),
            ("{% include 'other' %}", "include"),
            ("{{ text | urlize }}", "No filter named 'urlize'"),
        ):
            body = {"name": "sandbox", "arguments": [{"name": "text"}], "template": template}
            response = api.post("/api/v1/prompts", json=body)
            assert response.status_code == 422, response.text
            assert fragment in response.json()["detail"], response.json()["detail"]


# ------------------------------------------------------------------ off the event loop


def test_a_batch_of_slow_prompts_does_not_block_the_server(server: ServerProcess) -> None:
    """Five slow renders in one batch (2025-03-26 has batches): each ends at the deadline, in a
    worker thread, while /healthz and other prompts keep answering."""
    batch = [
        {"jsonrpc": "2.0", "id": n, "method": "prompts/get", "params": {"name": "slow", "arguments": {}}}
        for n in range(5)
    ]
    with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-03-26")
        with (
            PeakRss(server) as rss,
            ResponsivenessProbe(ask_healthz, server) as healthz,
            ResponsivenessProbe(prompts_get_asker(), server) as other_prompts,
        ):
            started = time.perf_counter()
            response = client.post(batch)
            elapsed = time.perf_counter() - started
    bound = 5 * RENDER_SECONDS + 2.0
    assert elapsed < bound, f"the batch took {elapsed:.1f} s, bound {bound:.1f} s"
    healthz.assert_responsive()
    other_prompts.assert_responsive()
    rss.assert_within()
    assert response.status_code == 200, response.text
    answers = {answer["id"]: answer for answer in response_messages(response)}
    assert sorted(answers) == list(range(5)), response.text
    for answer in answers.values():
        assert_render_refused(answer, "RENDER_SECONDS")


def test_heavy_renders_are_bounded_in_number_and_light_ones_are_not_held_up(server: ServerProcess) -> None:
    """Eight slow prompts at once: at most ``render_concurrency`` run, the others are refused at
    their deadline, and a light prompt answers meanwhile in milliseconds."""
    answers: list[dict[str, Any]] = []

    def call_slow() -> None:
        with httpx.Client(base_url=server.url, timeout=60, verify=TLS) as http:
            client = StreamableHttpClient(http)
            client.initialize("2025-11-25")
            answers.append(get_prompt(client, "slow"))

    threads = [threading.Thread(target=call_slow) for _ in range(8)]
    with PeakRss(server) as rss, ResponsivenessProbe(prompts_get_asker(), server) as probe:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(answers) == 8
    limits = {answer["error"]["message"].rsplit("REGISTRY_LIMIT_", 1)[-1] for answer in answers}
    assert limits <= {"RENDER_SECONDS)", "RENDER_CONCURRENCY)"}, limits
    probe.assert_responsive()
    rss.assert_within()


# ------------------------------------------------------------------ arguments


def test_undeclared_argument_flood_is_refused_quickly(server: ServerProcess, mcp: StreamableHttpClient) -> None:
    """Six calls with 80,000 undeclared names each (the old code went from 109 MB to 421 MB, for
    good: the names were kept). Refused at once, and a second round keeps nothing more."""
    names = {f"extra_{i:06d}": "" for i in range(80_000)}
    after_round: list[int] = []
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        for _round in range(2):
            for _ in range(6):
                with measured_in(server.pid) as cost:
                    answer = get_prompt(mcp, "summarize", {"text": "x", **names})
                # ~1.7 MB of JSON to read and parse, ~0.05 s of the server's CPU: refused before any
                # per-name work (CPU time, not the wall clock, which counts the rest of the suite too).
                assert cost.cpu_seconds < 1.0, f"the refusal cost {cost.cpu_seconds:.2f} s of server CPU"
                error = answer["error"]
                assert error["code"] == -32602, error
                assert "'extra_000000'" in error["message"] and "79995 more" in error["message"], error["message"]
                assert len(error["message"]) < 500, "the undeclared names were echoed back"
            after_round.append(server.rss())
    # Each flood's ~2 MB body is parsed on a worker thread that holds the GIL for ~30 ms: a probe
    # landing then waits that long; a loop blocked per request shows as seconds.
    probe.assert_responsive()
    # Parsing a 2 MB object of 80,000 members costs tens of MiB while it lasts (how much depends on
    # the allocator's state); the old code kept every name, 50+ MiB more per call, for good.
    rss.assert_within(128 * MiB)
    kept = after_round[1] - after_round[0]
    assert kept < 8 * MiB, f"six more floods left RSS {kept / MiB:.0f} MiB higher, bound 8 MiB"


def test_undeclared_and_overlong_arguments_are_refused_in_preview_and_over_mcp(
    server: ServerProcess, mcp: StreamableHttpClient
) -> None:
    cap = DEFAULT_LIMITS.argument_chars
    with server.admin() as api:
        preview = api.post("/api/v1/prompts/summarize/render", json={"arguments": {"text": "t", "txet": "typo"}})
        assert preview.status_code == 422, preview.text
        assert "'txet'" in preview.json()["detail"] and "accepts: text, max_words" in preview.json()["detail"]
        long_text = {"arguments": {"text": "y" * (cap + 1)}}
        preview = api.post("/api/v1/prompts/summarize/render", json=long_text)
        assert preview.status_code == 422, preview.text
        assert "REGISTRY_LIMIT_ARGUMENT_CHARS" in preview.json()["detail"], preview.json()["detail"]
    answer = get_prompt(mcp, "summarize", {"text": "y" * (cap + 1)})
    assert answer["error"]["code"] == -32602, answer
    assert "REGISTRY_LIMIT_ARGUMENT_CHARS" in answer["error"]["message"], answer["error"]["message"]
    assert len(json.dumps(answer)) < 1000, "the long value was echoed back"
    ok = get_prompt(mcp, "summarize", {"text": "y" * cap})
    assert "result" in ok, str(ok)[:300]
