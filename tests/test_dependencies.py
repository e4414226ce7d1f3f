"""The tested environment is pinned: constraints.txt names an exact version for every dependency pyproject.toml
declares (runtime and test), inside the range pyproject admits, so an install with it gets what CI ran."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]


@pytest.mark.parametrize("requirement", _declared(), ids=str)
def test_each_declared_dependency_is_pinned_inside_its_range(requirement: Requirement) -> None:
    if requirement.marker is not None and not requirement.marker.evaluate():
        pytest.skip(f"{requirement.name} is not used on this platform")
    version = _pins().get(canonicalize_name(requirement.name))
    assert version is not None, f"constraints.txt does not pin {requirement.name}"
    assert requirement.specifier.contains(version, prereleases=True), (
        f"constraints.txt pins {requirement.name}=={version}, outside pyproject's {requirement.specifier}"
    )


def test_the_installs_use_the_constraints() -> None:
    for path in (".ci/run", "Dockerfile", "README.md"):
        assert "-c constraints.txt" in (ROOT / path).read_text(), f"{path} installs without constraints.txt"
