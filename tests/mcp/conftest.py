"""MCP-level fixtures. The loopback webhook server is the one the webhook client tests use."""

from tests.webhooks.conftest import webhook_server

__all__ = ["webhook_server"]
