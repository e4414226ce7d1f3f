"""The catalog as code: ``mcp-registry pull`` / ``plan`` / ``push`` against a real ``mcp-registry serve``
process, and the refusals a CI log must make plain (a bad token, no server, a bundle with one bad
entry, a catalog that moved since the plan)."""

from __future__ import annotations

import re
import secrets
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from registry.cli import main
from registry.config import Settings
from registry.limits import Limits
from registry.paths import seed_data_dir
from tests.conftest import ADMIN_TOKEN, start_live_server
from tests.serve_process import ServerProcess, free_port, issue_token

MODELINE = "# yaml-language-server: $schema=../bundle.schema.json\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A registry with the demo catalog, on SQLite, no label protected (tests protect one through the API)."""
    with ServerProcess(tmp_path_factory.mktemp("cac"), args=["--seed", "demo"], name="catalog-as-code") as process:
        yield process


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.admin() as client:
        yield client


class Cli:
    """``mcp-registry`` in this process, against ``server``: (exit code, stdout, stderr)."""

    def __init__(self, server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
        self.server = server
        self.capsys = capsys

    def __call__(self, *args: str, token: str | None = None, url: str | None = None) -> tuple[int, str, str]:
        self.capsys.readouterr()
        remote = ["--url", url or self.server.url, "--token", token or self.server.admin_token]
        code = main([*args, *remote])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err


@pytest.fixture
def cli(server: ServerProcess, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.delenv("REGISTRY_URL", raising=False)
    monkeypatch.delenv("REGISTRY_TOKEN", raising=False)
    return Cli(server, capsys)


def _edit(path: Path, **fields: Any) -> None:
    """Change top-level fields of an entry file, as a person editing it would."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document.update(fields)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def _prompt(api: httpx.Client, name: str) -> dict[str, Any]:
    answer = api.get(f"/api/v1/prompts/{name}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _production(api: httpx.Client, name: str) -> int:
    labels = _prompt(api, name)["labels"]
    return int(labels["production"])


def test_pull_edit_plan_push(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    code, out, err = cli("pull", str(folder))
    assert code == 0, err
    assert "pulled" in out
    summarize = folder / "prompts" / "summarize.yaml"
    assert summarize.read_text().startswith(MODELINE)
    assert (folder / "bundle.schema.json").is_file()
    assert (folder / "tools" / "echo.yaml").is_file()

    # A pulled folder is the catalog: nothing to change.
    code, out, err = cli("plan", str(folder))
    assert (code, err) == (0, ""), out
    assert "no changes" in out

    before = _prompt(api, "summarize")
    _edit(summarize, description="Summarize a text in plain words")
    code, out, err = cli("plan", str(folder))
    assert code == 2, (out, err)
    assert re.search(r"^update\s+prompt\s+summarize", out, re.MULTILINE), out
    assert "-description: Summarize a piece of text concisely" in out
    assert "+description: Summarize a text in plain words" in out
    assert "would change 1 of" in out
    assert _prompt(api, "summarize")["version"] == before["version"]  # plan writes nothing

    code, out, err = cli("push", str(folder))
    assert code == 0, err
    assert "1 updated" in out
    after = _prompt(api, "summarize")
    assert after["version"] == before["version"] + 1
    assert after["spec"]["description"] == "Summarize a text in plain words"
    assert _production(api, "summarize") == after["version"]

    code, out, err = cli("plan", str(folder))
    assert code == 0, (out, err)


def test_pull_refuses_a_non_empty_folder_unless_forced(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0
    stray = folder / "prompts" / "gone-from-the-catalog.yaml"
    stray.write_text("name: gone-from-the-catalog\ntemplate: hi\n")
    (folder / "README.md").write_text("ours\n")
    code, _out, err = cli("pull", str(folder))
    assert code == 1
    assert "is not empty" in err and "--force" in err
    code, _out, err = cli("pull", str(folder), "--force")
    assert code == 0, err
    assert not stray.exists()  # the folder mirrors the catalog
    assert (folder / "README.md").read_text() == "ours\n"  # other files are kept

    labelled = tmp_path / "labelled"
    code, out, err = cli("pull", str(labelled), "--label", "production")
    assert code == 0, err
    assert "(label production)" in out
    assert sorted(p.name for p in (labelled / "prompts").iterdir()) == sorted(
        p.name for p in (folder / "prompts").iterdir()
    )
    code, out, _err = cli("pull", str(tmp_path / "nothing"), "--label", "no-such-label")
    assert code == 0
    assert "pulled 0 entries" in out

    history = tmp_path / "history"
    code, _out, err = cli("pull", str(history), "--all-versions")
    assert code == 0, err
    assert (history / "history" / "prompts" / "summarize.yaml").is_file()
    assert (history / "export.yaml").is_file()
    code, _out, err = cli("pull", str(tmp_path / "both"), "--all-versions", "--label", "production")
    assert code == 1
    assert "not allowed with argument" in err


def test_a_protected_label_gets_a_change_request(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0
    protect = api.put("/api/v1/protected-labels/production", json={})
    assert protect.status_code in (200, 201), protect.text
    try:
        published = _production(api, "code-review")
        _edit(folder / "prompts" / "code-review.yaml", description="Review a change, findings ranked")
        code, out, err = cli("plan", str(folder))
        assert code == 2, (out, err)
        assert "review: production" in out

        code, out, err = cli("push", str(folder))
        assert code == 0, err
        assert "production is protected: it did not move" in out
        found = re.search(r"#(\d+) prompt code-review: (\S+)", out)
        assert found, out
        number, url = int(found.group(1)), found.group(2)
        assert url == f"{cli.server.url}/ui/reviews/{number}"
        assert _production(api, "code-review") == published  # the label did not move
        assert _prompt(api, "code-review")["version"] == published + 1  # the version was made
        request = api.get(f"/api/v1/change-requests/{number}")
        assert request.status_code == 200, request.text
        assert request.json()["label"] == "production"
    finally:
        api.delete("/api/v1/protected-labels/production")


def test_a_bundle_with_one_bad_entry_writes_nothing(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0
    before = _prompt(api, "incident-postmortem")["version"]
    _edit(folder / "prompts" / "incident-postmortem.yaml", description="Blameless postmortem draft")
    (folder / "prompts" / "broken.yaml").write_text("name: broken\ntemplate: 'Hello {{ who'\n", encoding="utf-8")
    code, out, err = cli("push", str(folder))
    assert code == 1, out
    assert "refused the bundle (422)" in err
    assert "prompts/broken.yaml:2: template:" in err, err
    assert _prompt(api, "incident-postmortem")["version"] == before
    assert api.get("/api/v1/prompts/broken").status_code == 404


def test_push_of_a_stale_plan_writes_nothing(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0
    _edit(folder / "prompts" / "bug-analysis-report.yaml", description="Root-cause a bug")
    code, out, _err = cli("plan", str(folder))
    assert code == 2
    fingerprint = re.search(r"fingerprint: ([0-9a-f]{64})", out)
    assert fingerprint, out
    moved = api.patch("/api/v1/prompts/bug-analysis-report", json={"title": "Bug analysis"})
    assert moved.status_code == 200, moved.text
    version = _prompt(api, "bug-analysis-report")["version"]
    code, _out, err = cli("push", str(folder), "--fingerprint", fingerprint.group(1))
    assert code == 1
    assert "(409)" in err and "nothing was written" in err
    assert _prompt(api, "bug-analysis-report")["version"] == version


def test_a_bad_token_is_a_clear_refusal(cli: Cli, server: ServerProcess, api: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0
    code, out, err = cli("plan", str(folder), token="mcpr_not-a-token")
    assert code == 1, out
    assert err.startswith(f"error: the registry at {server.url} refused the token (401): ")

    viewer = issue_token(api, "cac-viewer", ["viewer"])["token"]
    code, out, _err = cli("plan", str(folder), token=viewer)
    assert code == 0, out  # a viewer may plan ...
    code, _out, err = cli("push", str(folder), token=viewer)
    assert code == 1  # ... not push, as in the web UI, where importing is for admins
    assert "refused this to the token (403)" in err and "'admin'" in err


def test_an_unreachable_server_is_a_clear_refusal(cli: Cli, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    code, _out, err = cli("pull", str(tmp_path / "catalog"), url=closed)
    assert code == 1
    assert err == f"error: cannot reach the registry at {closed}: connection refused\n"
    assert not (tmp_path / "catalog").exists()


def test_url_and_token_come_from_the_environment(
    server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REGISTRY_URL", raising=False)
    monkeypatch.delenv("REGISTRY_TOKEN", raising=False)
    assert main(["pull", str(tmp_path / "a")]) == 1
    assert "pass --url URL or set REGISTRY_URL" in capsys.readouterr().err
    monkeypatch.setenv("REGISTRY_URL", server.url)
    assert main(["pull", str(tmp_path / "a")]) == 1
    assert "set REGISTRY_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("REGISTRY_TOKEN", server.admin_token)
    assert main(["pull", str(tmp_path / "a")]) == 0
    assert main(["plan", str(tmp_path / "a")]) == 0


def test_files_outside_a_bundle_folder_are_refused(api: httpx.Client) -> None:
    answer = api.post("/api/v1/bundles/plan", json={"files": {"../etc/passwd.yaml": "x"}})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    empty = api.post("/api/v1/bundles/plan", json={"files": {}})
    assert empty.status_code == 422, empty.text


def test_tls_failure_and_timeout_are_clear_refusals(cli: Cli, server: ServerProcess, tmp_path: Path) -> None:
    tls = f"https://127.0.0.1:{server.port}"  # the server speaks plain HTTP there
    code, _out, err = cli("pull", str(tmp_path / "tls"), url=tls)
    assert code == 1
    assert err.startswith(f"error: cannot reach the registry at {tls}: TLS failed ("), err
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, _out, err = cli("pull", str(tmp_path / "catalog"), "--timeout", "0.5", url=url)
    assert code == 1
    assert err == f"error: the registry at {url} did not answer within 0.5 s (timeout)\n"


def test_a_plan_needs_a_token_that_sees_every_team_and_a_pull_holds_only_what_it_sees(
    cli: Cli, api: httpx.Client, tmp_path: Path
) -> None:
    """A bundle plan covers the whole catalog (its diffs): another team's entries must stay unseen, so
    a token that cannot see them all is refused. A pull is the caller's view: global entries and its
    teams'. (It leaves a team's entry in the shared catalog: the tests after it use admin tokens only.)"""
    viewer = issue_token(api, "cac-global-viewer", ["viewer"])["token"]
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder), token=viewer)[0] == 0  # no team owns an entry yet
    assert api.post("/api/v1/teams", json={"name": "payments"}).status_code == 201
    made = api.post("/api/v1/prompts", json={"name": "refund-reply", "template": "Sorry.", "team": "payments"})
    assert made.status_code == 201, made.text
    code, _out, err = cli("plan", str(folder), token=viewer)
    assert code == 1
    assert "(403)" in err and "this needs an admin" in err and "refund-reply" not in err
    assert cli("pull", str(tmp_path / "viewer"), token=viewer)[0] == 0
    assert not (tmp_path / "viewer" / "prompts" / "refund-reply.yaml").exists()
    assert (tmp_path / "viewer" / "prompts").is_dir() and any((tmp_path / "viewer" / "prompts").iterdir())
    member = issue_token(api, "cac-payments-viewer", ["viewer"], teams={"payments": "viewer"})["token"]
    assert cli("plan", str(folder), token=member)[0] == 0
    assert cli("pull", str(tmp_path / "member"), token=member)[0] == 0
    assert (tmp_path / "member" / "prompts" / "refund-reply.yaml").is_file()


def test_the_bundle_limits_bound_a_push(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole request is bounded by REGISTRY_LIMIT_BUNDLE_BYTES (not the smaller body limit), the
    files by REGISTRY_LIMIT_BUNDLE_FILES; each refusal names its limit, and nothing is written."""
    monkeypatch.delenv("REGISTRY_URL", raising=False)
    registry, live = start_live_server(
        settings, limits=Limits(body_bytes=8 * 1024, bundle_bytes=64 * 1024, bundle_files=3)
    )
    try:
        remote = ["--url", live.url, "--token", ADMIN_TOKEN]
        several = tmp_path / "several"
        shutil.copytree(seed_data_dir() / "demo", several)
        capsys.readouterr()
        assert main(["push", str(several), *remote]) == 1
        err = capsys.readouterr().err
        assert "(422)" in err and "REGISTRY_LIMIT_BUNDLE_FILES" in err, err

        large = tmp_path / "large" / "prompts"
        large.mkdir(parents=True)
        for index in range(3):  # each file within the body limit, together over the bundle limit
            (large / f"p{index}.yaml").write_text(f"name: p{index}\ntemplate: '{'x' * 7000}'\n")
        capsys.readouterr()
        assert main(["plan", str(large.parent), *remote]) == 2, capsys.readouterr().err  # 21 kB: within both
        (large / "p2.yaml").write_text("name: p2\ndescription: '" + "y" * 70_000 + "'\ntemplate: hi\n")
        capsys.readouterr()
        assert main(["push", str(large.parent), *remote]) == 1
        err = capsys.readouterr().err
        assert "too large for the registry" in err and "(413)" in err and "REGISTRY_LIMIT_BUNDLE_BYTES" in err, err
        with live.client() as api:
            assert api.get("/api/v1/prompts/p0").status_code == 404

        # An export is answered in one document: bounded by the same limit, named.
        for batch in range(4):  # 12 prompts of ~7 kB, three files a push
            folder = tmp_path / f"batch{batch}" / "prompts"
            folder.mkdir(parents=True)
            for index in range(3):
                name = f"big{batch}-{index}"
                (folder / f"{name}.yaml").write_text(f"name: {name}\ntemplate: '{'x' * 7000}'\n")
            assert main(["push", str(folder.parent), *remote]) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert main(["pull", str(tmp_path / "pulled"), *remote]) == 1
        err = capsys.readouterr().err
        assert "the export is" in err and "REGISTRY_LIMIT_BUNDLE_BYTES" in err, err
    finally:
        live.stop()
        registry.close()


def test_a_push_never_reads_the_servers_environment(cli: Cli, api: httpx.Client, tmp_path: Path) -> None:
    """``${env:...}`` would let whoever pushes send any of the server's variables to a webhook of theirs."""
    folder = tmp_path / "catalog"
    tool = (
        "name: leaky\n"
        "webhook:\n"
        "  url: https://hooks.example.com/leaky\n"
        "  headers:\n"
        "    Authorization: ${env:REGISTRY_SECRET_KEY}\n"
    )
    (folder / "tools").mkdir(parents=True)
    (folder / "tools" / "leaky.yaml").write_text(tool, encoding="utf-8")
    code, _out, err = cli("push", str(folder))
    assert code == 1
    assert "tools/leaky.yaml:5: webhook.headers.Authorization: " in err, err
    assert "does not read the server's environment" in err
    assert api.get("/api/v1/tools/leaky").status_code == 404


def test_plan_push_and_pull_refuse_symbolic_links(cli: Cli, tmp_path: Path) -> None:
    """A bundle folder is read by plan and push and replaced by ``pull --force``: a link in it would
    make them send a file from elsewhere (a pull request committing ``prompts/x.yaml -> /proc/self/environ``
    for CI to plan) or delete and write files elsewhere. Nothing outside the folder is read or touched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.yaml").write_text("name: keep\ntemplate: not a bundle's\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("name: leak\ntemplate: SECRET-VALUE\n")

    linked_file = tmp_path / "linked-file"
    (linked_file / "prompts").mkdir(parents=True)
    (linked_file / "prompts" / "leak.yaml").symlink_to(secret)
    for command in ("plan", "push"):
        code, _out, err = cli(command, str(linked_file))
        assert code == 1 and "symbolic links are not bundle files" in err and "leak.yaml" in err, err

    linked_folder = tmp_path / "linked-folder"
    linked_folder.mkdir()
    (linked_folder / "tools").symlink_to(outside, target_is_directory=True)
    code, _out, err = cli("pull", "--force", str(linked_folder))
    assert code == 1 and "is a symbolic link" in err, err
    assert sorted(p.name for p in outside.iterdir()) == ["keep.yaml"]


def test_a_pull_that_cannot_see_every_team_does_not_replace_a_folder(
    cli: Cli, api: httpx.Client, tmp_path: Path
) -> None:
    """``pull --force`` mirrors the catalog by deleting the folder's bundle files first: with a token
    that sees only some teams' entries that would delete the others' files, so it is refused; a pull
    into a new folder is fine."""
    suffix = secrets.token_hex(3)
    assert api.post("/api/v1/teams", json={"name": f"mirror-{suffix}"}).status_code == 201
    made = api.post("/api/v1/prompts", json={"name": f"mirror-{suffix}", "template": "x", "team": f"mirror-{suffix}"})
    assert made.status_code == 201, made.text
    folder = tmp_path / "catalog"
    assert cli("pull", str(folder))[0] == 0  # admin: every entry
    assert (folder / "prompts" / f"mirror-{suffix}.yaml").is_file()
    viewer = issue_token(api, f"mirror-viewer-{suffix}", ["viewer"])["token"]
    code, _out, err = cli("pull", "--force", str(folder), token=viewer)
    assert code == 1 and "does not see every team's entries" in err, err
    assert (folder / "prompts" / f"mirror-{suffix}.yaml").is_file()
    assert cli("pull", str(tmp_path / "fresh"), token=viewer)[0] == 0
