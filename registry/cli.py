"""The ``mcp-registry`` command."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import OperationalError

from registry import __version__
from registry.catalog.audit_verify import AuditKeyMismatch
from registry.catalog.errors import CatalogError, Invalid
from registry.catalog.secrets import SecretKeyError
from registry.cli_catalog import CATALOG_COMMANDS
from registry.cli_catalog import add_commands as add_catalog_commands
from registry.config import Settings, SettingsError, check_server_settings
from registry.db.engine import describe

if TYPE_CHECKING:
    import asyncio

    import uvicorn

    from registry.catalog.bundle_secrets import ExportSecrets, ImportSecrets
    from registry.catalog.bundles import BundleService, ImportPlanItem
    from registry.catalog.reports import AuditService
    from registry.runtime import Registry
    from registry.workers import WorkerSlot


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    return settings.with_overrides(
        database_url=getattr(args, "database_url", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
    )


def _registry(args: argparse.Namespace) -> Registry:
    from registry.runtime import Registry

    return Registry(_settings(args))


def cmd_serve(args: argparse.Namespace) -> int:
    from registry.app import create_app
    from registry.serving import DrainingServer
    from registry.workers import MAX_WORKERS, WorkerSlot, listening_sockets

    settings = _settings(args)
    from registry.runtime import Registry

    check_server_settings(settings)  # before anything is opened: a refusal names the setting
    _check_tracing()
    slot = WorkerSlot.from_env()
    if slot is not None:  # one of `serve --workers N`'s processes: the supervisor has prepared all
        return _serve_worker(args, settings, slot)
    workers = args.workers if args.workers is not None else settings.workers
    if not 1 <= workers <= MAX_WORKERS:
        raise CliError(f"--workers (REGISTRY_WORKERS) must be from 1 to {MAX_WORKERS}, not {workers}")
    sockets = []
    if workers > 1:  # bound first: a port in use is reported before anything else happens
        try:
            sockets = listening_sockets(settings.host, settings.port, workers)
        except OSError as exc:
            raise CliError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
        settings = settings.with_overrides(port=sockets[0].getsockname()[1])

    registry = Registry(settings)
    registry.prepare(seed=args.seed, demo_if_empty=settings.database_url is None)
    bootstrap = None
    if not settings.admin_token and not any(
        "admin" in t["scopes"] and not t["revoked"] for t in registry.tokens.list_tokens()
    ):
        bootstrap, _ = registry.tokens.create("bootstrap admin", ["admin"], created_by="serve")
    base = f"http://{'[' + settings.host + ']' if ':' in settings.host else settings.host}:{settings.port}"
    print(f"mcp-registry {__version__}")
    print(f"  database     {registry.db.engine.url.render_as_string(hide_password=True)}")
    print(f"  MCP endpoint {base}/mcp")
    print(f"  admin API    {base}/api/v1   (reference: {base}/docs)")
    print(f"  web UI       {base}/ui/")
    if bootstrap:
        print(f"  admin token  {bootstrap}   (shown once; create more with `mcp-registry token create`)")
    elif settings.admin_token:
        print("  admin token  the value of REGISTRY_ADMIN_TOKEN")
    else:
        print("  admin token  create one with `mcp-registry token create --name me --scope admin`")
    if workers > 1:
        print(f"  workers      {workers} processes on one port (each a replica)")
    sys.stdout.flush()
    if workers > 1:
        from registry.workers import SHUTDOWN_MARGIN_S, Supervisor, worker_command

        registry.close()  # the supervisor serves nothing: the workers open their own pools
        command = worker_command(
            host=settings.host,
            port=settings.port,
            log_level=args.log_level,
            access_log=args.access_log,
            database_url=args.database_url,
            data_dir=args.data_dir,
        )
        return Supervisor(command, sockets, shutdown_budget_s=settings.shutdown_grace_s + SHUTDOWN_MARGIN_S).run()
    app = create_app(registry, freeze_gc=True)
    DrainingServer(_uvicorn_config(app, settings, args), drain=app.mcp.drain).run()
    return 0


def _check_tracing() -> None:
    """The ``OTEL_*`` variables, checked before anything starts (nothing of OpenTelemetry is imported)."""
    from registry import tracing

    try:
        tracing.check()
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _uvicorn_config(app: Any, settings: Settings, args: argparse.Namespace) -> uvicorn.Config:
    import uvicorn

    from registry.serving import bounded_heads

    return uvicorn.Config(
        app,
        # uvicorn's httptools protocol, with each request's head bounded (REGISTRY_LIMIT_REQUEST_HEAD_BYTES).
        http=bounded_heads(settings.limits.request_head_bytes),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        # X-Forwarded-* only from the proxies named in REGISTRY_FORWARDED_ALLOW_IPS; never otherwise.
        proxy_headers=settings.forwarded_allow_ips is not None,
        forwarded_allow_ips=settings.forwarded_allow_ips or "",
        # Requests still running near its end are answered "server restarting" (registry/mcp/stopping.py).
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_s),
        access_log=args.access_log,
    )


def _serve_worker(args: argparse.Namespace, settings: Settings, slot: WorkerSlot) -> int:
    """One worker of ``serve --workers N`` (registry/workers.py): a replica on the inherited socket."""
    from registry.app import create_app
    from registry.runtime import Registry
    from registry.serving import DrainingServer
    from registry.workers import SiblingPokes

    slot.die_with_supervisor()
    registry = Registry(settings)
    app = create_app(registry, freeze_gc=True)
    app.mcp.metrics.identify_worker(slot.index)
    if not registry.db.is_postgres:  # PostgreSQL's NOTIFY reaches every worker already
        pokes = SiblingPokes(slot)
        registry.catalog.on_change(pokes.announce)
        pokes.listen(app.mcp.feed.poke)
    DrainingServer(_uvicorn_config(app, settings, args), drain=app.mcp.drain).run(sockets=[slot.socket()])
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    import asyncio

    from registry.catalog.validation import PRODUCTION
    from registry.mcp.listen import ListenService
    from registry.mcp.notifier import ChangeFeed, Notifier
    from registry.mcp.server import McpServer
    from registry.mcp.sessions import ClientState
    from registry.mcp.streams import StreamHub
    from registry.mcp.transports.stdio import StdioTransport, open_stdin_reader
    from registry.runtime import Registry

    settings = _settings(args)
    _check_tracing()  # before anything is opened
    registry = Registry(settings)
    registry.prepare(seed=args.seed, demo_if_empty=settings.database_url is None)
    from registry import tracing as registry_tracing

    tracing = registry_tracing.from_environment(trace_arguments=settings.trace_arguments)  # None: off
    server = McpServer(
        registry.catalog,
        webhook_allowed_networks=settings.webhook_allowed_networks,
        limits=settings.limits,
        cache_ttl_ms=settings.cache_ttl_ms,
        tracing=tracing,
    )
    # No token on stdio: whoever starts it holds the database credentials, so it sees every team's
    # entries, as before teams (registry/mcp/transports/stdio.py).
    client = ClientState(label=args.label or PRODUCTION, principal="stdio", visible_teams=None)
    if settings.usage_enabled:  # the stdio agent's uses count as ``anonymous``
        from registry.catalog.usage import UsageCounter

        limit = settings.limits.usage_pending_keys
        server.usage = UsageCounter(registry.db, flush_s=settings.usage_flush_s, max_pending_keys=limit)

    async def run() -> None:
        if tracing is not None:
            tracing.start()  # the exporter process
        transport = StdioTransport(server, client, limits=settings.limits)
        if server.usage is not None:
            server.usage.start()
        # Admin edits (made through a registry server on the same database) reach this client on stdout.
        notifier = Notifier(StreamHub(), registry.db, server.snapshots.apply)

        async def session_write(message: dict[str, Any]) -> None:
            # Session-era notifications go to a client that opened the session era (initialize);
            # a stateless client hears of changes on subscriptions/listen only.
            if client.protocol_version is not None:
                await transport.write(message)

        notifier.direct.append((client, session_write))
        # ... and to the stateless era's subscriptions/listen streams.
        transport.listen = notifier.listeners = ListenService(settings.limits)
        transport.listen.start()
        feed = ChangeFeed(registry.db, notifier.dispatch, settings.change_poll_s)
        await feed.start()
        loop = asyncio.get_running_loop()
        # Until stdin closes (the host's way to stop its child) or SIGTERM (the host's next step).
        serving = asyncio.create_task(transport.run(await open_stdin_reader()))
        loop.add_signal_handler(signal.SIGTERM, _stop_serving, serving)
        try:
            await asyncio.wait({serving})
        finally:
            _exit_within(STDIO_EXIT_DEADLINE_S)
            loop.remove_signal_handler(signal.SIGTERM)  # from now on SIGTERM ends the process at once
            serving.cancel()
            await transport.finish()  # the requests still running at SIGTERM
            if server.usage is not None:
                await server.usage.stop(timeout_s=STDIO_USAGE_FLUSH_S)
            await transport.listen.stop(wait_s=0)
            await feed.stop()
            await server.aclose()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)
        if not serving.cancelled():
            serving.result()  # an error of the transport's own

    asyncio.run(run())
    return 0


#: After stdin closes or SIGTERM, the stdio process is gone within this, whatever is stuck: the
#: host waits for its child to exit. It covers the transport's drain (``DRAIN_S`` plus the cancel
#: grace), the change feed's stop (``ChangeFeed.STOP_S``) and the end of ``asyncio.run``.
STDIO_EXIT_DEADLINE_S = 4.0
#: Of which the last usage counts may take this long to be written (the rest is the drain's).
STDIO_USAGE_FLUSH_S = 0.4


def _stop_serving(serving: asyncio.Task[None]) -> None:
    logging.getLogger("registry.cli").info("stdio: SIGTERM, shutting down")
    serving.cancel()


def _exit_within(seconds: float) -> None:
    """End the process within ``seconds`` from now, even if its shutdown is stuck.

    Every shutdown stage is bounded on its own; this is the backstop for what is not (a task that
    swallows its cancellation is still awaited by ``asyncio.run``, an executor thread blocked in a
    call is joined at exit). A daemon timer: a normal exit comes first and never sees it. When it
    fires, it logs, writes every thread's stack to stderr (to find what hung) and exits with 1.
    """

    def expire() -> None:
        logging.getLogger("registry.cli").error(
            "stdio: shutdown did not finish within %.1fs; exiting anyway. Thread stacks follow.", seconds
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(1)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    registry = _registry(args)
    registry.migrate()
    print("database is at the current migration")
    return 0


class CliError(Exception):
    """A refusal the command explains (exit code 2)."""


def _missing_sqlite_file(settings: Settings) -> Path | None:
    """The SQLite file the settings point at, when it does not exist (None: it does, or not SQLite)."""
    from sqlalchemy.engine import make_url

    from registry.db.engine import normalize_database_url

    url = make_url(normalize_database_url(settings.effective_database_url))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database).absolute()
    return None if path.exists() else path


def _require_database(settings: Settings, command: str) -> None:
    """Commands that act on an existing catalog never create an empty one by accident (run in
    another folder, ``./data`` is somewhere else): they refuse, naming the file they looked for."""
    missing = _missing_sqlite_file(settings)
    if missing is not None:
        raise CliError(
            f"{command}: no database at {missing}; this command acts on an existing catalog and does not create "
            "one. Run it in the folder that holds data/, or pass --data-dir DIR or --database-url URL (or set "
            "REGISTRY_DATA_DIR / REGISTRY_DATABASE_URL); `mcp-registry serve` or `mcp-registry db upgrade` "
            "creates a new database"
        )


def _existing_key(settings: Settings) -> str:
    """The secret key without creating one: a read-only command must not write ``secret.key``. With
    no key at all, nothing stored can have been encrypted under one, so any key does."""
    import secrets

    if settings.secret_key:
        return settings.secret_key
    path = settings.data_dir / "secret.key"
    return path.read_text().strip() if path.exists() else secrets.token_urlsafe(32)


def _url_guard(settings: Settings) -> Callable[[str], None]:
    """The outbound-URL check ``Registry`` applies to saves, for a plan made without a Registry."""
    from registry.webhooks import WebhookURLError, parse_networks, validate_webhook_url_sync

    allowed = parse_networks(settings.webhook_allowed_networks)

    def guard(url: str) -> None:
        try:
            validate_webhook_url_sync(url, allowed)
        except WebhookURLError as exc:
            raise ValueError(str(exc)) from None

    return guard


def _read_only_bundles(settings: Settings, command: str) -> tuple[BundleService, bool]:
    """The bundles of an existing database opened read-only (nothing is migrated, created or
    written), and whether it is empty: a database with no tables yet counts as an empty catalog.
    Refuses a database at another migration than this version's."""
    from sqlalchemy import inspect

    from registry.catalog.bundles import BundleService
    from registry.catalog.protection import ProtectionPolicy
    from registry.catalog.secrets import SecretBox
    from registry.catalog.service import CatalogService
    from registry.db import migrate
    from registry.db.engine import Database

    _require_database(settings, command)
    db = Database.from_settings(settings, read_only=True)
    # The catalog's protected labels and this process's REGISTRY_PROTECTED_LABELS (which a real
    # import would add to them), as the plan's "review" column needs.
    protection = ProtectionPolicy(db, settings.protected_labels, settings.required_approvals)
    catalog = CatalogService(
        db,
        SecretBox(_existing_key(settings)),
        url_guard=_url_guard(settings),
        limits=settings.limits,
        protection=protection,
    )
    service = BundleService(db, catalog, protection)
    if migrate.is_current(db):
        return service, False
    with db.engine.connect() as conn:
        empty = not inspect(conn).has_table("entries")
    if empty:
        return service, True
    where = db.engine.url.render_as_string(hide_password=True)
    raise CliError(
        f"{command}: the database at {where} is not at this version's migration; run `mcp-registry db upgrade` "
        "first (this command never migrates)"
    )


