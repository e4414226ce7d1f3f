"""The catalog as code: ``mcp-registry lint``, ``plan``, ``push`` and ``pull``, for a bundle folder
kept in a repository and applied from CI.

``lint`` is offline (``registry.catalog.bundle_lint``). The others talk to a running registry
(``registry.remote``): ``--url`` / ``REGISTRY_URL`` and ``--token`` / ``REGISTRY_TOKEN``.

Exit codes, for CI: 0 done (``plan``: nothing would change; ``lint``: no problem), 2 ``plan`` would
change something, 1 anything went wrong (every problem, or the refusal, is printed on stderr).

``pull DIR`` writes the export into ``DIR``: a new or empty folder, or with ``--force`` an existing
one whose bundle files (``prompts/``, ``resources/``, ``tools/``, ``history/`` YAML files,
``export.yaml``) are replaced, so it mirrors the catalog exactly (an entry gone from the catalog is
gone from the folder); other files (a README, ``.github/``) are left alone. Entry files start with a
``yaml-language-server`` modeline pointing at ``bundle.schema.json``, which ``pull`` writes beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from registry.catalog.bundle_schema import SCHEMA_FILE
from registry.remote import DEFAULT_TIMEOUT_S, ENTRY_FOLDERS, MANIFEST, Remote, RemoteError, bundle_paths, read_bundle

#: The commands this module adds (they exit 1 on a usage error: 2 is "plan would change").
CATALOG_COMMANDS = ("lint", "plan", "push", "pull")
URL_ENV = "REGISTRY_URL"
TOKEN_ENV = "REGISTRY_TOKEN"
#: Exit codes.
OK, FAILED, WOULD_CHANGE = 0, 1, 2
#: What the server may name in an export (checked before anything is written).
_SAFE_PATH = re.compile(r"(?:(?:history/)?(?:prompts|resources|tools)/[A-Za-z0-9_.\-]{1,200}\.ya?ml|export\.yaml)")
_WRITES = ("create", "update", "restore")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return FAILED


def _remote(args: argparse.Namespace) -> Remote:
    url = args.url or os.environ.get(URL_ENV, "")
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not url.strip():
        raise RemoteError(f"which registry? pass --url URL or set {URL_ENV}")
    if not token.strip():
        raise RemoteError(f"no token for {url}: pass --token TOKEN or set {TOKEN_ENV} (an admin token to push)")
    return Remote(url.strip(), token.strip(), timeout_s=args.timeout)


def _item_line(item: dict[str, Any]) -> str:
    """``update   prompt    summarize   live: latest, staging   review: production``."""
    line = f"{item['action']:14} {item['kind']:9} {item['name']}"
    if item["action"] in _WRITES:
        line += f"   live: {', '.join(['latest', *item['live']])}"
        if item["review"]:
            line += f"   review: {', '.join(item['review'])}"
    return line


def _print_items(items: list[dict[str, Any]], *, diffs: bool) -> None:
    for item in items:
        if item["action"] == "unchanged":
            continue
        print(_item_line(item))
        if diffs and item.get("diff"):
            diff = item["diff"]
            print(diff, end="" if diff.endswith("\n") else "\n")


def cmd_lint(args: argparse.Namespace) -> int:
    from registry.catalog.bundle_lint import lint_bundle
    from registry.limits import Limits

    report = lint_bundle(Path(args.directory), Limits.from_env())
    for problem in report.problems:
        print(problem, file=sys.stderr)
    if report.problems:
        bad = len({p.path for p in report.problems})
        print(f"{len(report.problems)} problems in {bad} of {report.files} files", file=sys.stderr)
        return FAILED
    print(f"{report.files} files, no problems")
    return OK


def cmd_plan(args: argparse.Namespace) -> int:
    remote = _remote(args)
    plan = remote.plan(read_bundle(Path(args.directory)))
    _print_items(plan["items"], diffs=True)
    print(f"plan: {plan['summary']}")
    conflicts = [item for item in plan["items"] if item["action"] == "conflict"]
    if conflicts:
        return _fail(
            f"push would be refused: {len(conflicts)} entries exist at {remote.url} with another history "
            "(a history bundle restores entries into a catalog that does not have them)"
        )
    if plan["reviews"]:
        labels = sorted({label for item in plan["items"] for label in item["review"]})
        print(f"{plan['reviews']} entries go to review: {', '.join(labels)} is protected (a change request each)")
    print(f"fingerprint: {plan['fingerprint']}")
    if plan["changes"]:
        print(f"would change {plan['changes']} of {len(plan['items'])} entries")
        return WOULD_CHANGE
    print(f"no changes: {remote.url} has this bundle")
    return OK


def cmd_push(args: argparse.Namespace) -> int:
    remote = _remote(args)
    done = remote.apply(read_bundle(Path(args.directory)), fingerprint=args.fingerprint)
    _print_items(done["items"], diffs=False)
    print(f"pushed to {remote.url}: {done['summary']}")
    requests = done["change_requests"]
    if requests:
        labels = sorted({label for item in done["items"] for label in item["review"]})
        print(
            f"{', '.join(labels)} is protected: it did not move; {len(requests)} change "
            f"request{'s' if len(requests) != 1 else ''} opened for review:"
        )
        for request in requests:
            print(f"  #{request['id']} {request['kind']} {request['name']}: {remote.link(request['url'])}")
    return OK


def cmd_pull(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if directory.exists() and not directory.is_dir():
        return _fail(f"{directory} is not a folder")
    if directory.is_dir() and any(directory.iterdir()) and not args.force:
        return _fail(
            f"{directory} is not empty: pull into a new or empty folder, or pass --force to replace its bundle "
            "files (prompts/, resources/, tools/, history/ YAML files and export.yaml; other files are kept)"
        )
    remote = _remote(args)
    export = remote.export(label=args.label, all_versions=args.all_versions)
    files: dict[str, str] = export["files"]
    unsafe = [name for name in files if not _SAFE_PATH.fullmatch(name)]
    if unsafe:
        return _fail(f"the registry at {remote.url} named files outside a bundle folder: {', '.join(unsafe[:5])}")
    replaced = bundle_paths(directory, top_level=(MANIFEST, SCHEMA_FILE)) if directory.is_dir() else []
    if replaced and not export.get("complete", True):
        return _fail(
            f"this token does not see every team's entries at {remote.url}, so the pull holds only some of them and "
            f"cannot replace {directory}'s bundle files (it would delete the others' files): pull into a new or "
            "empty folder, or use a token that sees every team"
        )
    schema = remote.schema()
    directory.mkdir(parents=True, exist_ok=True)
    for old in bundle_paths(directory, top_level=(MANIFEST, SCHEMA_FILE)):
        old.unlink()
    (directory / SCHEMA_FILE).write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, text in sorted(files.items()):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.split("/", 1)[0] in ENTRY_FOLDERS:
            text = f"# yaml-language-server: $schema=../{SCHEMA_FILE}\n{text}"
        path.write_text(text, encoding="utf-8")
    which = "every version" if args.all_versions else (f"label {args.label}" if args.label else "newest versions")
    print(f"pulled {export['entries']} entries ({which}) from {remote.url} into {directory}")
    return OK


def _timeout(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {raw!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds")
    return value


def _remote_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help=f"the registry's base URL, e.g. https://registry.example.com (default: ${URL_ENV})")
    p.add_argument("--token", help=f"an API token (default: ${TOKEN_ENV}); push needs an admin token")
    p.add_argument(
        "--timeout", type=_timeout, default=DEFAULT_TIMEOUT_S, metavar="S", help="seconds per call (default 60)"
    )


def _guarded(command: Any) -> Any:
    """Exit 1 with the message for every refusal: exit 2 means "plan would change" here."""

    def run(args: argparse.Namespace) -> int:
        from registry.catalog.errors import CatalogError

        try:
            return int(command(args))
        except RemoteError as exc:
            return _fail(str(exc))
        except CatalogError as exc:
            return _fail(exc.detail)
        except OSError as exc:
            return _fail(f"{exc.filename or ''}: {exc.strerror or exc}")

    return run


def add_commands(commands: Any) -> None:
    """Add ``lint``, ``plan``, ``push`` and ``pull`` to the ``mcp-registry`` parser's commands."""
    lint = commands.add_parser(
        "lint", help="check a bundle folder offline: YAML, fields, templates, JSON Schemas, stored samples"
    )
    lint.add_argument("directory")
    lint.set_defaults(func=_guarded(cmd_lint))

    plan = commands.add_parser(
        "plan", help="what pushing a bundle folder would change at a running registry, with diffs (exit 2: changes)"
    )
    plan.add_argument("directory")
    _remote_options(plan)
    plan.set_defaults(func=_guarded(cmd_plan))

    push = commands.add_parser(
        "push", help="apply a bundle folder to a running registry, all or nothing (protected labels: change requests)"
    )
    push.add_argument("directory")
    push.add_argument(
        "--fingerprint",
        metavar="FP",
        help="apply only if the plan is still the one `plan` printed with this fingerprint (else nothing is written)",
    )
    _remote_options(push)
    push.set_defaults(func=_guarded(cmd_push))

    pull = commands.add_parser("pull", help="write a running registry's catalog into a bundle folder")
    pull.add_argument("directory")
    which = pull.add_mutually_exclusive_group()
    which.add_argument("--label", help="the version this label serves (entries without it are left out)")
    which.add_argument("--all-versions", action="store_true", help="every version, the labels and archived entries")
    pull.add_argument(
        "--force",
        action="store_true",
        help="replace the bundle files of a non-empty folder (it then mirrors the catalog)",
    )
    _remote_options(pull)
    pull.set_defaults(func=_guarded(cmd_pull))
