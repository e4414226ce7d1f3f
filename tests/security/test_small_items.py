"""The smaller hardening items of issue 7 that belong to no numbered attack: API reference pages that
work offline (item 9), the SQLite file's mode, and an export that cannot be redirected by a symlink."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from registry.catalog.bundle_secrets import ExportSecrets
from registry.catalog.errors import Invalid
from registry.config import Settings
from registry.runtime import Registry
from tests.security.conftest import MiB, ResponsivenessProbe
from tests.serve_process import ServerProcess

ASSET = re.compile(r'(?:src|href)="([^"]+)"')


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.parametrize(("page", "marker"), [("/docs", "swagger-ui"), ("/redoc", "redoc")])
def test_reference_pages_use_only_vendored_assets(
    server: ServerProcess, healthz_probe: ResponsivenessProbe, page: str, marker: str
) -> None:
    before = server.rss()
    with server.client() as http, healthz_probe:
        response = http.get(page)
        assert response.status_code == 200
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "<script>" not in response.text, "no inline script: the CSP forbids it"
        assets = ASSET.findall(response.text)
        assert any(marker in asset for asset in assets), assets
        for asset in assets:
            assert asset.startswith("/") and not asset.startswith("//"), f"{page} loads {asset} from elsewhere"
            fetched = http.get(asset)
            assert fetched.status_code == 200, asset
            assert len(fetched.content) > 0, asset
    healthz_probe.assert_responsive()
    assert server.rss() - before < 64 * MiB, "RSS grew by more than the 64 MiB bound serving the reference pages"


@pytest.mark.parametrize(("page", "rendered"), [("/docs", 'class="opblock'), ("/redoc", "/api/v1/prompts")])
def test_reference_pages_render_with_no_network(server: ServerProcess, page: str, rendered: str) -> None:
    """A real browser, with every host but the server's loopback address unresolvable (as offline)."""
    chromium = _chromium()
    if chromium is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing; .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--virtual-time-budget=15000",
        "--dump-dom",
        server.url + page,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert rendered in result.stdout, f"{page} did not render its operations offline:\n{result.stdout[-2000:]}"


def test_sqlite_database_is_private(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", secret_key="k")
    registry = Registry(settings)
    try:
        registry.prepare()
        mode = stat.S_IMODE((tmp_path / "data" / "registry.db").stat().st_mode)
        assert mode == 0o600, f"registry.db has mode {oct(mode)}"
        for suffix in ("-wal", "-shm"):
            side = tmp_path / "data" / f"registry.db{suffix}"
            if side.exists():
                assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, f"{side.name} is readable by others"
    finally:
        registry.close()


def test_export_does_not_write_through_a_symlink(tmp_path: Path) -> None:

    settings = Settings(data_dir=tmp_path / "data", secret_key="k")
    registry = Registry(settings)
    try:
        registry.prepare(demo_if_empty=True)
        victim = tmp_path / "victim.txt"
        victim.write_text("precious\n")
        out = tmp_path / "export"
        (out / "prompts").mkdir(parents=True)
        (out / "prompts" / "summarize.yaml").symlink_to(victim)
        with pytest.raises(Invalid, match="symbolic link"):
            registry.bundles.export_catalog(out, secrets=ExportSecrets("mask"))
        assert victim.read_text() == "precious\n"

        linked = tmp_path / "export2"
        linked.mkdir()
        (linked / "prompts").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        with pytest.raises(Invalid, match="symbolic link"):
            registry.bundles.export_catalog(linked, secrets=ExportSecrets("mask"))
        assert not (tmp_path / "elsewhere").exists()
    finally:
        registry.close()
