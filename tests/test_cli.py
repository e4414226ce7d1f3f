"""The `mcp-registry` command: import/export/token through `registry.cli.main`, and `serve` as a real process."""

from __future__ import annotations

import os
import re
import signal
import stat
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from registry.cli import main
from registry.config import Settings
from registry.db.engine import normalize_database_url
from registry.paths import seed_data_dir
from registry.runtime import Registry
from tests.serve_process import ServerProcess, mcp_registry_command

DEMO = seed_data_dir() / "demo"
DEMO_FILES = sorted(f"{p.parent.name}/{p.name}" for p in DEMO.glob("*/*.yaml"))

#: The CLI creates and migrates its own databases: every test here starts from an empty one.
pytestmark = pytest.mark.empty_database


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads REGISTRY_* settings from the environment; these tests pass everything explicitly."""
    for name in list(os.environ):
        if name.startswith("REGISTRY_"):
            monkeypatch.delenv(name)


class Cli:
    def __init__(self, database_url: str, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.database_url = database_url
        self.data_dir = data_dir
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*args, "--database-url", self.database_url, "--data-dir", str(self.data_dir)])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def scalar(self, sql: str) -> object:
        engine = create_engine(normalize_database_url(self.database_url))
        try:
            with engine.connect() as conn:
                return conn.execute(text(sql)).scalar_one()
        finally:
            engine.dispose()


@pytest.fixture
def cli(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(database_url, tmp_path / "data", capsys)


def test_import_plan_import_export(cli: Cli, tmp_path: Path) -> None:
    assert cli("db", "upgrade")[0] == 0
    code, out, _ = cli("import", str(DEMO), "--plan")
    assert code == 0
    lines = out.splitlines()
    assert re.fullmatch(
        r"create\s+prompt\s+summarize\s+live: latest, production", next(line for line in lines if "summarize" in line)
    )
    assert sum(1 for line in lines if line.startswith("create ")) == 9
    assert lines[-1] == "would change 9 of 9 entries"
    assert cli.scalar("SELECT COUNT(*) FROM entries") == 0
    assert cli.scalar("SELECT COUNT(*) FROM changes") == 0

    code, out, _ = cli("import", str(DEMO), "--actor", "ci-bot")
    assert code == 0
    assert out.splitlines()[-1] == "changed 9 of 9 entries"
    assert cli.scalar("SELECT COUNT(*) FROM entries") == 9
    assert cli.scalar("SELECT COUNT(DISTINCT author) FROM entry_versions") == 1
    assert cli.scalar("SELECT MIN(author) FROM entry_versions") == "ci-bot"

    code, out, _ = cli("import", str(DEMO))
    assert code == 0
    assert all(line.startswith("unchanged ") for line in out.splitlines()[:-1])
    assert out.splitlines()[-1] == "changed 0 of 9 entries"
    assert cli.scalar("SELECT COUNT(*) FROM entry_versions") == 9
    assert cli.scalar("SELECT COUNT(*) FROM changes WHERE kind = 'prompt' OR kind = 'resource' OR kind = 'tool'") == 9
    assert cli.scalar("SELECT COUNT(*) FROM changes WHERE kind = 'bundle'") == 1  # the first import's event

    target = tmp_path / "exported"
    code, out, _ = cli("export", str(target))
    assert code == 0
    assert out.strip() == f"wrote 9 files to {target}"
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*.yaml")) == DEMO_FILES
    code, out, _ = cli("import", str(target), "--plan")
    assert out.splitlines()[-1] == "would change 0 of 9 entries"

    # An edited export, imported for staging only.
    summarize = target / "prompts" / "summarize.yaml"
    summarize.write_text(summarize.read_text().replace("concisely", "in one line"))
    code, out, _ = cli("import", str(target), "--label", "staging")
    assert re.search(r"^update\s+prompt\s+summarize\s+live: latest, staging$", out, re.MULTILINE)
    assert out.splitlines()[-1] == "changed 1 of 9 entries"
    assert (
        cli.scalar(
            "SELECT l.version FROM labels l JOIN entries e ON e.id = l.entry_id"
            " WHERE e.name = 'summarize' AND l.name = 'staging'"
        )
        == 2
    )
    assert (
        cli.scalar(
            "SELECT l.version FROM labels l JOIN entries e ON e.id = l.entry_id"
            " WHERE e.name = 'summarize' AND l.name = 'production'"
        )
        == 1
    )


def test_token_create(cli: Cli, database_url: str, tmp_path: Path) -> None:
    assert cli("db", "upgrade")[0] == 0
    code, out, err = cli("token", "create", "--name", "deploy-bot", "--scope", "editor", "--scope", "viewer")
    assert code == 0
    token = out.strip()
    assert re.fullmatch(r"mcpr_[A-Za-z0-9_\-]{30,}", token)
    assert "scopes editor, viewer; shown only now" in err
    assert cli.scalar("SELECT COUNT(*) FROM api_tokens") == 1
    assert cli.scalar("SELECT COUNT(*) FROM api_tokens WHERE token_hash LIKE '%mcpr_%'") == 0  # only a hash

    # The printed token works against a registry on the same database.
    registry = Registry(Settings(data_dir=tmp_path / "data", database_url=database_url))
    try:
        principal = registry.tokens.authenticate(token)
        assert principal is not None
        assert principal.name == "deploy-bot"
        assert principal.has("editor") and not principal.has("admin")
        assert registry.tokens.authenticate(token + "x") is None
    finally:
        registry.close()

    code, out, _ = cli("token", "create", "--name", "agent", "--scope", "agent", "--label", "staging")
    assert code == 0
    assert cli.scalar("SELECT label FROM api_tokens WHERE name = 'agent'") == "staging"


def test_token_create_with_team_memberships(cli: Cli, database_url: str, tmp_path: Path) -> None:
    assert cli("db", "upgrade")[0] == 0
    code, _, err = cli("token", "create", "--name", "pay-bot", "--scope", "agent", "--team", "payments:editor")
    assert code == 2 and "unknown team 'payments'" in err  # teams exist before tokens join them
    assert cli.scalar("SELECT COUNT(*) FROM api_tokens") == 0

    registry = Registry(Settings(data_dir=tmp_path / "data", database_url=database_url))
    try:
        registry.teams.create("payments", title=None, actor="test")
        registry.teams.create("support", title=None, actor="test")
        code, out, err = cli(
            "token", "create", "--name", "pay-bot", "--scope", "agent", "--team", "payments:editor", "--team", "support"
        )
        assert code == 0 and "payments: editor, support: viewer" in err
        principal = registry.tokens.authenticate(out.strip())
        assert principal is not None
        assert dict(principal.teams) == {"payments": "editor", "support": "viewer"}
        assert principal.sees("payments") and principal.sees(None) and not principal.sees("billing")
        code, _, err = cli("token", "create", "--name", "x", "--scope", "agent", "--team", "payments:owner")
        assert code == 2 and "invalid role 'owner'" in err
    finally:
        registry.close()


def test_data_dir_gets_a_private_generated_key(cli: Cli) -> None:
    assert cli("db", "upgrade")[0] == 0
    key = cli.data_dir / "secret.key"
    assert key.is_file()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_text()
    assert cli("db", "upgrade")[0] == 0
    assert key.read_text() == first  # generated once, then reused


def test_errors_are_reported_with_exit_code_2(cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("import", str(tmp_path / "nowhere"))
    assert code == 2
    assert err.startswith("error: bundle folder ") and "does not exist" in err

    bad = tmp_path / "bad" / "prompts"
    bad.mkdir(parents=True)
    (bad / "oops.yaml").write_text("name: oops\ntemplate: '{{ x'\n")
    code, _, err = cli("import", str(tmp_path / "bad"))
    assert code == 2
    assert "oops.yaml" in err and "line 1" in err
    assert cli.scalar("SELECT COUNT(*) FROM entries") == 0

    with pytest.raises(SystemExit) as excinfo:
        main(["token", "create", "--name", "x", "--scope", "superuser"])
    assert excinfo.value.code == 2


def test_serve_on_an_empty_folder(tmp_path: Path) -> None:
    """`mcp-registry serve` with no configuration: SQLite in ./data, demo bundle loaded, a bootstrap admin token."""
    stdout_path, stderr_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    server = ServerProcess(
        tmp_path / "data",
        program=mcp_registry_command(),
        cwd=tmp_path,
        bare=True,
        log_path=stdout_path,
        stderr_path=stderr_path,
    )
    try:
        server.start(wait="/healthz")
        output = stdout_path.read_text()  # the banner is written before the server listens
        found = re.search(r"admin token\s+(mcpr_\S+)", output)
        assert found, output
        server.admin_token = found.group(1)

        assert f"MCP endpoint {server.url}/mcp" in output
        assert "data/registry.db" in output
        assert (tmp_path / "data" / "registry.db").is_file()
        assert (tmp_path / "data" / "secret.key").is_file()

        with server.admin(timeout=10) as admin, server.client(timeout=10) as anonymous:
            prompts = admin.get("/api/v1/prompts")
            assert prompts.status_code == 200, prompts.text
            assert "summarize" in [item["name"] for item in prompts.json()["items"]]
            assert anonymous.get("/api/v1/prompts").status_code == 401
            assert anonymous.get("/readyz").status_code == 200
    finally:
        code = server.stop(timeout=20)
    # A graceful shutdown on SIGTERM (uvicorn re-raises the signal once it is done, hence -SIGTERM).
    assert code in (0, -signal.SIGTERM), stderr_path.read_text()
    assert "Traceback" not in stderr_path.read_text()


@pytest.mark.parametrize(
    "command",
    [
        ["token", "create", "--name", "x", "--scope", "admin"],
        ["export", "out"],
        ["import", str(DEMO), "--plan"],
    ],
    ids=["token-create", "export", "import-plan"],
)
def test_commands_on_an_existing_catalog_refuse_a_missing_database(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run in another folder, they name the file they looked for instead of creating an empty catalog."""
    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"no database at {tmp_path / 'data' / 'registry.db'}" in err
    assert "--data-dir" in err and "db upgrade" in err
    assert not (tmp_path / "data").exists()  # no database, no key file, not even the folder
    assert not (tmp_path / "out").exists()

    # The commands that create a catalog still do (the README's first run).
    assert main(["db", "upgrade"]) == 0
    assert (tmp_path / "data" / "registry.db").is_file()
    assert main(command) == 0


