"""Write-only webhook values: encrypted at rest, masked everywhere they are shown, kept when sent back masked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from registry.catalog.bundle_secrets import ExportSecrets
from registry.catalog.secrets import MASK, PREFIX
from registry.db.models import EntryVersion
from registry.runtime import Registry

HEADER_VALUE = "Bearer s3cr3t-value"
SECRET = "hook-secret-xyz"
CLEAR_VALUES = ("s3cr3t-value", SECRET)

TOOL = {
    "name": "deploy",
    "description": "Deploy a service",
    "inputSchema": {"type": "object", "properties": {"service": {"type": "string"}}},
    "webhook": {
        "url": "https://93.184.216.34/hooks/deploy",
        "headers": {"Authorization": HEADER_VALUE, "X-Team": "payments"},
        "secret": SECRET,
    },
}


def assert_no_clear_values(blob: str) -> None:
    for value in CLEAR_VALUES:
        assert value not in blob


def stored_specs(registry: Registry) -> list[str]:
    """Every stored version's spec as the database holds it (its JSON text)."""
    with registry.db.engine.connect() as conn:
        return list(conn.execute(text("SELECT CAST(spec AS TEXT) FROM entry_versions ORDER BY id")).scalars())


def stored_version(registry: Registry, number: int) -> dict[str, Any]:
    with registry.db.session() as session:
        spec = session.scalar(select(EntryVersion.spec).where(EntryVersion.number == number))
    assert spec is not None
    return spec


def latest_stored(registry: Registry) -> dict[str, Any]:
    found = registry.drafts.latest_stored("tool", "deploy")
    assert found is not None
    return found[1]


@pytest.fixture
def tool(api: httpx.Client) -> httpx.Client:
    created = api.post("/api/v1/tools", json=TOOL)
    assert created.status_code == 201, created.text
    return api


def test_every_view_is_masked(tool: httpx.Client, tmp_path: Path, registry: Registry) -> None:
    created_hook = tool.get("/api/v1/tools/deploy").json()["spec"]["webhook"]
    assert created_hook["headers"] == {"Authorization": MASK, "X-Team": MASK}
    assert created_hook["secret"] == MASK
    assert created_hook["url"] == TOOL["webhook"]["url"]

    updated = {**TOOL, "webhook": {**TOOL["webhook"], "headers": {"Authorization": "Bearer other-s3cr3t-value"}}}
    put = tool.put("/api/v1/tools/deploy", json=updated)
    assert put.status_code == 200
    responses = [
        put,
        tool.get("/api/v1/tools/deploy"),
        tool.get("/api/v1/tools"),
        tool.get("/api/v1/tools/deploy/versions"),
        tool.get("/api/v1/tools/deploy/versions/1"),
        tool.get("/api/v1/tools/deploy/versions/2"),
        tool.get("/api/v1/tools/deploy/diff", params={"from": 1, "to": 2}),
        tool.get("/api/v1/changes"),
    ]
    for response in responses:
        assert response.status_code == 200, response.text
        assert_no_clear_values(response.text)
        assert PREFIX not in response.text  # nor the ciphertext
    # The diff still shows that a header went away (by name), without values.
    diff = tool.get("/api/v1/tools/deploy/diff", params={"from": 1, "to": 2}).json()
    assert diff["changed"] == ["webhook"]
    assert "-    X-Team: '********'" in diff["diff"].splitlines()

    written = registry.bundles.export_catalog(tmp_path / "export", secrets=ExportSecrets("mask")).files
    assert [p.relative_to(tmp_path / "export").as_posix() for p in written] == ["tools/deploy.yaml"]
    exported = written[0].read_text()
    assert_no_clear_values(exported)
    assert PREFIX not in exported
    assert "Authorization: '********'" in exported
    assert "secret: '********'" in exported


def test_database_holds_only_ciphertext(tool: httpx.Client, registry: Registry) -> None:
    tool.put("/api/v1/tools/deploy", json={**TOOL, "description": "v2"}).raise_for_status()
    rows = stored_specs(registry)
    assert len(rows) == 2
    for row in rows:
        assert_no_clear_values(row)
        assert "payments" not in row  # every header value is write-only, not just Authorization
        assert PREFIX in row
    with registry.db.engine.connect() as conn:
        for table in ("changes", "entries"):
            dump = " ".join(str(r) for r in conn.execute(text(f"SELECT * FROM {table}")))
            assert_no_clear_values(dump)
    hook = latest_stored(registry)["webhook"]
    assert hook["headers"]["Authorization"].startswith(PREFIX)
    assert hook["secret"].startswith(PREFIX)


