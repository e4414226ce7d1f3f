"""``View``: what a web UI route renders with (its request and the templates), as a dependency.

A module's pages subclass it (a dataclass: FastAPI fills each field as a dependency) with the
services they read, and keep the helpers their routes share as its methods, so each route is a
plain function taking one ``...PagesDep``. No postponed annotations here: FastAPI reads these
fields' types from the subclasses' ``__init__``, in the subclasses' modules.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from registry.ui.auth import is_https
from registry.ui.templating import PagesDep, set_flash


@dataclass
class View:
    request: Request
    pages: PagesDep

    def render(self, template: str, context: Mapping[str, Any] | None = None, **options: Any) -> HTMLResponse:
        return self.pages.render(self.request, template, context, **options)

    def redirect(self, target: str, notice: str) -> Response:
        """Post/redirect/get: to ``target``, which shows ``notice`` once."""
        response = RedirectResponse(target, status_code=303)
        set_flash(response, notice, secure=is_https(self.request))
        return response


ViewDep = Annotated[View, Depends()]
