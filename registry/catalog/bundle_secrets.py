"""How write-only values travel in bundles: header values of webhooks and http resources, and
webhook signing secrets.

The API never shows them (``********``), and a masked value sent back means "keep the stored
one", which works only where that stored value exists: an export meant to move a catalog to
another instance needs the values themselves, without writing them in the clear. Three forms:

``mask``
    ``********``, as every API shows them. Importing into the *same* catalog keeps the stored
    values; importing where the entry (or that header) is not stored is refused, naming the file
    and field.
``key``
    ``${enc:<Fernet token>}``: encrypted under a passphrase the operator gives (``--secrets-key`` or
    ``REGISTRY_EXPORT_KEY``), stretched with SHA-256 exactly as ``REGISTRY_SECRET_KEY`` is. The import
    decrypts with the same passphrase and seals the values again under the target's own key.
``env``
    ``${env:PAYMENTS_API_KEY}``: a reference resolved from the importing process's environment.
    Names are derived from the entry and the header (a leading ``X-`` dropped; ``<TOOL>_WEBHOOK_SECRET``
    for a signing secret), upper-cased, with other characters as ``_``; the export lists them.

An import resolves ``${env:NAME}`` and ``${enc:...}`` in those positions of any bundle (a bundle
written by hand can use them too), before the entries are validated; a value that cannot be
resolved is reported with its file and field, and nothing is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.catalog.secrets import MASK, SecretBox, SecretKeyError

ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]{0,127})\}")
ENC_PREFIX = "${enc:"
ENC_SUFFIX = "}"
#: The plain text whose encryption the manifest carries, so an import can tell a wrong key at once.
KEY_CHECK = "mcp-registry export key check"
#: The environment variable an operator may set instead of passing ``--secrets-key``.
EXPORT_KEY_ENV = "REGISTRY_EXPORT_KEY"
MODES = ("mask", "key", "env")


@dataclass(frozen=True)
class Slot:
    """One write-only value in a spec: where it is (for messages) and how to reach it."""

    field: str
    holder: dict[str, Any]
    key: str
    #: For ``headers`` values: the mapping the value sits in (``holder["headers"]``).
    in_headers: bool
    header: str | None


def slots(kind: str, spec: Any) -> Iterator[Slot]:
    """The write-only values of a spec (raw, canonical or stored form alike); nothing for prompts."""
    if not isinstance(spec, dict):
        return
    if kind == "tool":
        holder, prefix = spec.get("webhook"), "webhook."
    elif kind == "resource":
        holder, prefix = spec, ""
    else:
        return
    if not isinstance(holder, dict):
        return
    headers = holder.get("headers")
    if isinstance(headers, dict):
        for header in list(headers):
            yield Slot(f"{prefix}headers.{header}", headers, header, True, str(header))
    if kind == "tool" and holder.get("secret") is not None:
        yield Slot(f"{prefix}secret", holder, "secret", False, None)


def has_secrets(kind: str, spec: Mapping[str, Any]) -> bool:
    return any(slot.holder.get(slot.key) for slot in slots(kind, dict(spec)))


def env_name(entry: str, slot: Slot) -> str:
    """``PAYMENTS_API_KEY`` for tool ``payments``'s header ``X-Api-Key``."""
    if slot.header is None:
        tail = "WEBHOOK_SECRET"
    else:
        tail = slot.header[2:] if slot.header.lower().startswith("x-") and len(slot.header) > 2 else slot.header
    name = re.sub(r"[^A-Za-z0-9]+", "_", f"{entry}_{tail}").strip("_").upper()
    return name if name and not name[0].isdigit() else f"SECRET_{name}"


