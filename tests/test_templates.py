"""The template sandbox (unit tests on registry.catalog.templates) and rendering the demo prompts over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import httpx
import pytest

from registry.catalog.render_runner import RenderRunner
from registry.catalog.templates import (
    CompiledTemplate,
    TemplateError,
    check_template,
    render_template,
    template_variables,
)
from registry.limits import Limits
from registry.runtime import Registry
from tests.costs import measured
from tests.waiting import wait_until_async

PROBLEM = "application/problem+json"
MiB = 1024 * 1024

# --------------------------------------------------------------------------- sandbox (no database)


def test_renders_declared_variables() -> None:
    assert render_template("Hi {{ who }}{% if n %} x{{ n }}{% endif %}", {"who": "Ada", "n": "2"}) == "Hi Ada x2"
    assert render_template("{% for i in range(3) %}{{ i }}{% endfor %}", {}) == "012"
    assert render_template("line\n", {}) == "line\n"  # trailing newline kept


@pytest.mark.parametrize(
    "source",
    [
        "{{ x.__class__ }}",
        "{{ x.__class__.__mro__[1].__subclasses__() }}",
        "{{ x.__init__.__globals__ }}",
        "{{ range.__globals__ }}",
    ],
)
def test_sandbox_refuses_attribute_games(source: str) -> None:
    with pytest.raises(TemplateError) as excinfo:
        render_template(source, {"x": "text"})
    message = str(excinfo.value)
    assert "sandbox" in message or "undefined" in message
    assert "<class" not in message


def test_strict_undefined_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(TemplateError, match="'missing' is undefined"):
        render_template("Hello {{ missing }}!", {})
    with pytest.raises(TemplateError, match="undefined"):
        render_template("{% if missing %}yes{% endif %}", {})
    with pytest.raises(TemplateError, match="has no attribute 'nope'"):
        render_template("{{ who.nope }}", {"who": "Ada"})


def test_output_is_capped() -> None:
    loop = CompiledTemplate("{% for i in range(200) %}0123456789{% endfor %}")
    assert len(loop.render({}, max_chars=2000)) == 2000
    with pytest.raises(TemplateError, match="exceeds 1999 characters"):
        loop.render({}, max_chars=1999)
    with pytest.raises(TemplateError, match="exceed"):
        CompiledTemplate("{{ text }}").render({"text": "x" * 5000}, max_chars=1000)


def test_repetition_cannot_build_huge_values() -> None:
    """``"x" * n`` is one Python operation: refused before it allocates, not after."""
    repeat, width = CompiledTemplate("{{ 'x' * 10 ** 10 }}"), CompiledTemplate("{{ '-' * (width | int) }}")
    with measured(memory=True) as cost:
        with pytest.raises(TemplateError, match="exceed"):
            repeat.render({})
        with pytest.raises(TemplateError, match="exceed"):
            width.render({"width": "100000000000"}, max_chars=1000)
    # Built and then refused, the values would have been 10 GB and 100 GB.
    assert cost.peak_bytes < 4 * MiB, f"{cost.peak_bytes / MiB:.0f} MiB allocated before refusing"
    assert CompiledTemplate("{{ '-' * (width | int) }}").render({"width": "5"}) == "-----"
    assert render_template("{{ 6 * 7 }} {{ [0] * 2 }}", {}) == "42 [0, 0]"


def test_huge_powers_are_refused_quickly() -> None:
    # CPU time, not the wall clock: computing 7 ** 300000000 would take this thread many seconds.
    with measured() as cost:
        _refuse_huge_powers()
    assert cost.cpu_seconds < 1, f"{cost.cpu_seconds:.2f} s of CPU to refuse"
    assert render_template("{{ 2 ** 10 }}", {}) == "1024"


def _refuse_huge_powers() -> None:
    with pytest.raises(TemplateError, match="too large"):
        CompiledTemplate("{{ (b | int) ** (e | int) > 1 }}").render({"b": "7", "e": "300000000"})
    # A constant power is not folded (computed) when the template is checked or compiled: it is
    # refused at save time from the source alone.
    with pytest.raises(TemplateError, match="too large"):
        check_template("{{ 7 ** 300000000 }}", [])
    with pytest.raises(TemplateError, match="too large"):
        CompiledTemplate("{{ 7 ** 300000000 }}").render({})


def test_runaway_loops_are_stopped_by_the_clock() -> None:
    nested = CompiledTemplate(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% if j == -1 %}x{% endif %}{% endfor %}{% endfor %}"
    )
    started = time.monotonic()
    with pytest.raises(TemplateError, match=r"took longer than .* REGISTRY_LIMIT_RENDER_SECONDS"):
        # A loop budget this large leaves the clock to stop the loops.
        nested.render({}, max_seconds=0.3, limits=Limits(render_loop_iterations=10**12))
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2, elapsed


def test_all_loops_of_a_render_share_one_iteration_budget() -> None:
    """Nested loops, loops over strings and loops in macros all draw from one budget."""
    limits = Limits(render_loop_iterations=1000)
    for source in (
        "{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}",
        "{% for i in 'x' * 40 %}{% for j in 'y' * 40 %}{% endfor %}{% endfor %}",
        "{% macro m() %}{% for j in range(600) %}{% endfor %}{% endmacro %}{{ m() }}{{ m() }}",
        "{{ range(600) | list | length }}{{ range(600) | join }}",
    ):
        # The message names the iteration budget, so it (not the clock) stopped the render.
        with measured() as cost, pytest.raises(TemplateError, match=r"more than 1000 iterations.*ITERATIONS"):
            CompiledTemplate(source).render({}, limits=limits)
        assert cost.cpu_seconds < 0.5, f"{source}: {cost.cpu_seconds:.2f} s of CPU"
    assert (
        CompiledTemplate("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}ok").render(
            {}, limits=limits
        )
        == "ok"
    )


def test_range_is_capped() -> None:
    with pytest.raises(TemplateError, match="range"):
        render_template("{% for i in range(10000000) %}{% endfor %}", {})


def test_budgets_are_per_render() -> None:
    """A slow render in one thread does not spend another render's time budget."""
    slow = CompiledTemplate(
        "{{ started() }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    errors: list[Exception] = []
    started = threading.Event()

    def run_slow() -> None:
        try:
            slow.render({"started": started.set}, max_seconds=0.5)
        except TemplateError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_slow)
    thread.start()
    assert started.wait(10), "the slow render did not start"
    quick = CompiledTemplate("{% for i in range(1000) %}{{ i }}{% endfor %}").render({}, max_seconds=5)
    thread.join()
    assert quick.startswith("0123")
    assert len(errors) == 1


