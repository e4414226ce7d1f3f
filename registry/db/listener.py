"""PostgreSQL LISTEN, so a replica hears about changes committed by any other replica.

The notification carries only the change-log id; the rows themselves are always read from the
table (NOTIFY payloads are not durable, the table is). After every (re)connect the caller is told
to catch up, which covers whatever was committed while the connection was down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

log = logging.getLogger("registry.db")


def libpq_conninfo(sqlalchemy_url: str) -> str:
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


async def listen_forever(
    sqlalchemy_url: str,
    channels: dict[str, Callable[[str], None]],
    on_connected: Callable[[], None],
    *,
    retry_s: float = 0.5,
    max_retry_s: float = 2.0,
    options: Mapping[str, Any] | None = None,
) -> None:
    """LISTEN on ``channels`` (name -> callback with the payload) for as long as the task runs.

    A lost connection is retried with a back-off capped at ``max_retry_s``: the polls that cover
    for it are slow, so LISTEN must be back within seconds of the database, however long the
    outage was. ``options``: extra libpq parameters (connect timeout, keepalives).
    """
    conninfo = libpq_conninfo(sqlalchemy_url)
    delay = retry_s
    lost_at: float | None = None
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **dict(options or {})) as conn:
                for channel in channels:
                    await conn.execute(f'LISTEN "{channel}"')
                delay = retry_s
                if lost_at is not None:
                    log.warning("LISTEN connection restored after %.1fs", time.monotonic() - lost_at)
                    lost_at = None
                on_connected()
                async for notify in conn.notifies():
                    callback = channels.get(notify.channel)
                    if callback is not None:
                        callback(notify.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if lost_at is None:  # once per outage, not once per attempt
                lost_at = time.monotonic()
                log.warning("LISTEN connection lost (%s); reconnecting every %.1fs at most", exc, max_retry_s)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_retry_s)