def _import_secrets(args: argparse.Namespace) -> ImportSecrets:
    from registry.catalog.bundle_secrets import EXPORT_KEY_ENV, ImportSecrets

    return ImportSecrets(key=args.secrets_key or os.environ.get(EXPORT_KEY_ENV) or None)


def _plan_line(item: ImportPlanItem, *, applied: bool) -> str:
    """``update   prompt    summarize   live: latest, staging   review: production (#12)``."""
    line = f"{item.action:14} {item.kind:9} {item.name}"
    if item.action not in ("create", "update", "restore"):
        return line
    line += f"   live: {', '.join(['latest', *item.live])}"
    if item.review:
        requests = (
            f" (change request {', '.join(f'#{n}' for n in item.change_requests)})" if item.change_requests else ""
        )
        line += f"   review: {', '.join(item.review)}{requests if applied else ''}"
    return line


def cmd_import(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    secrets = _import_secrets(args)
    labels = args.label or None
    if args.plan:
        # Writes nothing at all: no migration, no database file, no key file.
        bundles, empty = _read_only_bundles(_settings(args), "import --plan")
        try:
            plan = bundles.plan_import(directory, secrets=secrets, against_empty=empty, labels=labels)
        finally:
            bundles.db.dispose()
        for item, entry in plan:
            print(_plan_line(item, applied=False))
            diff = bundles.plan_diff(entry)
            if diff:
                print(diff, end="" if diff.endswith("\n") else "\n")
        items = [item for item, _ in plan]
    else:
        registry = _registry(args)
        registry.migrate()  # also adds this process's REGISTRY_PROTECTED_LABELS to the catalog's
        items = registry.bundles.apply_import(directory, actor=args.actor, labels=labels, secrets=secrets)
        for item in items:
            print(_plan_line(item, applied=True))
    changed = sum(1 for item in items if item.action in ("create", "update", "restore"))
    conflicts = [item for item in items if item.action == "conflict"]
    print(f"{'would change' if args.plan else 'changed'} {changed} of {len(items)} entries")
    to_review = [item for item in items if item.review]
    if to_review:
        held = ", ".join(sorted({label for item in to_review for label in item.review}))
        opened = sum(len(item.change_requests) for item in to_review)
        if args.plan:
            print(f"{len(to_review)} entries go to review: {held} is protected, so a change request is opened for each")
        else:
            print(f"{len(to_review)} entries went to review: {held} left where it was; {opened} change requests opened")
    if conflicts:
        print(
            f"the import would be refused: {len(conflicts)} entries exist here with another history "
            "(a history bundle restores entries into a catalog that does not have them)"
        )
        return 1
    return 0


def _export_secrets(args: argparse.Namespace) -> ExportSecrets | None:
    from registry.catalog.bundle_secrets import EXPORT_KEY_ENV, ExportSecrets

    key = args.secrets_key or (os.environ.get(EXPORT_KEY_ENV) if args.secrets in (None, "key") else None)
    if args.secrets_key and args.secrets not in (None, "key"):
        raise CliError(f"--secrets-key goes with --secrets key, not --secrets {args.secrets}")
    if args.secrets == "key" and not key:
        raise CliError(f"--secrets key needs the key: --secrets-key KEY or {EXPORT_KEY_ENV}=KEY")
    if key:
        return ExportSecrets("key", key=key)
    return ExportSecrets(args.secrets) if args.secrets else None


def cmd_export(args: argparse.Namespace) -> int:
    secrets = _export_secrets(args)
    bundles, empty = _read_only_bundles(_settings(args), "export")
    try:
        if empty:
            raise CliError("export: the database has no catalog yet (no tables); nothing to export")
        result = bundles.export_catalog(
            Path(args.directory), label=args.label, all_versions=args.all_versions, secrets=secrets
        )
    finally:
        bundles.db.dispose()
    print(f"wrote {len(result.files)} files to {args.directory}")
    if result.extras:
        print(f"and {', '.join(p.name for p in result.extras)} (what was exported and how to import it)")
    if secrets is not None and secrets.mode == "env":
        if result.variables:
            print("set these environment variables before importing:")
            for name, uses in result.variables.items():
                print(f"  {name:32} {'; '.join(uses)}")
        else:
            print("no exported entry holds write-only values: no environment variables needed")
    return 0


def _positive_days(raw: str) -> float:
    try:
        days = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {raw!r}") from None
    if not 0 < days <= 36_500:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 36500 days")
    return days


def _membership(item: str) -> tuple[str, str]:
    """``payments:editor`` (or ``payments``, a viewer) as (team, role)."""
    team, _, role = item.partition(":")
    return team.strip(), (role.strip() or "viewer")


def cmd_token_create(args: argparse.Namespace) -> int:
    _require_database(_settings(args), "token create")
    registry = _registry(args)
    registry.migrate()
    expires_at = None
    if args.expires_in_days is not None:
        from datetime import UTC, datetime, timedelta

        expires_at = datetime.now(UTC) + timedelta(days=args.expires_in_days)
    teams = dict(_membership(item) for item in args.team)
    try:
        token, info = registry.tokens.create(
            args.name, args.scope, label=args.label, created_by="cli", expires_at=expires_at, teams=teams
        )
    except Invalid as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 2
    print(token)
    expiry = f", expires {info['expires_at']}" if info.get("expires_at") else ""
    shown_teams = "".join(f", {team}: {role}" for team, role in sorted(info.get("teams", {}).items()))
    print(
        f"(token {info['id']}, scopes {', '.join(info['scopes'])}{shown_teams}{expiry}; shown only now)",
        file=sys.stderr,
    )
    return 0


@contextlib.contextmanager
def _audit_trail(args: argparse.Namespace, command: str) -> Iterator[AuditService]:
    """The audit trail of the existing database, opened read-only with the audit key (and closed
    after); refused unless at this version's migration (an older one is chained differently:
    ``db upgrade`` brings it up)."""
    from registry.catalog.reports import AuditService
    from registry.catalog.secrets import SecretBox, audit_key
    from registry.db import migrate
    from registry.db.engine import Database

    settings = _settings(args)
    _require_database(settings, command)
    secret = settings.secret_key
    key_file = settings.data_dir / "secret.key"
    if not settings.audit_key and not secret:
        if not key_file.is_file():
            raise CliError(
                f"{command}: no audit key: set REGISTRY_AUDIT_KEY (or REGISTRY_SECRET_KEY) as the server has it, or "
                f"run where the server's data folder is ({key_file} is missing)"
            )
        secret = key_file.read_text().strip()
    db = Database.from_settings(settings, read_only=True)
    db.audit_key = audit_key(settings.audit_key, SecretBox(secret) if secret else None)
    if not migrate.is_current(db):
        where = db.engine.url.render_as_string(hide_password=True)
        db.dispose()
        raise CliError(
            f"{command}: the database at {where} is not at this version's migration; run `mcp-registry db upgrade` "
            "first (this command never migrates)"
        )
    try:
        yield AuditService(db)
    finally:
        db.dispose()


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the chain is intact and the tables agree with it (and, with ``--anchor``, the
    anchored row is still there), 1 naming every difference."""
    from registry.catalog.audit_verify import Anchor

    anchor = None
    if args.anchor is not None:
        try:
            anchor = Anchor.parse(json.loads(Path(args.anchor).read_text()))
        except (OSError, ValueError) as exc:
            raise CliError(f"audit verify: cannot read the anchor {args.anchor}: {exc}") from None
    with _audit_trail(args, "audit verify") as audit:
        report = audit.verify(anchor)
    print(report.summary())
    for difference in report.differences:
        print(f"  {difference.table}: {difference.message}")
    if report.difference_count > len(report.differences):
        print(f"  ... and {report.difference_count - len(report.differences)} more")
    if report.keyed_from is not None and report.keyed_from > 1:
        print(
            f"(rows before #{report.keyed_from} were written before the chain was keyed; "
            "the first keyed row covers them)"
        )
    return 0 if report.intact else 1


def cmd_audit_key(args: argparse.Namespace) -> int:
    """Key an unkeyed chain now (the start that upgraded the database stopped before it did):
    its first keyed row seals the catalog as the tables hold it, so verify the tables first."""
    from registry.catalog.audit_verify import key_the_chain
    from registry.db import migrate

    registry = _registry(args)
    if not migrate.is_current(registry.db):
        raise CliError("audit key: the database is not at this version's migration; run `mcp-registry db upgrade`")
    with migrate.exclusive(registry.db):
        keyed = key_the_chain(registry.db, may_key=True)
    print("audit chain keyed from its newest row on" if keyed else "nothing to do: the chain is keyed (or empty)")
    return 0


def cmd_audit_head(args: argparse.Namespace) -> int:
    """Print the chain's head as JSON: keep it elsewhere, and pass it to ``audit verify --anchor``."""
    with _audit_trail(args, "audit head") as audit:
        head = audit.head()
    if head is None:
        raise CliError("audit head: the change log is empty")
    print(json.dumps(head.as_dict()))
    return 0


def cmd_audit_list(args: argparse.Namespace) -> int:
    """The newest changes (or oldest, with --oldest), one line each, filtered like the API."""
    from registry.catalog.audit_log import AuditFilter

    where = AuditFilter(actor=args.actor, team=args.team, kind=args.kind, name=args.name, action=args.action)
    with _audit_trail(args, "audit list") as audit:
        page = audit.page(where, order="oldest" if args.oldest else "newest", limit=args.limit)
    for row in page.items:
        who = row["actor"] + (f" (token {row['token_id']})" if row["token_id"] is not None else "")
        who += f" (user {row['user']})" if row["user"] else ""
        version = f" v{row['version']}" if row["version"] is not None else ""
        extra = " OVERRIDE" if row["override"] else ""
        extra += f" reason: {row['reason']}" if row["reason"] else ""
        print(
            f"#{row['id']} {row['created_at']} {who} {row['action']} {row['kind']} {row['name']}{version}"
            f"{' team ' + row['team'] if row['team'] else ''}{extra} {row['hash'][:12]}"
        )
    return 0


def _page_size(raw: str) -> int:
    from registry.catalog.audit_log import MAX_PAGE

    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_PAGE}")
    return int(raw)


