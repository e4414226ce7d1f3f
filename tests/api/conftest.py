"""Admin-API fixtures: the loopback webhook server the tool tests call."""

from tests.webhooks.conftest import webhook_server

__all__ = ["webhook_server"]