@dataclass
class ExportSecrets:
    """Turns the clear write-only values of a spec into the chosen export form (in place)."""

    mode: str
    key: str | None = None
    #: env mode: variable name -> (value, where it is used); the values never leave this object.
    variables: dict[str, tuple[str, list[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown secrets mode {self.mode!r}; one of {', '.join(MODES)}")
        if self.mode == "key" and not self.key:
            raise ValueError("the key mode needs a passphrase")
        self._box = SecretBox(self.key) if self.key else None

    def encrypt(self, value: str) -> str:
        assert self._box is not None
        token = self._box.encrypt(value).removeprefix("enc:v1:")
        return f"{ENC_PREFIX}{token}{ENC_SUFFIX}"

    def key_check(self) -> str | None:
        return self.encrypt(KEY_CHECK) if self.mode == "key" else None

    def encode(self, kind: str, name: str, revealed: dict[str, Any], *, version: int | None = None) -> dict[str, Any]:
        """``revealed`` (decrypted values) in the export form; ``mask`` mode expects it masked already."""
        for slot in slots(kind, revealed):
            value = slot.holder.get(slot.key)
            if not isinstance(value, str) or self.mode == "mask":
                continue
            if self.mode == "key":
                slot.holder[slot.key] = self.encrypt(value)
            else:
                where = f"{kind} {name}" + (f" v{version}" if version is not None else "") + f": {slot.field}"
                slot.holder[slot.key] = "${env:" + self._variable(env_name(name, slot), value, where) + "}"
        return revealed

    def _variable(self, base: str, value: str, where: str) -> str:
        """The variable for ``value``: ``base``, or ``base_2``... when ``base`` already stands for another
        value (another version of the same header, or two entries whose names fold alike)."""
        candidate, n = base, 1
        while candidate in self.variables and self.variables[candidate][0] != value:
            n += 1
            candidate = f"{base}_{n}"
        if candidate not in self.variables:
            self.variables[candidate] = (value, [])
        self.variables[candidate][1].append(where)
        return candidate

    def usage(self) -> dict[str, list[str]]:
        """env mode: variable -> where it is used (what the export's README lists)."""
        return {name: uses for name, (_value, uses) in sorted(self.variables.items())}


@dataclass
class ImportSecrets:
    """Resolves ``${env:...}`` and ``${enc:...}`` values of an incoming raw spec (in place)."""

    key: str | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def __post_init__(self) -> None:
        self._box = SecretBox(self.key) if self.key else None

    def check_key(self, check: str | None) -> str | None:
        """A problem with the export key, given the manifest's key check (None when it fits)."""
        if check is None:
            return None
        if self._box is None:
            return f"the bundle's write-only values are encrypted: pass --secrets-key or set {EXPORT_KEY_ENV}"
        if self._decrypt(check) != KEY_CHECK:
            return "the export key given is not the one this bundle was written with"
        return None

    def _decrypt(self, value: str) -> str | None:
        assert self._box is not None
        try:
            return self._box.decrypt("enc:v1:" + value[len(ENC_PREFIX) : -len(ENC_SUFFIX)])
        except SecretKeyError:
            return None

    def resolve(self, kind: str, raw: dict[str, Any]) -> list[tuple[str, str]]:
        """Replace references with their values; returns (field, problem) for those that fail."""
        problems: list[tuple[str, str]] = []
        for slot in slots(kind, raw):
            value = slot.holder.get(slot.key)
            if not isinstance(value, str):
                continue
            env = ENV_REFERENCE.fullmatch(value)
            if env is not None:
                resolved = self.environ.get(env.group(1))
                if resolved is None:
                    problems.append((slot.field, f"environment variable {env.group(1)} is not set"))
                else:
                    slot.holder[slot.key] = resolved
            elif value.startswith(ENC_PREFIX) and value.endswith(ENC_SUFFIX):
                if self._box is None:
                    problems.append(
                        (slot.field, f"is encrypted with an export key: pass --secrets-key or set {EXPORT_KEY_ENV}")
                    )
                    continue
                clear = self._decrypt(value)
                if clear is None:
                    problems.append((slot.field, "cannot be decrypted with the export key given (a different key?)"))
                else:
                    slot.holder[slot.key] = clear
        return problems


def masked_fields(kind: str, spec: Mapping[str, Any]) -> list[str]:
    """The fields of ``spec`` that hold ``********`` (a "keep the stored value" marker)."""
    return [slot.field for slot in slots(kind, dict(spec)) if slot.holder.get(slot.key) == MASK]
