"""Errors the service layer raises; the REST API turns them into problem+json, MCP into JSON-RPC errors."""

from __future__ import annotations

from typing import Any


class CatalogError(Exception):
    status = 400
    title = "Bad request"

    def __init__(self, detail: str, *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors


class NotFound(CatalogError):
    status = 404
    title = "Not found"


class Conflict(CatalogError):
    status = 409
    title = "Conflict"


class RequestPending(Conflict):
    """What is asked is already asked by an open change request (``request_id``): the API's
    problem names and links it, the web UI links its page."""

    def __init__(self, detail: str, *, request_id: int) -> None:
        super().__init__(detail)
        self.request_id = request_id


class PreconditionFailed(CatalogError):
    status = 412
    title = "Precondition failed"


class Invalid(CatalogError):
    status = 422
    title = "Invalid entry"


class Forbidden(CatalogError):
    """The caller may see the entry but lacks the role this needs (a team role, a reviewer other
    than the author, an admin for an override)."""

    status = 403
    title = "Forbidden"
