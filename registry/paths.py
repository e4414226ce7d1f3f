"""Where the files that ship beside the code live.

In a source checkout (and an editable install) ``migrations/``, ``seed_data/`` and ``admin_ui/``
sit at the repository's top level; a wheel carries them as the packages ``registry._migrations``,
``registry._seed_data`` and ``registry._admin_ui``. Every caller asks here, so both layouts work.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _locate(package: str, top_level: str) -> Path:
    checkout = _REPO_ROOT / top_level
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec(f"registry.{package}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    raise FileNotFoundError(f"cannot find the bundled {top_level}/ folder; is mcp-registry installed correctly?")


def migrations_dir() -> Path:
    return _locate("_migrations", "migrations")


def seed_data_dir() -> Path:
    return _locate("_seed_data", "seed_data")


def admin_ui_dir() -> Path:
    return _locate("_admin_ui", "admin_ui")
