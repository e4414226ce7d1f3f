"""Every limit is a setting, and docs/limits.md (linked from the README) lists each with its default, so
operators can find the name an error message gives them."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from registry.config import Settings
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits, env_name

LIMITS_DOC = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [f.name for f in fields(Limits)])
def test_the_limits_document_lists_each_limit_with_its_default(name: str) -> None:
    variable = env_name(name)
    rows = [line for line in LIMITS_DOC.splitlines() if line.startswith("|") and f"`{variable}`" in line]
    assert rows, f"docs/limits.md has no table row for {variable}"
    default = getattr(DEFAULT_LIMITS, name)
    shown = re.sub(r"\.0$", "", str(default))
    assert any(f"`{shown}`" in row for row in rows), f"docs/limits.md row for {variable} lacks its default {shown}"


def test_limits_come_from_the_environment() -> None:
    limits = Limits.from_env({"REGISTRY_LIMIT_JSON_DEPTH": "12", "REGISTRY_LIMIT_RENDER_SECONDS": "0.5"})
    assert limits.json_depth == 12 and limits.render_seconds == 0.5
    assert limits.body_bytes == DEFAULT_LIMITS.body_bytes
    # The variable the body cap had before limits had one home still works.
    assert Limits.from_env({"REGISTRY_MAX_BODY_BYTES": "1000"}).body_bytes == 1000
    with pytest.raises(ValueError, match="REGISTRY_LIMIT_TAGS must be positive"):
        Limits.from_env({"REGISTRY_LIMIT_TAGS": "0"})
    with pytest.raises(ValueError, match="REGISTRY_LIMIT_TAGS must be a number"):
        Limits.from_env({"REGISTRY_LIMIT_TAGS": "many"})


def test_settings_carry_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY_LIMIT_SUBSCRIPTIONS", "7")
    settings = Settings.from_env()
    assert settings.limits.subscriptions == 7


def test_a_refusal_names_its_setting() -> None:
    error = LimitExceeded("tags", "an entry has 40 tags; at most 32")
    assert str(error) == "an entry has 40 tags; at most 32 (limit REGISTRY_LIMIT_TAGS)"
    assert error.limit == "tags"
