"""The history file of ``export --all-versions``: one entry with every version, its labels and state.

``history/<prompts|resources|tools>/<name>.yaml``::

    name: summarize
    archived: false
    created_at: '2025-06-01T09:30:00+00:00'
    updated_at: '2025-06-03T14:02:11+00:00'
    labels:               # label -> version; 'latest' is implied (the last version)
      production: 2
      staging: 3
    versions:
    - version: 1
      author: alice
      created_at: '2025-06-01T09:30:00+00:00'
      note: first draft
      spec:               # the entry as in an entry bundle (prompts/<name>.yaml)
        name: summarize
        template: ...

Versions are numbered 1, 2, ... in order, as the catalog numbers them; an import restores them
with those numbers, authors, notes and timestamps.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from registry.catalog.specs import NAME_PATTERN, is_label

LATEST = "latest"


class VersionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, le=2**31 - 1)
    author: Annotated[str, Field(min_length=1, max_length=128)]
    created_at: AwareDatetime
    note: str | None = None
    spec: dict[str, Any]


class HistoryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    archived: bool = False
    created_at: AwareDatetime
    updated_at: AwareDatetime
    labels: dict[str, int] = Field(default_factory=dict)
    versions: list[VersionFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> HistoryFile:
        numbers = [v.version for v in self.versions]
        if numbers != list(range(1, len(numbers) + 1)):
            raise ValueError(f"versions must be numbered 1, 2, ... in order; found {numbers[:10]}")
        for label, number in self.labels.items():
            if label == LATEST:
                if number != numbers[-1]:
                    raise ValueError(f"'latest' must name the last version ({numbers[-1]}), not {number}")
            elif not is_label(label):
                raise ValueError(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
            if not 1 <= number <= numbers[-1]:
                raise ValueError(f"label {label!r} points at version {number}, which the file does not have")
        return self


def history_document(
    name: str,
    *,
    archived: bool,
    created_at: str,
    updated_at: str,
    labels: dict[str, int],
    versions: list[dict[str, Any]],
) -> dict[str, Any]:
    """A history file's content, keys in the documented order."""
    return {
        "name": name,
        "archived": archived,
        "created_at": created_at,
        "updated_at": updated_at,
        "labels": {k: v for k, v in sorted(labels.items()) if k != LATEST},
        "versions": versions,
    }
