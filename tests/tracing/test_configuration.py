"""When tracing is on, and that off it loads nothing of the SDK."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from registry import tracing
from registry.tracing.sdk import Tracing
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_SERVICE_NAME": "registry"}, False),
    ],
)
def test_the_standard_variables_turn_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert tracing.enabled(environ) is on


def test_an_exporter_or_protocol_it_does_not_ship_is_refused() -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER"):
        Tracing.from_environment(environ={"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(ValueError, match="http/protobuf"):
        Tracing.from_environment(environ={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_tracing_off_imports_no_sdk_and_no_tracing_module(tmp_path: Path) -> None:
    """A server built with the ``OTEL_*`` variables unset: neither the SDK nor the exporter nor our
    tracing modules are loaded (FastAPI itself imports the OpenTelemetry *API*, a few small modules)."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from registry.app import create_app
        from registry.config import Settings
        from registry.runtime import Registry
        registry = Registry(Settings(data_dir=Path({str(tmp_path)!r}), secret_key="k"))
        registry.prepare()
        app = create_app(registry)
        assert app.mcp.server.handle_request == app.mcp.server.answer_request
        loaded = sorted(
            name for name in sys.modules
            if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto",
                                "registry.tracing.", "registry.mcp.tracing"))
        )
        assert not loaded, loaded
        print("ok")
        """
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_serve_and_stdio_refuse_an_unsupported_otlp_protocol_before_starting(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    code, output = run_cli([command, "--data-dir", str(tmp_path / "data")], capsys)
    assert code != 0
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc': only http/protobuf is supported" in output
    assert "Traceback" not in output
    assert not (tmp_path / "data").exists()  # refused before anything was opened
