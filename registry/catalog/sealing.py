"""Write-only values of a definition: sealed (encrypted) when stored, masked when shown, revealed
only to make an outbound call.

A tool's webhook and an http resource carry ``headers`` (and a tool its ``secret``) that are
sent with each call and never shown: stored encrypted by ``registry.catalog.secrets.SecretBox``,
shown as ``********`` (``MASK``). A masked value sent back means "keep what is stored".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from registry.catalog.errors import Invalid
from registry.catalog.secrets import MASK, SecretBox
from registry.catalog.specs import ResourceSpec, Spec, ToolSpec, dump_spec


def secret_holder(kind: str, spec: Mapping[str, Any]) -> Any:
    """The part of a spec holding write-only values (``headers``, ``secret``) next to the ``url``
    they are sent to: a tool's webhook, an http resource itself; None for everything else."""
    if kind == "tool":
        return spec.get("webhook")
    if kind == "resource" and spec.get("headers"):
        return spec
    return None


def origin(url: Any) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of a URL, normalised (case, IDNA, default ports) and parsed the way
    the outbound client parses it, so no URL trick can look same-origin here and go elsewhere."""
    if not isinstance(url, str):
        return None
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    scheme = parsed.scheme.lower()
    port = parsed.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, parsed.raw_host.decode("ascii", "replace").lower(), port


def mask(kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The stored definition as shown: every write-only value ``MASK``."""
    spec = json.loads(json.dumps(stored))
    holder = secret_holder(kind, spec)
    if holder is not None:
        holder["headers"] = {k: MASK for k in holder.get("headers") or {}}
        if holder.get("secret"):
            holder["secret"] = MASK
    return spec


class Sealer:
    """Seals definitions for storage and reveals stored ones, with the catalog's ``SecretBox``."""

    def __init__(self, secrets: SecretBox) -> None:
        self.secrets = secrets

    def seal(self, spec: Spec, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        """The stored form: write-only values encrypted, masked values carried over from ``previous``.

        A masked value (``********``) means "keep what is stored", and is only accepted while the
        URL those values are sent to keeps its origin (scheme, host and port): otherwise anyone
        allowed to edit could point the stored credentials at a host of their own and read them
        off the next call (then publish the version to a fresh label nobody watches).
        """
        stored = dump_spec(spec)
        kind = "tool" if isinstance(spec, ToolSpec) else "resource" if isinstance(spec, ResourceSpec) else ""
        holder = secret_holder(kind, stored)
        if holder is not None:
            old = secret_holder(kind, previous or {}) or {}
            self.seal_holder(holder, old, "webhook" if kind == "tool" else "resource")
        return stored

    def seal_stored(self, kind: str, spec: Mapping[str, Any], previous: Mapping[str, Any] | None) -> dict[str, Any]:
        """``seal`` of a canonical definition (``dump_spec`` output, as bundles and drafts hold
        them): the same rules, the same stored form."""
        if secret_holder(kind, spec) is None:
            return dict(spec)
        stored = json.loads(json.dumps(spec))
        old = secret_holder(kind, previous or {}) or {}
        self.seal_holder(secret_holder(kind, stored), old, "webhook" if kind == "tool" else "resource")
        return stored

    def seal_holder(self, holder: dict[str, Any], old: Mapping[str, Any], what: str) -> None:
        """Encrypt ``holder``'s ``headers`` (and ``secret``) in place, masked ones taken from ``old``."""
        headers: Mapping[str, str] = holder.get("headers") or {}
        masked = [f"header {name!r}" for name, value in headers.items() if value == MASK]
        if holder.get("secret") == MASK:
            masked.append("the secret")
        if masked and old.get("url") and origin(holder.get("url")) != origin(old.get("url")):
            raise Invalid(
                f"the {what} URL moves to another origin (scheme, host or port) than the stored one, so its "
                f"write-only values must be sent again: {', '.join(masked)} (masked values are only kept "
                "for the same origin)"
            )
        old_headers: Mapping[str, str] = old.get("headers") or {}
        sealed: dict[str, str] = {}
        for header, value in headers.items():
            if value == MASK:
                if header not in old_headers:
                    raise Invalid(f"{what} header {header!r} is masked but has no stored value to keep")
                sealed[header] = old_headers[header]
            else:
                sealed[header] = self.secrets.encrypt(value)
        if "headers" in holder:
            holder["headers"] = sealed
        if holder.get("secret") == MASK:
            if not old.get("secret"):
                raise Invalid(f"{what} secret is masked but there is no stored secret to keep")
            holder["secret"] = old["secret"]
        elif holder.get("secret"):
            holder["secret"] = self.secrets.encrypt(holder["secret"])

    def reveal(self, kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The stored definition with write-only values decrypted (for calling webhooks and
        fetching http resources, never for display)."""
        spec = json.loads(json.dumps(stored))
        holder = secret_holder(kind, spec)
        if holder is not None:
            holder["headers"] = {k: self.secrets.decrypt(v) for k, v in (holder.get("headers") or {}).items()}
            if holder.get("secret"):
                holder["secret"] = self.secrets.decrypt(holder["secret"])
        return spec

    def same_content(self, kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether two stored specs say the same; encrypted values are compared decrypted (each
        encryption of a value differs)."""
        return old == new or self.reveal(kind, old) == self.reveal(kind, new)
