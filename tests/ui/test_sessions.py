"""Web UI sessions (registry/catalog/web_sessions.py) on SQLite and PostgreSQL: what opens one, what ends it."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from registry.catalog.web_sessions import AGENT_ONLY, UiSessionStore
from registry.runtime import Registry
from registry.tokens import TokenRejected


def _store(registry: Registry, hours: float = 12.0) -> UiSessionStore:
    return UiSessionStore(registry.db, registry.tokens, hours=hours)


def test_a_session_stands_for_its_token_until_signed_out(registry: Registry) -> None:
    token, _ = registry.tokens.create("alice", ["editor"])
    store = _store(registry)
    secret, session = store.sign_in(token)
    assert session.can_edit and not session.is_admin
    found = store.find(secret)
    assert found is not None and found.principal.name == "alice" and found.csrf_token == session.csrf_token
    assert store.find(secret + "x") is None
    assert store.find(token) is None, "the token itself is not a session"
    store.sign_out(secret)
    assert store.find(secret) is None


def test_the_csrf_token_is_per_session(registry: Registry) -> None:
    token, _ = registry.tokens.create("bob", ["viewer"])
    store = _store(registry)
    first = store.sign_in(token)[1]
    second = store.sign_in(token)[1]
    assert first.csrf_token != second.csrf_token and len(first.csrf_token) >= 32


@pytest.mark.parametrize(
    ("value", "reason"),
    [("", "paste an API token"), ("mcpr_unknown", "invalid or revoked token"), ("x" * 600, "not valid")],
)
def test_wrong_tokens_are_refused_with_a_reason(registry: Registry, value: str, reason: str) -> None:
    with pytest.raises(TokenRejected, match=reason):
        _store(registry).sign_in(value)


def test_agent_tokens_open_mcp_only(registry: Registry) -> None:
    token, _ = registry.tokens.create("agent-1", ["agent"])
    with pytest.raises(TokenRejected) as refused:
        _store(registry).sign_in(token)
    assert refused.value.reason == AGENT_ONLY


def test_revoking_the_token_ends_its_sessions_at_once(registry: Registry) -> None:
    token, info = registry.tokens.create("carol", ["admin"])
    store = _store(registry)
    secret, _ = store.sign_in(token)
    registry.tokens.revoke(info["id"])
    assert store.find(secret) is None


def test_a_session_ends_after_ui_session_hours(registry: Registry) -> None:
    token, _ = registry.tokens.create("dave", ["viewer"])
    store = _store(registry, hours=1.5 / 3600)  # 1.5 seconds
    secret, session = store.sign_in(token)
    assert session.expires_at <= datetime.now(UTC) + timedelta(seconds=2)
    assert store.find(secret) is not None
    time.sleep(1.6)
    assert store.find(secret) is None


def test_a_session_never_outlives_its_token(registry: Registry) -> None:
    expires = datetime.now(UTC) + timedelta(seconds=1.5)
    token, _ = registry.tokens.create("erin", ["editor"], expires_at=expires)
    store = _store(registry, hours=12)
    secret, session = store.sign_in(token)
    assert session.expires_at <= expires
    time.sleep(1.6)
    assert store.find(secret) is None
    with pytest.raises(TokenRejected, match="expired"):
        store.sign_in(token)
