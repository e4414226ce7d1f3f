"""Export/import that moves a catalog: full history, labels, archived entries and working secrets.

The acceptance test builds a catalog on SQLite (several versions per entry, an unpromoted staging
version, a moved and a deleted label, an archived entry, a webhook tool and an http resource with
write-only values), exports it with ``--all-versions`` and an export key, imports it into a fresh
PostgreSQL schema under another instance key, compares everything, and then calls the tool over
MCP against a server on the imported database: the loopback webhook gets the right header and a
signature made with the right secret.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from registry.catalog import bulk
from registry.catalog.secrets import PREFIX
from registry.catalog.values import WriteOptions
from registry.cli import main
from registry.config import Settings
from registry.db.engine import normalize_database_url
from registry.runtime import Registry
from registry.webhooks import verify
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess
from tests.webhooks.conftest import WebhookServer, webhook_server

__all__ = ["webhook_server"]

LOOPBACK = "127.0.0.0/8"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads REGISTRY_* settings from the environment; each step here sets its own."""
    for name in list(os.environ):
        if name.startswith("REGISTRY_") and not name.startswith("REGISTRY_TEST_"):
            monkeypatch.delenv(name)


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, database_url: str, data_dir: Path, /, *args: str, **env: str) -> tuple[int, str, str]:
        """``mcp-registry <args>`` against ``database_url`` with the instance key and ``env`` set."""
        with self.monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            self.capsys.readouterr()
            code = main([*args, "--database-url", database_url, "--data-dir", str(data_dir)])
            captured = self.capsys.readouterr()
        return code, captured.out, captured.err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(capsys, monkeypatch)


def _registry(url: str, data_dir: Path, key: str) -> Registry:
    registry = Registry(
        Settings(data_dir=data_dir, database_url=url, secret_key=key, webhook_allowed_networks=LOOPBACK)
    )
    registry.prepare()
    return registry


def build_catalog(registry: Registry, hook: WebhookServer) -> None:
    """A catalog with history: what an export must carry over exactly."""
    catalog = registry.catalog
    catalog.create(
        "prompt",
        {"name": "summarize", "template": "v1 {{ text }}", "arguments": [{"name": "text"}]},
        WriteOptions(actor="alice", note="first draft"),
    )
    catalog.update(
        "prompt",
        "summarize",
        {"template": "v2 {{ text }}", "arguments": [{"name": "text"}]},
        WriteOptions(actor="bob", note="better"),
    )
    catalog.update(
        "prompt",
        "summarize",
        {"template": "v3 {{ text }}", "arguments": [{"name": "text"}]},
        WriteOptions(actor="carol", note="trying something", labels=["staging"]),
    )  # unpromoted
    catalog.create("prompt", {"name": "pinned", "template": "one"}, WriteOptions(actor="alice"))
    catalog.update("prompt", "pinned", {"template": "two"}, WriteOptions(actor="alice"))
    catalog.set_label("prompt", "pinned", "canary", 1, WriteOptions(actor="alice"))
    catalog.delete_label("prompt", "pinned", "production", WriteOptions(actor="alice"))
    catalog.create("prompt", {"name": "retired", "template": "old"}, WriteOptions(actor="dave"))
    catalog.set_archived("prompt", "retired", True, WriteOptions(actor="dave"))
    catalog.create(
        "resource",
        {"name": "sprint", "kind": "template", "uriTemplate": "sprint://{team}", "text": "Team {{ team }}"},
        WriteOptions(actor="erin"),
    )
    catalog.create(
        "resource",
        {
            "name": "status",
            "kind": "http",
            "uri": "status://payments",
            "url": hook.url("/inspect"),
            "headers": {"Authorization": "Bearer res-secret"},
        },
        WriteOptions(actor="erin"),
    )
    tool: dict[str, Any] = {
        "name": "payments",
        "description": "Charge a card",
        "inputSchema": {"type": "object", "properties": {"amount": {"type": "number"}}},
        "webhook": {"url": hook.url("/inspect"), "headers": {"X-Api-Key": "key-123"}, "secret": "hook-secret-1"},
    }
    catalog.create("tool", tool, WriteOptions(actor="frank", note="v1"))
    rotated = {**tool, "webhook": {**tool["webhook"], "headers": {"X-Api-Key": "key-456"}, "secret": "hook-secret-2"}}
    catalog.update("tool", "payments", rotated, WriteOptions(actor="frank", note="rotated", labels=["staging"]))


