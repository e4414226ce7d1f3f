"""Errors the service layer raises; the REST API turns them into problem+json, MCP into JSON-RPC errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Subject:
    """What a refusal is about, so whoever shows it can point the way on (the web UI links the
    entry, its history, the open change request) instead of a dead end. Names, not URLs: this
    layer does not know where things are shown.

    ``missing`` names the part that does not exist (``entry``, ``version``, ``label``,
    ``request``): a missing entry is linked to its list and a search for its name, not to itself.
    """

    kind: str | None = None
    name: str | None = None
    version: int | None = None
    label: str | None = None
    request_id: int | None = None
    missing: str | None = None


class CatalogError(Exception):
    status = 400
    title = "Bad request"

    def __init__(
        self, detail: str, *, errors: list[dict[str, Any]] | None = None, about: Subject | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.about = about


class NotFound(CatalogError):
    status = 404
    title = "Not found"


class Conflict(CatalogError):
    status = 409
    title = "Conflict"


class RequestPending(Conflict):
    """What is asked is already asked by an open change request (``request_id``): the API's
    problem names and links it, the web UI links its page."""

    def __init__(self, detail: str, *, request_id: int, about: Subject | None = None) -> None:
        super().__init__(detail, about=about or Subject(request_id=request_id))
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
