"""Schemathesis hooks for the contract test (tests/api/test_openapi_contract.py), loaded by the CLI.

Two things generated data must not do against the test server, whatever the schema allows:

* revoke the token the run authenticates with (``DELETE /api/v1/tokens/{token_id}`` with its id,
  given in ``REGISTRY_TEST_PROTECTED_TOKEN_IDS``): every later request would be a 401. Such a call is
  sent for an id that does not exist instead (a 404, which the schema documents);
* make the server call out to the Internet: a tool saved with a generated ``http(s)`` webhook URL
  would be called by ``POST /api/v1/tools/{name}/test``. Generated webhook URLs are pointed at
  TEST-NET-1 (192.0.2.0/24, RFC 5737), which the SSRF guard refuses, so such a save is a 422.
  ``builtin://`` hooks (from the schema's examples) still run.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

#: Token ids no generated request may revoke.
PROTECTED = {int(v) for v in os.environ.get("REGISTRY_TEST_PROTECTED_TOKEN_IDS", "").split(",") if v.strip()}
#: An id no token has (token ids start at 1 and the test server makes few).
UNUSED_TOKEN_ID = 2**62
#: Refused by the SSRF guard (reserved documentation network), so nothing is ever called there.
UNREACHABLE_WEBHOOK = "https://192.0.2.1/hook"


def _is(case: Any, method: str, suffix: str) -> bool:
    return bool(case.method.upper() == method and case.path.endswith(suffix))


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if _is(case, "DELETE", "/tokens/{token_id}") and case.path_parameters:
        try:
            token_id = int(case.path_parameters.get("token_id"))
        except (TypeError, ValueError):
            return
        if token_id in PROTECTED:
            case.path_parameters["token_id"] = UNUSED_TOKEN_ID
        return
    if case.path in ("/api/v1/tools", "/api/v1/tools/{name}") and isinstance(case.body, dict):
        webhook = case.body.get("webhook")
        url = webhook.get("url") if isinstance(webhook, dict) else None
        if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
            webhook["url"] = UNREACHABLE_WEBHOOK