def _common(p: argparse.ArgumentParser) -> None:
    """The options every command that opens the database takes."""
    p.add_argument("--database-url", help="SQLAlchemy URL (default: $REGISTRY_DATABASE_URL or SQLite in ./data)")
    p.add_argument("--data-dir", help="folder for the SQLite database and generated key (default: ./data)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-registry", description="Prompt, resource and tool registry + MCP server")
    parser.add_argument("--version", action="version", version=f"mcp-registry {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server (MCP endpoint, admin API, web UI)")
    _common(serve)
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--seed", help="import a bundle at start (a name under seed_data/ or a folder); idempotent")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--access-log", action="store_true", help="log every HTTP request (off: it costs throughput)")
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes serving the port, each a replica (default $REGISTRY_WORKERS or 1; about one per core)",
    )
    serve.set_defaults(func=cmd_serve)

    stdio = commands.add_parser("stdio", help="serve MCP over stdin/stdout (for hosts that start a child process)")
    _common(stdio)
    stdio.add_argument("--label", help="which label to serve (default: production)")
    stdio.add_argument("--seed", help="import a bundle at start (a name under seed_data/ or a folder); idempotent")
    stdio.set_defaults(func=cmd_stdio)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    _common(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)

    imp = commands.add_parser(
        "import", help="import a YAML bundle in one transaction (only what differs is written; all or nothing)"
    )
    _common(imp)
    imp.add_argument("directory")
    imp.add_argument(
        "--plan",
        action="store_true",
        help="print what would change (with a diff per changed entry) and every invalid file; write nothing",
    )
    imp.add_argument("--label", action="append", help="labels for new versions (default: production)")
    imp.add_argument("--actor", default="import", help="author recorded on new versions")
    imp.add_argument(
        "--secrets-key",
        metavar="KEY",
        help="the key an export's write-only values were encrypted with (default: $REGISTRY_EXPORT_KEY)",
    )
    imp.set_defaults(func=cmd_import)

    exp = commands.add_parser(
        "export", help="export the catalog as a YAML bundle (newest versions, a label's, or the whole history)"
    )
    _common(exp)
    exp.add_argument("directory")
    which = exp.add_mutually_exclusive_group()
    which.add_argument("--label", help="export the version this label serves (entries without it are left out)")
    which.add_argument(
        "--all-versions",
        action="store_true",
        help="export every version with its author, note and date, the labels and archived entries (moves a catalog)",
    )
    exp.add_argument(
        "--secrets",
        choices=["key", "env", "mask"],
        help="how to write header values and signing secrets: encrypted under --secrets-key (key), as "
        "${env:NAME} references (env), or masked for a re-import into this same catalog (mask)",
    )
    exp.add_argument(
        "--secrets-key", metavar="KEY", help="encrypt write-only values under KEY (default: $REGISTRY_EXPORT_KEY)"
    )
    exp.set_defaults(func=cmd_export)

    add_catalog_commands(commands)  # lint, plan, push, pull: the catalog as code (registry/cli_catalog.py)

    token = commands.add_parser("token", help="API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token and print it (only time it is shown)")
    _common(create)
    create.add_argument("--name", required=True)
    create.add_argument(
        "--scope", action="append", required=True, choices=["admin", "reviewer", "editor", "viewer", "agent"]
    )
    create.add_argument("--label", help="agent tokens: the label this agent is served")
    create.add_argument(
        "--team",
        action="append",
        default=[],
        metavar="TEAM[:ROLE]",
        help="a team membership (role viewer, editor, reviewer or admin; default viewer); repeatable",
    )
    create.add_argument(
        "--expires-in-days", type=_positive_days, metavar="N", help="the token stops working N days from now"
    )
    create.set_defaults(func=cmd_token_create)

    audit = commands.add_parser("audit", help="the hash-chained audit trail (the change log)")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_commands.add_parser(
        "verify",
        help="check the keyed chain and that the tables agree with it (exit 1 naming every difference)",
    )
    _common(verify)
    verify.add_argument(
        "--anchor",
        metavar="FILE",
        help="a head kept earlier (`audit head`, GET /api/v1/audit/head): it must still be there",
    )
    verify.set_defaults(func=cmd_audit_verify)
    head = audit_commands.add_parser("head", help="print the chain's newest row id and MAC (an anchor to keep)")
    _common(head)
    head.set_defaults(func=cmd_audit_head)
    listing = audit_commands.add_parser("list", help="print the newest changes, one per line")
    _common(listing)
    for option in ("actor", "team", "kind", "name", "action"):
        listing.add_argument(f"--{option}", help=f"only changes with this {option} (exact)")
    listing.add_argument("--oldest", action="store_true", help="the oldest changes first")
    listing.add_argument("--limit", type=_page_size, default=50, help="how many (default 50, at most 500)")
    listing.set_defaults(func=cmd_audit_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Logs go to stderr: with `stdio`, stdout carries the protocol.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # httpx (the single sign-on client's fetches of the issuer's metadata and keys) logs every
    # request at INFO with its full URL: not worth a line each.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        # argparse's usage error is 2, which `plan` answers when a push would change something: the
        # catalog-as-code commands answer every error with 1 (argparse has printed the usage).
        given = list(sys.argv[1:] if argv is None else argv)
        if exc.code == 2 and given and given[0] in CATALOG_COMMANDS:
            return 1
        raise
    try:
        return int(args.func(args))
    except (CatalogError, FileNotFoundError, CliError, SecretKeyError, SettingsError, AuditKeyMismatch) as exc:
        print(f"error: {getattr(exc, 'detail', exc)}", file=sys.stderr)
        return 2
    except OperationalError as exc:  # the database could not be opened or answered
        print(f"error: the database could not be used: {describe(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
