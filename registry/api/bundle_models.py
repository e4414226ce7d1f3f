"""The shapes of ``/api/v1/bundles``: a bundle as a JSON document of files, its plan, what applying
it did, and an export.

A bundle travels as ``{"files": {"prompts/summarize.yaml": "<YAML text>", ...}}`` both ways
(``mcp-registry plan`` / ``push`` send one, ``pull`` receives one): a folder's files are what people
review in a pull request, and JSON keeps the contract typed and fuzzable like every other body. The
server zips it and hands it to ``registry.catalog.bundle_archive.ZipBundles``, the web UI's import
path, so validation, limits and the all-or-nothing write are the same.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

#: A bundle file's path: an entry file, a history file, or the manifest (what a zip may hold).
BUNDLE_PATH_PATTERN = r"^(?:(?:history/)?(?:prompts|resources|tools)/[^/\\\x00-\x1f]{1,200}\.ya?ml|export\.yaml)$"

_PATH = re.compile(BUNDLE_PATH_PATTERN)
_PATH_CHARS = 230


def _bundle_paths(files: dict[str, str]) -> dict[str, str]:
    wrong = [name for name in files if len(name) > _PATH_CHARS or not _PATH.match(name)]
    if wrong:
        shown = ", ".join(repr(name[:80]) for name in wrong[:5])
        raise ValueError(
            f"not a bundle file: {shown}; give prompts/, resources/, tools/ (or history/...) <name>.yaml, "
            "or export.yaml"
        )
    return files


FileMap = Annotated[
    dict[str, str],
    AfterValidator(_bundle_paths),
    Field(
        description="path in the bundle folder (`prompts/`, `resources/`, `tools/` or `history/...` `<name>.yaml`, "
        "or `export.yaml`) -> the file's YAML text (UTF-8)",
        json_schema_extra={"propertyNames": {"pattern": BUNDLE_PATH_PATTERN, "maxLength": _PATH_CHARS}},
    ),
]

_PROMPT_FILE = (
    "name: release-notes\n"
    "description: Draft release notes\n"
    "arguments:\n"
    "- name: changes\n"
    "  required: true\n"
    "samples:\n"
    "- changes: '- faster search'\n"
    "template: |\n"
    "  Write release notes for:\n"
    "  {{ changes }}\n"
)
_FILES_EXAMPLE: dict[str, JsonValue] = {"prompts/release-notes.yaml": _PROMPT_FILE}
_FINGERPRINT = "5d41402abc4b2a76b9719d911017c592ae0f1e2c3d4b5a69788796a5b4c3d2e1"
_DIFF = (
    "--- prompt release-notes (stored v1)\n"
    "+++ prompt release-notes (prompts/release-notes.yaml)\n"
    "@@ -1,3 +1,3 @@\n"
    "-description: Draft release notes\n"
    "+description: Draft short release notes\n"
)


class BundleUpload(BaseModel):
    """A bundle to plan: the files of its folder."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"files": _FILES_EXAMPLE}]})

    files: FileMap


class BundleApply(BaseModel):
    """A bundle to apply, with the fingerprint of the plan that was shown (optional)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"files": _FILES_EXAMPLE}]},
    )

    files: FileMap
    fingerprint: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the `fingerprint` of the plan shown: when the plan made now differs (the catalog moved), "
        "nothing is written and the answer is 409. Left out: the plan made now is applied",
    )


class BundlePlanItem(BaseModel):
    """One entry of a bundle and what importing it does."""

    kind: str = Field(description="`prompt`, `resource` or `tool`")
    name: str
    action: str = Field(
        description="`create`, `update`, `unchanged`, `skip-archived` (archived here: left alone), `restore` "
        "(a history file), `conflict` (a history file for an entry with another history)"
    )
    source: str = Field(description="the file in the bundle")
    live: list[str] = Field(description="labels the new version gets at once (`latest` not listed)")
    review: list[str] = Field(description="protected labels left where they are: a change request each")
    diff: str = Field(
        description="unified diff, stored newest version against the file (YAML; write-only values masked)"
    )


class ChangeRequestLink(BaseModel):
    """A change request an import opened for a protected label."""

    id: int
    kind: str
    name: str
    url: str = Field(description="its page in the web UI (relative to the server's base URL)")
    api: str = Field(description="the request in the admin API")


class BundlePlan(BaseModel):
    """What applying a bundle would do; nothing was written."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "fingerprint": _FINGERPRINT,
                    "summary": "1 updated, 6 unchanged",
                    "changes": 1,
                    "reviews": 0,
                    "counts": {"prompt": {"update": 1, "unchanged": 4}, "tool": {"unchanged": 2}},
                    "items": [
                        {
                            "kind": "prompt",
                            "name": "release-notes",
                            "action": "update",
                            "source": "prompts/release-notes.yaml",
                            "live": ["production"],
                            "review": [],
                            "diff": _DIFF,
                        }
                    ],
                }
            ]
        }
    )

    fingerprint: str = Field(description="pass it to `apply` to write exactly this plan")
    summary: str
    changes: int = Field(description="entries applying would write (created, updated, restored)")
    reviews: int = Field(description="entries whose protected labels would go to review")
    counts: dict[str, dict[str, int]] = Field(description="kind -> action -> how many")
    items: list[BundlePlanItem]


class BundleApplied(BundlePlan):
    """What applying a bundle wrote (in one transaction), and the change requests it opened."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "fingerprint": _FINGERPRINT,
                    "summary": "1 updated, 6 unchanged",
                    "changes": 1,
                    "reviews": 1,
                    "counts": {"prompt": {"update": 1, "unchanged": 4}, "tool": {"unchanged": 2}},
                    "items": [
                        {
                            "kind": "prompt",
                            "name": "release-notes",
                            "action": "update",
                            "source": "prompts/release-notes.yaml",
                            "live": ["staging"],
                            "review": ["production"],
                            "diff": _DIFF,
                        }
                    ],
                    "change_requests": [
                        {
                            "id": 12,
                            "kind": "prompt",
                            "name": "release-notes",
                            "url": "/ui/reviews/12",
                            "api": "/api/v1/change-requests/12",
                        }
                    ],
                }
            ]
        }
    )

    change_requests: list[ChangeRequestLink]


class BundleExport(BaseModel):
    """The catalog as a bundle folder's files (write-only values masked)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"entries": 1, "layout": "entries", "complete": True, "files": _FILES_EXAMPLE}]}
    )

    entries: int = Field(description="how many entries the files hold")
    layout: str = Field(description="`entries` (one file per entry) or `history` (`all_versions`)")
    complete: bool = Field(
        description="whether the files hold every entry the catalog has for this export: false when some team's "
        "entries are not the caller's to see (left out), so the files cannot stand for the whole catalog"
    )
    files: dict[str, str] = Field(description="path in the bundle folder -> the file's YAML text")