def test_masked_values_sent_back_keep_the_stored_ones(tool: httpx.Client, registry: Registry) -> None:
    v1 = latest_stored(registry)["webhook"]
    shown = tool.get("/api/v1/tools/deploy").json()["spec"]
    edited = {**shown, "description": "only the description changed"}
    response = tool.put("/api/v1/tools/deploy", json=edited, headers={"If-Match": '"v1"'})
    assert response.status_code == 200, response.text

    v2 = latest_stored(registry)
    assert v2["description"] == "only the description changed"
    assert v2["webhook"]["headers"] == v1["headers"]  # the same ciphertext carried over
    assert v2["webhook"]["secret"] == v1["secret"]
    revealed = registry.catalog.reveal("tool", v2)["webhook"]
    assert revealed["headers"] == {"Authorization": HEADER_VALUE, "X-Team": "payments"}
    assert revealed["secret"] == SECRET


def test_changed_values_are_encrypted_anew(tool: httpx.Client, registry: Registry) -> None:
    v1 = latest_stored(registry)["webhook"]
    hook = {
        "url": TOOL["webhook"]["url"],
        "headers": {"Authorization": "Bearer rotated-token-42", "X-Team": MASK},
        "secret": "rotated-secret-43",
    }
    tool.put("/api/v1/tools/deploy", json={**TOOL, "webhook": hook}).raise_for_status()

    v2 = latest_stored(registry)["webhook"]
    assert v2["headers"]["Authorization"] != v1["headers"]["Authorization"]
    assert v2["headers"]["Authorization"].startswith(PREFIX)
    assert v2["headers"]["X-Team"] == v1["headers"]["X-Team"]
    assert v2["secret"] != v1["secret"]
    revealed = registry.catalog.reveal("tool", latest_stored(registry))["webhook"]
    assert revealed["headers"] == {"Authorization": "Bearer rotated-token-42", "X-Team": "payments"}
    assert revealed["secret"] == "rotated-secret-43"
    for row in stored_specs(registry):
        assert "rotated-token-42" not in row
        assert "rotated-secret-43" not in row
    # Sending the same clear values again is an unchanged save: compared decrypted, nothing is written.
    same = tool.put("/api/v1/tools/deploy", json={**TOOL, "webhook": hook})
    same.raise_for_status()
    assert same.json()["version"] == 2
    assert latest_stored(registry)["webhook"] == v2
    # With another change, a clear value sent again is encrypted afresh.
    tool.put("/api/v1/tools/deploy", json={**TOOL, "description": "v3", "webhook": hook}).raise_for_status()
    v3 = latest_stored(registry)["webhook"]
    assert v3["headers"]["Authorization"] != v2["headers"]["Authorization"]
    assert registry.catalog.reveal("tool", latest_stored(registry))["webhook"]["secret"] == "rotated-secret-43"
    # Version 1 is untouched and still decrypts to the original values.
    first = registry.catalog.reveal("tool", stored_version(registry, 1))["webhook"]
    assert first["headers"]["Authorization"] == HEADER_VALUE
    assert first["secret"] == SECRET


def test_masked_value_without_a_stored_one_is_refused(tool: httpx.Client, registry: Registry) -> None:
    fresh = {**TOOL, "name": "fresh", "webhook": {**TOOL["webhook"], "headers": {"Authorization": MASK}}}
    response = tool.post("/api/v1/tools", json=fresh)
    assert response.status_code == 422
    assert "'Authorization' is masked but has no stored value" in response.json()["detail"]

    new_header = {**TOOL, "webhook": {**TOOL["webhook"], "headers": {"X-New": MASK}}}
    response = tool.put("/api/v1/tools/deploy", json=new_header)
    assert response.status_code == 422
    assert "'X-New'" in response.json()["detail"]
    no_secret = {**TOOL, "name": "nosecret", "webhook": {"url": TOOL["webhook"]["url"], "secret": MASK}}
    assert tool.post("/api/v1/tools", json=no_secret).status_code == 422
    assert len(stored_specs(registry)) == 1


def test_exported_masked_bundle_reimports_as_unchanged(tool: httpx.Client, registry: Registry, tmp_path: Path) -> None:
    registry.bundles.export_catalog(tmp_path / "bundle", secrets=ExportSecrets("mask"))
    plan = registry.bundles.plan_import(tmp_path / "bundle")
    assert [(item.kind, item.name, item.action) for item, _ in plan] == [("tool", "deploy", "unchanged")]

    # A bundle that carries a new clear value is an update.
    exported = (tmp_path / "bundle" / "tools" / "deploy.yaml").read_text()
    (tmp_path / "bundle" / "tools" / "deploy.yaml").write_text(
        exported.replace("secret: '********'", "secret: brand-new-secret")
    )
    plan = registry.bundles.plan_import(tmp_path / "bundle")
    assert [item.action for item, _ in plan] == ["update"]
