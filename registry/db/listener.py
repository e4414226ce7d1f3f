"""PostgreSQL LISTEN, so a replica hears about changes committed by any other replica.

The notification carries only the change-log id; the rows themselves are always read from the
table (NOTIFY payloads are not durable, the table is). After every (re)connect the caller is told
to catch up, which covers whatever was committed while the connection was down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

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
    retry_s: float = 1.0,
) -> None:
    """LISTEN on ``channels`` (name -> callback with the payload) for as long as the task runs."""
    conninfo = libpq_conninfo(sqlalchemy_url)
    delay = retry_s
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                for channel in channels:
                    await conn.execute(f'LISTEN "{channel}"')
                delay = retry_s
                on_connected()
                async for notify in conn.notifies():
                    callback = channels.get(notify.channel)
                    if callback is not None:
                        callback(notify.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("LISTEN connection lost (%s); retrying in %.1fs", exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 30.0)
