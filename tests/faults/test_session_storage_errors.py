"""Issue 24, section 4: MCP ``initialize`` when its session row cannot be stored for a reason other
than an outage.

Storing the row raised past the transport, so uvicorn answered ``500 text/plain`` "Internal Server
Error": an admin's ``?label=`` longer than a label may be (PostgreSQL refused the row: "value too
long for type character varying(64)"), or any row the database refuses. Now a label that is no
label name is refused before anything is stored (400, naming the rule), and a row the database
refuses answers a JSON-RPC internal error carrying the request's id, with its traceback logged.

Real servers on loopback, on SQLite and on PostgreSQL; the refusal is the database's own (a
trigger that rejects every new session row).
"""

from __future__ import annotations

import logging

import httpx
import pytest
from sqlalchemy import text

from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, article_initialize

_SQLITE_TRIGGER = """
CREATE TRIGGER refuse_sessions BEFORE INSERT ON mcp_sessions
BEGIN SELECT RAISE(ABORT, 'new sessions refused by a test trigger'); END
"""
_POSTGRES_TRIGGER = [
    """
    CREATE FUNCTION refuse_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'new sessions refused by a test trigger' USING ERRCODE = 'check_violation'; END $$
    """,
    "CREATE TRIGGER refuse_sessions BEFORE INSERT ON mcp_sessions FOR EACH ROW EXECUTE FUNCTION refuse_sessions()",
]


def _initialize(server: LiveServer, path: str = "/mcp") -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        return StreamableHttpClient(http, path=path, extra_headers=headers).post(article_initialize("2025-11-25"))


@pytest.mark.parametrize("label", ["l" * 65, "a%00b", "Production"])
def test_a_label_no_session_row_can_hold_is_refused_with_the_requests_id(live_server: LiveServer, label: str) -> None:
    answer = _initialize(live_server, f"/mcp?label={label}")
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert body["id"] == 1 and body["error"]["code"] == -32600, body
    assert "at most 64 characters" in body["error"]["message"]
    assert "mcp-session-id" not in answer.headers
    assert _initialize(live_server, "/mcp?label=staging").status_code == 200


def test_a_session_row_the_database_refuses_answers_a_json_rpc_error_not_plain_500(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    db = live_server.registry.db
    with db.session() as session:
        for statement in _POSTGRES_TRIGGER if db.is_postgres else [_SQLITE_TRIGGER]:
            session.execute(text(statement))
    caplog.set_level(logging.INFO)
    answer = _initialize(live_server)
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    body = answer.json()
    assert body["id"] == 1 and body["error"]["code"] == -32603, body
    assert "refused by a test trigger" not in answer.text  # what the database said stays in the log
    assert "mcp-session-id" not in answer.headers
    logged = [r for r in caplog.records if r.exc_info and "database error in MCP initialize" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.name.startswith("uvicorn") and r.levelno >= logging.ERROR]
