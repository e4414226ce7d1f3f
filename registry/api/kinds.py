"""Routes written once for the three kinds of entry.

A kind's routes are module-level handlers added to that kind's router (:func:`kind_router`), whose
route class carries the kind; a handler asks for it with ``kind: KindDep``, read from the route
FastAPI matched (``request.scope["route"]``). No handler is a closure made per kind. What the
contract says per kind about a name (its description, an example) is added to the OpenAPI document
by ``registry.api.openapi``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, Depends, Path, Request
from fastapi.routing import APIRoute

from registry.catalog.specs import KIND_BY_COLLECTION, NAME_PATTERN


class KindRoute(APIRoute):
    """A route of one kind's router (a subclass per kind, so the kind survives ``include_router``)."""

    kind: ClassVar[str]


_ROUTE_CLASSES: dict[str, type[KindRoute]] = {
    collection: type(f"{kind.capitalize()}Route", (KindRoute,), {"kind": kind})
    for collection, kind in KIND_BY_COLLECTION.items()
}


def kind_router(collection: str, **options: Any) -> APIRouter:
    """A router whose routes serve ``collection`` (``prompts``, ...): its handlers' ``KindDep`` is its kind."""
    return APIRouter(route_class=_ROUTE_CLASSES[collection], **options)


def route_kind(request: Request) -> str:
    route = request.scope["route"]
    assert isinstance(route, KindRoute), "a KindDep handler on a router not made by kind_router"
    return route.kind


#: The kind of entry (``prompt``, ``resource``, ``tool``) the matched route serves.
KindDep = Annotated[str, Depends(route_kind)]
#: An entry's name in a path (described per kind in the OpenAPI document).
EntryName = Annotated[str, Path(pattern=NAME_PATTERN, min_length=1, max_length=128)]
