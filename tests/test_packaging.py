"""A non-editable install carries what the server needs at run time (migrations, bundles, UI)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ADMIN_TOKEN
from tests.serve_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


#: What building the wheel reads; the copy leaves out what running the suite writes meanwhile.
SOURCES = ("pyproject.toml", "README.md", "registry", "migrations", "seed_data", "admin_ui")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the sources: tests running alongside write bytecode into
    migrations/ (Alembic imports the revisions), and a build listing ``**/*`` there once tried to copy
    a ``.pyc`` that Python had just renamed into place (ENOENT)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
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
        "registry/_admin_ui/templates/base.html",
        "registry/_admin_ui/static/ui.css",
        "registry/_admin_ui/static/vendor/htmx/htmx.min.js",
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
    # The installed copy comes first; the test venv supplies the dependencies.
    server = ServerProcess(
        empty / "data",
        admin_token=ADMIN_TOKEN,
        env={"PYTHONPATH": str(target)},
        cwd=empty,
        log_level="info",  # the default
        bare=True,
        name="installed-registry",
    )
    where = subprocess.run(
        [sys.executable, "-c", "import registry, registry.paths as p; print(registry.__file__, p.seed_data_dir())"],
        cwd=empty,
        env=server.environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(target) in where and str(ROOT) not in where, where
    with server, server.admin() as admin, server.client() as anonymous:
        assert (empty / "data" / "registry.db").exists()
        prompts = admin.get("/api/v1/prompts").json()
        assert "summarize" in [p["name"] for p in prompts["items"]]  # the demo bundle was found and loaded
        assert "mcp-registry" in anonymous.get("/ui/signin").text  # and the UI's templates