def _tables(cli: Cli) -> int:
    if cli.database_url.startswith("sqlite"):
        return int(str(cli.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")))
    return int(str(cli.scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()")))


def test_plan_on_an_empty_database_creates_nothing(cli: Cli) -> None:
    """An existing database without tables yet (a new PostgreSQL database, an empty SQLite file) is
    planned against as an empty catalog: not migrated, nothing written, not even a key file."""
    if cli.database_url.startswith("sqlite"):
        path = Path(cli.database_url.removeprefix("sqlite:///"))
        path.touch()
    code, out, _ = cli("import", str(DEMO), "--plan")
    assert code == 0, out
    assert sum(1 for line in out.splitlines() if line.startswith("create ")) == 9
    assert out.splitlines()[-1] == "would change 9 of 9 entries"
    assert _tables(cli) == 0
    if cli.database_url.startswith("sqlite"):
        assert path.stat().st_size == 0
    assert not (cli.data_dir / "secret.key").exists()


def test_plan_does_not_migrate_an_older_database(cli: Cli) -> None:
    from alembic import command

    from registry.db.migrate import alembic_config

    command.upgrade(alembic_config(normalize_database_url(cli.database_url)), "0002")
    code, _, err = cli("import", str(DEMO), "--plan")
    assert code == 2
    assert "not at this version's migration" in err and "db upgrade" in err
    assert cli.scalar("SELECT version_num FROM alembic_version") == "0002"


def test_plan_shows_a_diff_and_every_invalid_file(cli: Cli, tmp_path: Path) -> None:
    assert cli("db", "upgrade")[0] == 0
    assert cli("import", str(DEMO))[0] == 0
    bundle = tmp_path / "bundle"
    assert cli("export", str(bundle))[0] == 0
    summarize = bundle / "prompts" / "summarize.yaml"
    summarize.write_text(summarize.read_text().replace("concisely", "in one line"))
    before = cli.scalar("SELECT COUNT(*) FROM changes")

    code, out, _ = cli("import", str(bundle), "--plan")
    assert code == 0
    assert re.search(r"^update\s+prompt\s+summarize\s+live: latest, production$", out, re.MULTILINE)
    assert "--- prompt summarize (stored v1)" in out
    assert "-description: Summarize a piece of text concisely" in out
    assert "+description: Summarize a piece of text in one line" in out
    assert out.splitlines()[-1] == "would change 1 of 9 entries"

    (bundle / "prompts" / "broken.yaml").write_text("name: broken\ntemplate: hi\nmystery: 1\n")
    (bundle / "tools" / "echo.yaml").write_text("name: echo\ndescription: [unclosed\n")
    (bundle / "prompts" / "nameless.yaml").write_text("description: no name\ntemplate: hi\n")
    code, _, err = cli("import", str(bundle), "--plan")
    assert code == 2
    assert "3 of 11 bundle files are invalid" in err
    assert f"{bundle / 'prompts' / 'broken.yaml'}:3: mystery: Extra inputs are not permitted" in err
    assert f"{bundle / 'tools' / 'echo.yaml'}:3: not valid YAML" in err
    assert f"{bundle / 'prompts' / 'nameless.yaml'}:1: name: Field required" in err
    assert cli.scalar("SELECT COUNT(*) FROM changes") == before