def describe(registry: Registry) -> dict[tuple[str, str], dict[str, Any]]:
    """Everything an export must reproduce, write-only values decrypted (each side's own key)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    with registry.bundles.bulk_reader() as session:
        for kind in ("prompt", "resource", "tool"):
            for entry in bulk.iter_histories(session, kind):
                found[(kind, entry.name)] = {
                    "archived": entry.archived,
                    "created_at": entry.created_at,
                    "updated_at": entry.updated_at,
                    "labels": entry.labels,
                    "versions": [
                        (v.number, v.author, v.note, v.created_at, registry.catalog.reveal(kind, v.spec))
                        for v in entry.versions
                    ],
                }
    return found


def stored_blob(url: str) -> str:
    engine = create_engine(normalize_database_url(url))
    try:
        with engine.connect() as conn:
            return " ".join(conn.execute(text("SELECT CAST(spec AS TEXT) FROM entry_versions")).scalars())
    finally:
        engine.dispose()


@pytest.fixture
def target_postgres(postgres_url: str) -> str:
    """The import's target: a fresh schema on PostgreSQL."""
    return postgres_url


def _call(server: ServerProcess, label: str | None, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    path = "/mcp" + (f"?label={label}" if label else "")
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        client = StreamableHttpClient(http, path=path)
        client.initialize("2025-11-25")
        answer = client.request(name, arguments, request_id=7)
    assert "result" in answer, answer
    return dict(answer["result"])


def test_all_versions_export_moves_a_catalog_from_sqlite_to_postgres(
    cli: Cli, tmp_path: Path, target_postgres: str, webhook_server: WebhookServer
) -> None:
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    source = _registry(source_url, tmp_path / "source", "source-instance-key")
    try:
        build_catalog(source, webhook_server)
        expected = describe(source)
    finally:
        source.close()

    bundle = tmp_path / "bundle"
    code, out, err = cli(
        source_url, tmp_path / "source", "export", str(bundle), "--all-versions",
        REGISTRY_SECRET_KEY="source-instance-key", REGISTRY_EXPORT_KEY="the export passphrase",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("wrote 6 files to ")
    exported = "".join(p.read_text() for p in bundle.rglob("*") if p.is_file())
    for clear in ("key-123", "key-456", "hook-secret-1", "hook-secret-2", "res-secret"):
        assert clear not in exported  # encrypted under the export key, never in the clear
    assert "********" not in exported and PREFIX not in exported
    assert (bundle / "export.yaml").is_file() and (bundle / "README.md").is_file()

    # The import needs the same export key: wrong or missing, it is refused and writes nothing.
    target_dir = tmp_path / "target"
    instance = {"REGISTRY_SECRET_KEY": "target-instance-key", "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": LOOPBACK}
    code, _, err = cli(target_postgres, target_dir, "import", str(bundle), "--secrets-key", "guess", **instance)
    assert code == 2 and "not the one this bundle was written with" in err
    code, _, err = cli(target_postgres, target_dir, "import", str(bundle), **instance)
    assert code == 2 and "--secrets-key" in err
    code, out, err = cli(
        target_postgres, target_dir, "import", str(bundle), "--secrets-key", "the export passphrase", **instance
    )
    assert code == 0, err
    assert out.splitlines()[-1] == "changed 6 of 6 entries"

    target = _registry(target_postgres, target_dir, "target-instance-key")
    try:
        assert describe(target) == expected
        # Re-sealed under the target's own key: the source's ciphertexts are not what it stores.
        assert "key-123" not in stored_blob(target_postgres)
        assert stored_blob(target_postgres).count(PREFIX) == 5
        # Importing the same bundle again changes nothing.
        code, out, _ = cli(
            target_postgres, target_dir, "import", str(bundle), "--secrets-key", "the export passphrase", **instance
        )
        assert code == 0 and out.splitlines()[-1] == "changed 0 of 6 entries"
    finally:
        target.close()

    # Exported again (from PostgreSQL now), the history files are byte for byte the source's.
    again_src, again_dst = tmp_path / "again-src", tmp_path / "again-dst"
    assert cli(source_url, tmp_path / "source", "export", str(again_src), "--all-versions", "--secrets", "env",
               REGISTRY_SECRET_KEY="source-instance-key")[0] == 0  # fmt: skip
    assert cli(target_postgres, target_dir, "export", str(again_dst), "--all-versions", "--secrets", "env",
               REGISTRY_SECRET_KEY="target-instance-key")[0] == 0  # fmt: skip
    history_of = {p.relative_to(again_src).as_posix(): p.read_bytes() for p in (again_src / "history").rglob("*.yaml")}
    assert len(history_of) == 6
    assert {p.relative_to(again_dst).as_posix(): p.read_bytes() for p in (again_dst / "history").rglob("*.yaml")} == (
        history_of
    )

    server = ServerProcess(
        tmp_path / "server",
        database_url=target_postgres,
        env={"REGISTRY_SECRET_KEY": "target-instance-key", "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": LOOPBACK},
    )
    with server:
        for label, key, secret in ((None, "key-123", "hook-secret-1"), ("staging", "key-456", "hook-secret-2")):
            result = _call(server, label, "tools/call", {"name": "payments", "arguments": {"amount": 5}})
            assert result["isError"] is False, result
            seen = result["structuredContent"]
            assert seen["headers"]["x-api-key"] == key
            assert verify(secret, seen["body"].encode(), seen["headers"]["x-registry-signature"])
        assert "v2 hi" in json.dumps(
            _call(server, None, "prompts/get", {"name": "summarize", "arguments": {"text": "hi"}})
        )
        assert "v3 hi" in json.dumps(
            _call(server, "staging", "prompts/get", {"name": "summarize", "arguments": {"text": "hi"}})
        )
        contents = _call(server, None, "resources/read", {"uri": "status://payments"})["contents"]
        assert json.loads(contents[0]["text"])["headers"]["authorization"] == "Bearer res-secret"


@pytest.fixture
def source(tmp_path: Path, webhook_server: WebhookServer) -> Iterator[tuple[str, Path]]:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    registry = _registry(url, tmp_path / "source", "source-instance-key")
    try:
        build_catalog(registry, webhook_server)
    finally:
        registry.close()
    yield url, tmp_path / "source"


SOURCE_ENV = {"REGISTRY_SECRET_KEY": "source-instance-key", "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": LOOPBACK}
TARGET_ENV = {"REGISTRY_SECRET_KEY": "target-instance-key", "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": LOOPBACK}


def test_an_export_with_secrets_asks_how_to_carry_them(cli: Cli, tmp_path: Path, source: tuple[str, Path]) -> None:
    code, _, err = cli(*source, "export", str(tmp_path / "out"), **SOURCE_ENV)
    assert code == 2
    assert "2 entries hold write-only values" in err and "resource status" in err and "tool payments" in err
    assert "--secrets-key KEY" in err and "--secrets env" in err and "--secrets mask" in err
    assert not (tmp_path / "out").exists()
    code, _, err = cli(*source, "export", str(tmp_path / "out"), "--all-versions", "--secrets", "mask", **SOURCE_ENV)
    assert code == 2 and "a history export cannot mask them" in err


def test_env_references_are_resolved_at_import(cli: Cli, tmp_path: Path, source: tuple[str, Path]) -> None:
    bundle = tmp_path / "bundle"
    code, out, err = cli(*source, "export", str(bundle), "--all-versions", "--secrets", "env", **SOURCE_ENV)
    assert code == 0, err
    names = ["PAYMENTS_API_KEY", "PAYMENTS_API_KEY_2", "PAYMENTS_WEBHOOK_SECRET", "PAYMENTS_WEBHOOK_SECRET_2",
             "STATUS_AUTHORIZATION"]  # fmt: skip
    for name in names:
        assert name in out and f"`{name}`" in (bundle / "README.md").read_text()
    tool_file = (bundle / "history" / "tools" / "payments.yaml").read_text()
    assert "${env:PAYMENTS_API_KEY}" in tool_file and "${env:PAYMENTS_API_KEY_2}" in tool_file
    assert "key-123" not in tool_file

    values = {
        "PAYMENTS_API_KEY": "key-123",
        "PAYMENTS_API_KEY_2": "key-456",
        "PAYMENTS_WEBHOOK_SECRET": "hook-secret-1",
        "PAYMENTS_WEBHOOK_SECRET_2": "hook-secret-2",
        "STATUS_AUTHORIZATION": "Bearer res-secret",
    }
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    missing = {k: v for k, v in values.items() if k != "PAYMENTS_API_KEY_2"}
    code, _, err = cli(target_url, tmp_path / "target", "import", str(bundle), **TARGET_ENV, **missing)
    assert code == 2
    assert f"{bundle / 'history' / 'tools' / 'payments.yaml'}:" in err
    assert "versions.1.spec.webhook.headers.X-Api-Key: environment variable PAYMENTS_API_KEY_2 is not set" in err
    engine = create_engine(normalize_database_url(target_url))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM entries")).scalar_one() == 0
    engine.dispose()

    code, _, err = cli(target_url, tmp_path / "target", "import", str(bundle), **TARGET_ENV, **values)
    assert code == 0, err
    source_registry = Registry(Settings(data_dir=source[1], database_url=source[0], secret_key="source-instance-key"))
    target = Registry(Settings(data_dir=tmp_path / "target", database_url=target_url, secret_key="target-instance-key"))
    try:
        assert describe(target) == describe(source_registry)
    finally:
        source_registry.close()
        target.close()


def test_label_export_and_a_history_import_into_a_catalog_that_has_the_entries(
    cli: Cli, tmp_path: Path, source: tuple[str, Path]
) -> None:
    staging = tmp_path / "staging"
    code, out, err = cli(*source, "export", str(staging), "--label", "staging", "--secrets", "mask", **SOURCE_ENV)
    assert code == 0, err
    assert sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*.yaml")) == [
        "prompts/summarize.yaml",
        "tools/payments.yaml",
    ]
    assert "v3 {{ text }}" in (staging / "prompts" / "summarize.yaml").read_text()

    history = tmp_path / "history"
    key = "k-" + secrets.token_hex(4)
    assert cli(*source, "export", str(history), "--all-versions", "--secrets-key", key, **SOURCE_ENV)[0] == 0
    # Into the catalog it came from: every entry is already there, identical.
    code, out, _ = cli(*source, "import", str(history), "--plan", "--secrets-key", key, **SOURCE_ENV)
    assert code == 0 and out.splitlines()[-1] == "would change 0 of 6 entries"
    assert all(line.startswith("unchanged ") for line in out.splitlines()[:-1])

    # After an edit there, the entry's history differs: the import is refused whole.
    registry = Registry(Settings(data_dir=source[1], database_url=source[0], secret_key="source-instance-key"))
    try:
        registry.catalog.update("prompt", "pinned", {"template": "three"}, WriteOptions(actor="zoe"))
        before = describe(registry)
    finally:
        registry.close()
    code, out, _ = cli(*source, "import", str(history), "--plan", "--secrets-key", key, **SOURCE_ENV)
    assert code == 1
    assert "conflict       prompt    pinned" in out
    assert "-template: three" in out and "+template: two" in out
    assert "the import would be refused: 1 entries exist here with another history" in out
    code, _, err = cli(*source, "import", str(history), "--secrets-key", key, **SOURCE_ENV)
    assert code == 2 and "prompt pinned" in err and "nothing was written" in err
    registry = Registry(Settings(data_dir=source[1], database_url=source[0], secret_key="source-instance-key"))
    try:
        assert describe(registry) == before
    finally:
        registry.close()


def test_a_broken_history_file_is_reported_with_field_and_line(
    cli: Cli, tmp_path: Path, source: tuple[str, Path]
) -> None:
    bundle = tmp_path / "bundle"
    assert cli(*source, "export", str(bundle), "--all-versions", "--secrets-key", "k", **SOURCE_ENV)[0] == 0
    summarize = bundle / "history" / "prompts" / "summarize.yaml"
    summarize.write_text(summarize.read_text().replace("staging: 3", "staging: 9"))
    pinned = bundle / "history" / "prompts" / "pinned.yaml"
    pinned.write_text(pinned.read_text().replace("template: two", "template: '{{ nobody }}'"))
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    code, _, err = cli(target_url, tmp_path / "target", "import", str(bundle), "--secrets-key", "k", **TARGET_ENV)
    assert code == 2
    assert "2 of 6 bundle files are invalid" in err
    assert f"{summarize}:1: label 'staging' points at version 9, which the file does not have" in err
    lines = pinned.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "nobody" in text)
    assert f"{pinned}:{line}: versions.1.spec.template: uses undeclared variable(s) nobody" in err