def test_check_template_reports_syntax_errors_with_their_line() -> None:
    with pytest.raises(TemplateError, match=r"^text: line 3: .*") as excinfo:
        check_template("one\ntwo\n{% if x %}never closed", ["x"], where="text")
    assert "endif" in str(excinfo.value) or "end of template" in str(excinfo.value)
    with pytest.raises(TemplateError, match="line 2"):
        check_template("fine\n{{ x ", ["x"])


def test_check_template_refuses_undeclared_variables() -> None:
    with pytest.raises(TemplateError, match=r"line 2: uses undeclared variable\(s\) other, who"):
        check_template("Hello\n{{ who }} and {{ other }}", [])
    # Loop variables, {% set %} names and the range() global are not arguments.
    check_template("{% set n = 2 %}{% for i in range(n) %}{{ i }}{{ who }}{% endfor %}", ["who"])
    assert template_variables("{% for i in items %}{{ i }}{% endfor %}{{ range(2) }}") == {"items"}


# --------------------------------------------------------------------------- rendering the demo bundle

SUMMARIZE_ARGS = {
    "text": "MCP defines a standard protocol for connecting AI models to tools and data sources.",
    "max_words": 20,
}


@pytest.fixture
def demo(registry: Registry, api: httpx.Client) -> httpx.Client:
    registry.seed("demo")
    return api


def render(api: httpx.Client, name: str, arguments: dict[str, Any], **extra: Any) -> httpx.Response:
    return api.post(f"/api/v1/prompts/{name}/render", json={"arguments": arguments, **extra})


