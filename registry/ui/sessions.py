"""The signed-in session type, importable here until ``ui/tool_test.py`` imports it from its home,
``registry.catalog.web_sessions`` (where the sessions store lives)."""

from registry.catalog.web_sessions import SignedIn as SignedIn
