"""The ``mcp-registry`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from registry import __version__
from registry.catalog.errors import CatalogError
from registry.config import Settings

if TYPE_CHECKING:
    from registry.runtime import Registry


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
    import uvicorn

    from registry.app import create_app
    from registry.serving import DrainingServer

    settings = _settings(args)
    from registry.runtime import Registry

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
    sys.stdout.flush()
    app = create_app(registry, freeze_gc=True)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
        access_log=args.access_log,
    )
    DrainingServer(config, drain=app.mcp.drain).run()
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    import asyncio

    from registry.catalog.service import PRODUCTION
    from registry.mcp.notifier import ChangeFeed, Notifier
    from registry.mcp.server import McpServer
    from registry.mcp.sessions import ClientState
    from registry.mcp.streams import StreamHub
    from registry.mcp.transports.stdio import StdioTransport, open_stdin_reader
    from registry.runtime import Registry

    settings = _settings(args)
    registry = Registry(settings)
    registry.prepare(seed=args.seed, demo_if_empty=settings.database_url is None)
    server = McpServer(
        registry.catalog, webhook_allowed_networks=settings.webhook_allowed_networks, limits=settings.limits
    )
    client = ClientState(label=args.label or PRODUCTION, principal="stdio")

    async def run() -> None:
        transport = StdioTransport(server, client, limits=settings.limits)
        # Admin edits (made through a registry server on the same database) reach this client on stdout.
        notifier = Notifier(StreamHub(), registry.db, server.snapshots.invalidate)
        notifier.direct.append((client, transport.write))
        feed = ChangeFeed(registry.db, notifier.dispatch)
        await feed.start()
        try:
            await transport.run(await open_stdin_reader())
        finally:
            await feed.stop()
            await server.aclose()

    asyncio.run(run())
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    registry = _registry(args)
    registry.migrate()
    print("database is at the current migration")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from registry.catalog.bundles import apply_import, plan_import

    registry = _registry(args)
    registry.migrate()
    directory = Path(args.directory)
    if args.plan:
        items = [item for item, _ in plan_import(registry.catalog, directory)]
    else:
        items = apply_import(registry.catalog, directory, actor=args.actor, labels=args.label or None)
    for item in items:
        print(f"{item.action:14} {item.kind:9} {item.name}")
    changed = sum(1 for item in items if item.action in ("create", "update"))
    print(f"{'would change' if args.plan else 'changed'} {changed} of {len(items)} entries")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from registry.catalog.bundles import export_bundle

    registry = _registry(args)
    written = export_bundle(registry.catalog, Path(args.directory))
    print(f"wrote {len(written)} files to {args.directory}")
    return 0


def _positive_days(raw: str) -> float:
    try:
        days = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {raw!r}") from None
    if not 0 < days <= 36_500:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 36500 days")
    return days


def cmd_token_create(args: argparse.Namespace) -> int:
    registry = _registry(args)
    registry.migrate()
    expires_at = None
    if args.expires_in_days is not None:
        from datetime import UTC, datetime, timedelta

        expires_at = datetime.now(UTC) + timedelta(days=args.expires_in_days)
    token, info = registry.tokens.create(
        args.name, args.scope, label=args.label, created_by="cli", expires_at=expires_at
    )
    print(token)
    expiry = f", expires {info['expires_at']}" if info.get("expires_at") else ""
    print(f"(token {info['id']}, scopes {', '.join(info['scopes'])}{expiry}; shown only now)", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-registry", description="Prompt, resource and tool registry + MCP server")
    parser.add_argument("--version", action="version", version=f"mcp-registry {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database-url", help="SQLAlchemy URL (default: $REGISTRY_DATABASE_URL or SQLite in ./data)")
        p.add_argument("--data-dir", help="folder for the SQLite database and generated key (default: ./data)")

    serve = commands.add_parser("serve", help="run the HTTP server (MCP endpoint, admin API, web UI)")
    common(serve)
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--seed", help="import a bundle at start (a name under seed_data/ or a folder); idempotent")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--access-log", action="store_true", help="log every HTTP request (off: it costs throughput)")
    serve.set_defaults(func=cmd_serve)

    stdio = commands.add_parser("stdio", help="serve MCP over stdin/stdout (for hosts that start a child process)")
    common(stdio)
    stdio.add_argument("--label", help="which label to serve (default: production)")
    stdio.add_argument("--seed", help="import a bundle at start (a name under seed_data/ or a folder); idempotent")
    stdio.set_defaults(func=cmd_stdio)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    common(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)

    imp = commands.add_parser("import", help="import a YAML bundle (only what differs is written)")
    common(imp)
    imp.add_argument("directory")
    imp.add_argument("--plan", action="store_true", help="print what would change, write nothing")
    imp.add_argument("--label", action="append", help="labels for new versions (default: production)")
    imp.add_argument("--actor", default="import", help="author recorded on new versions")
    imp.set_defaults(func=cmd_import)

    exp = commands.add_parser("export", help="export every entry's newest version as a YAML bundle")
    common(exp)
    exp.add_argument("directory")
    exp.set_defaults(func=cmd_export)

    token = commands.add_parser("token", help="API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token and print it (only time it is shown)")
    common(create)
    create.add_argument("--name", required=True)
    create.add_argument("--scope", action="append", required=True, choices=["admin", "editor", "viewer", "agent"])
    create.add_argument("--label", help="agent tokens: the label this agent is served")
    create.add_argument(
        "--expires-in-days", type=_positive_days, metavar="N", help="the token stops working N days from now"
    )
    create.set_defaults(func=cmd_token_create)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Logs go to stderr: with `stdio`, stdout carries the protocol.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CatalogError, FileNotFoundError) as exc:
        print(f"error: {getattr(exc, 'detail', exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