def assert_problem(response: httpx.Response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    for fragment in fragments:
        assert fragment in response.json()["detail"]


def test_render_summarize_exactly(demo: httpx.Client) -> None:
    response = render(demo, "summarize", SUMMARIZE_ARGS)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result == {
        "description": "Summarize a piece of text concisely",
        "messages": [
            {
                "role": "user",
                "content": {
                    "type": "text",
                    "text": "Summarize the following text in at most 20 words:\n\n"
                    "MCP defines a standard protocol for connecting AI models to tools and data sources.",
                },
            }
        ],
        # Which version was rendered, picked by which label (by default what agents get: production).
        "version": 1,
        "label": "production",
    }
    # The optional argument left out renders as empty (its {% if %} branch is skipped).
    text = render(demo, "summarize", {"text": "abc"}).json()["messages"][0]["content"]["text"]
    assert text == "Summarize the following text:\n\nabc"


def test_render_argument_errors_are_422(demo: httpx.Client) -> None:
    assert_problem(render(demo, "summarize", {"max_words": "5"}), 422, "missing required argument(s): text")
    assert_problem(
        render(demo, "bug-analysis-report", {"summary": "crash", "environment": "qa"}),
        422,
        "argument 'environment' must be one of: production, staging, development",
    )
    assert_problem(render(demo, "summarize", {"text": ["a", "list"]}), 422, "argument 'text' must be a string")
    assert_problem(render(demo, "no-such-prompt", {}), 404, "does not exist")


def test_render_applies_defaults(demo: httpx.Client) -> None:
    response = render(demo, "bug-analysis-report", {"summary": "Login fails"})
    assert response.status_code == 200, response.text
    text = response.json()["messages"][0]["content"]["text"]
    assert "Bug: Login fails\nEnvironment: production\n" in text
    assert "Component:" not in text
    assert "Evidence:" not in text

    review = render(demo, "code-review", {"diff": "+x = 1"}).json()["messages"]
    assert [m["role"] for m in review] == ["user", "assistant", "user"]
    assert review[0]["content"]["text"].startswith("Review this other change. Focus on correctness,")


def test_render_resolves_embedded_resource(demo: httpx.Client) -> None:
    response = render(demo, "incident-postmortem", {"title": "DB outage", "timeline": "10:00 alert\n10:05 failover"})
    assert response.status_code == 200, response.text
    first, second = response.json()["messages"]
    assert first["content"]["type"] == "resource"
    resource = first["content"]["resource"]
    assert resource["uri"] == "docs://guidelines/postmortem"
    assert resource["mimeType"] == "text/markdown"
    assert resource["text"].startswith("# Blameless postmortems\n")
    assert second["content"]["text"].startswith('Draft the postmortem for "DB outage" (SEV2) following the guidelines')
    assert "10:05 failover" in second["content"]["text"]

    # Once the resource is archived, the prompt cannot be rendered and says why.
    demo.delete("/api/v1/resources/postmortem-guidelines").raise_for_status()
    gone = render(demo, "incident-postmortem", {"title": "x", "timeline": "y"})
    assert_problem(gone, 422, "docs://guidelines/postmortem", "not available")


@pytest.mark.parametrize(
    "source",
    [
        "Hi {{ who }}, welcome to {{place}}.\n",
        "no variables at all",
        "{{ who }}{{ who }}",
        "trailing newline kept\n\n",
        "braces } and { alone stay literal",
    ],
)
def test_simple_templates_render_exactly_as_jinja_does(source: str) -> None:
    """The join-strings fast path for bare {{ name }} templates must be indistinguishable from Jinja."""
    from registry.catalog.templates import _ENV, CompiledTemplate

    compiled = CompiledTemplate(source)
    assert compiled._simple is not None
    variables = {"who": "Ada <&>", "place": "{{ not a template }}"}
    assert compiled.render(variables) == _ENV.from_string(source).render(variables)


def test_simple_templates_still_refuse_missing_variables() -> None:
    from registry.catalog.templates import CompiledTemplate

    with pytest.raises(TemplateError, match="undefined"):
        CompiledTemplate("Hi {{ who }}").render({})


# --------------------------------------------------------------------------- bounds that hold during a render


@pytest.mark.parametrize(
    "source",
    [
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = '%s%s' % (ns.s, ns.s) %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = [ns.s, ns.s] | join %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}"
        "{% set ns.s = t %}{% endfor %}",
        "{% set big = 'x' * 900000 %}{{ [big] * 1000 }}",
        "{% set big = 'x' * 900000 %}{{ ([big] * 1000) | tojson }}",
        "{% set big = 'x' * 900000 %}{{ big | replace('x', big) }}",
        "{% set w = 300000000 %}{{ 'x'.ljust(w) }}{{ '{:>{}}'.format(1, w) }}",
    ],
)
def test_values_are_sized_before_they_are_built(source: str) -> None:
    template = CompiledTemplate(source)
    refused = pytest.raises(TemplateError, match=r"exceeds 1000000 .*REGISTRY_LIMIT_RENDER_OUTPUT_CHARS")
    with measured(memory=True) as cost, refused:
        template.render({})
    # Values up to the output cap may be built (a few MB of work in all); the refused ones are
    # hundreds of MB to TB.
    assert cost.peak_bytes < 32 * MiB, f"{cost.peak_bytes / MiB:.0f} MiB allocated before refusing"


def test_many_large_intermediate_values_add_up_to_a_bound() -> None:
    """Each value is under the output cap, but keeping many of them is refused too."""
    sets = "".join(f"{{% set a{i} = big[{i}:] %}}" for i in range(64))
    with pytest.raises(TemplateError, match="intermediate values"):
        CompiledTemplate("{% set big = 'x' * 500000 %}" + sets).render({})


