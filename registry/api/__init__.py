"""The admin REST API (``/api/v1``): thin routers over the catalog and token services."""
