"""Which collection (prompts, resources, tools) an entry page's route serves.

An entry's pages are the same for every kind, so their routes (``entries``, ``editor_routes``,
``usage``'s entry page) are written once, under ``PREFIX``: a path parameter that matches only
the collections' names (anything else is still "no such page"), taken as ``CollectionDep``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path
from starlette.convertors import StringConvertor, register_url_convertor

from registry.catalog.specs import KIND_BY_COLLECTION
from registry.ui.templating import COLLECTIONS


@dataclass(frozen=True)
class Collection:
    """``prompts`` (its URL segment), ``prompt`` (the catalog's kind), ``Prompt`` (as pages say it)."""

    name: str
    kind: str
    title: str

    @property
    def common(self) -> dict[str, str]:
        """The values every page of the collection gives its template."""
        return {"collection": self.name, "kind": self.kind, "kind_title": self.title, "nav": self.name}

    def url(self, entry: str) -> str:
        return f"/ui/{self.name}/{entry}"


BY_NAME = {name: Collection(name, KIND_BY_COLLECTION[name], title.removesuffix("s")) for name, title in COLLECTIONS}


#: The prefix of every route of an entry's pages: ``/prompts``, ``/resources`` or ``/tools``.
PREFIX = "/{collection:collection}"
COLLECTION_OF_KIND = {c.kind: c.name for c in BY_NAME.values()}


class CollectionConvertor(StringConvertor):
    regex = "|".join(BY_NAME)


register_url_convertor("collection", CollectionConvertor())


def route_collection(collection: Annotated[str, Path()]) -> Collection:
    return BY_NAME[collection]


CollectionDep = Annotated[Collection, Depends(route_collection)]
