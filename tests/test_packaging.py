"""A non-editable install carries what the server needs at run time (migrations, bundles, UI)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("mcp_registry-*.whl")
    return built


def test_the_wheel_carries_migrations_bundles_and_the_ui(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "registry/_migrations/env.py",
        "registry/_migrations/versions/0001_initial_schema.py",
        "registry/_seed_data/demo/prompts/summarize.yaml",
        "registry/_seed_data/conformance/tools/test_simple_text.yaml",
        "registry/_admin_ui/static/index.html",
    ):
        assert expected in names, expected


def test_an_installed_copy_serves_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    # The installed copy comes first; the test venv supplies the dependencies.
    env.update(PYTHONPATH=str(target), REGISTRY_ADMIN_TOKEN=ADMIN_TOKEN)
    where = subprocess.run(
        [sys.executable, "-c", "import registry, registry.paths as p; print(registry.__file__, p.seed_data_dir())"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(target) in where and str(ROOT) not in where, where
    proc = subprocess.Popen(
        [sys.executable, "-m", "registry", "serve", "--port", str(port)],
        cwd=empty,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)
        assert (empty / "data" / "registry.db").exists()
        prompts = httpx.get(url + "/api/v1/prompts", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).json()
        assert "summarize" in [p["name"] for p in prompts["items"]]  # the demo bundle was found and loaded
        assert "mcp-registry" in httpx.get(url + "/ui/").text  # and the UI assets
    finally:
        proc.terminate()
        proc.wait(timeout=15)