def test_the_sandbox_is_immutable_and_has_no_placeholder_text() -> None:
    with pytest.raises(TemplateError, match="sandbox forbids"):
        render_template("{% set l = [] %}{{ l.append(1) }}", {})
    with pytest.raises(TemplateError, match="lipsum"):
        check_template("{{ lipsum(1000) }}", [])


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ('{{ "%50000000s" % 1 }}', "REGISTRY_LIMIT_RENDER_OUTPUT_CHARS"),
        ("{{ '%.99999999f' % 1.0 }}", "REGISTRY_LIMIT_RENDER_OUTPUT_CHARS"),
        ("{{ 'x' | center(300000000) }}", "REGISTRY_LIMIT_RENDER_OUTPUT_CHARS"),
        ("{{ 'x' * 10 ** 9 }}", "REGISTRY_LIMIT_RENDER_OUTPUT_CHARS"),
        ("{% for i in range(10 ** 9) %}{% endfor %}", "REGISTRY_LIMIT_RENDER_LOOP_ITERATIONS"),
        ("{{ ''.__class__ }}", "sandbox forbids attribute '__class__'"),
        ("{% include 'x' %}", "templates stand alone"),
    ],
)
def test_save_time_check_refuses_what_is_visible_in_the_source_without_running_it(source: str, fragment: str) -> None:
    with measured(memory=True) as cost, pytest.raises(TemplateError, match="line 1") as excinfo:
        check_template(source, [])
    assert fragment in str(excinfo.value)
    # Run, each of these would take seconds of CPU or hundreds of MB.
    assert cost.cpu_seconds < 0.5 and cost.peak_bytes < 4 * MiB, cost


def test_save_time_check_follows_the_configured_limits() -> None:
    check_template("{{ 'x' | center(2000000) }}", [], limits=Limits(render_output_chars=4_000_000))
    with pytest.raises(TemplateError, match="center"):
        check_template("{{ 'x' | center(2000000) }}", [])


async def test_render_runner_lanes() -> None:
    """Simple renders run inline, light ones in the quick lane, heavy ones in the bounded lane."""
    limits = Limits(render_seconds=1.0, render_concurrency=1)
    runner = RenderRunner(limits)
    light = CompiledTemplate("{% for i in range(10) %}{{ i }}{% endfor %}")
    slow = CompiledTemplate(
        "{% set a = 'x' * 1000000 %}{% set b = 'x' * 1000000 %}"
        "{% for i in range(400) %}{% for j in range(400) %}{% if a == b %}{% endif %}{% endfor %}{% endfor %}"
    )
    caller = threading.get_ident()
    threads: list[int] = []
    heavy_now = [0, 0]  # running in the heavy lane now, most ever

    def render(template: CompiledTemplate) -> str:
        threads.append(threading.get_ident())
        heavy = threading.current_thread().name.startswith("render-heavy")
        if heavy:
            heavy_now[0] += 1
            heavy_now[1] = max(heavy_now)
        try:
            return template.render({})
        finally:
            if heavy:
                heavy_now[0] -= 1

    with contextlib.suppress(TemplateError):  # 'who' is missing: what matters is where it ran
        await runner.run(lambda: render(CompiledTemplate("Hi {{ who }}")), inline=True)
    assert threads[-1] == caller
    assert await runner.run(lambda: render(light)) == "0123456789"
    assert threads[-1] != caller

    started = time.monotonic()
    outcomes = await asyncio.gather(*(runner.run(lambda: render(slow)) for _ in range(3)), return_exceptions=True)
    elapsed = time.monotonic() - started
    messages = [str(outcome) for outcome in outcomes]
    assert all(isinstance(outcome, TemplateError) for outcome in outcomes), messages
    assert all("REGISTRY_LIMIT_RENDER_SECONDS" in m or "REGISTRY_LIMIT_RENDER_CONCURRENCY" in m for m in messages)
    assert heavy_now[1] == 1, "more heavy renders ran at once than render_concurrency"
    assert elapsed < 2.5, elapsed  # one deadline (1 s), with room for a loaded machine
    # Light renders are not held up by the heavy lane.
    heavy = asyncio.ensure_future(runner.run(lambda: render(slow)))
    await wait_until_async(lambda: heavy_now[0] == 1, "the heavy render to start")
    assert await runner.run(lambda: render(light)) == "0123456789"
    assert not heavy.done(), "the light render waited for the heavy one"
    with pytest.raises(TemplateError):
        await heavy
    runner.close()
