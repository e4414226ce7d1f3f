"""Change events to other systems: admins subscribe a URL to events of the change log, and one
replica POSTs each matching event to it, signed as Standard Webhooks specify.

- :mod:`.types`: which change-log rows are which events, the filters, the bodies.
- :mod:`.signing`: ``whsec_`` secrets and ``webhook-signature`` values.
- :mod:`.service`: subscriptions and their delivery log (the admin API and the web UI call it).
- :mod:`.queue`: turning change-log rows into deliveries behind each subscription's cursor, and
  recording attempts; the database work of the deliverer.
- :mod:`.lease`: which process delivers (one at a time, on SQLite and PostgreSQL alike).
- :mod:`.deliverer`: the asyncio task that sends, retries with back-off, and follows the change log.
"""

from __future__ import annotations

from .signing import generate_secret, sign
from .types import EVENT_TYPES

__all__ = ["EVENT_TYPES", "generate_secret", "sign"]
