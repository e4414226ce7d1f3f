"""Schemathesis hooks for the contract test (tests/api/test_openapi_contract.py), loaded by the CLI.

Two things generated data must not do against the test server, whatever the schema allows:

* revoke the token the run authenticates with (``DELETE /api/v1/tokens/{token_id}`` with its id,
  given in ``REGISTRY_TEST_PROTECTED_TOKEN_IDS``): every later request would be a 401. Such a call is
  sent for an id that does not exist instead (a 404, which the schema documents); nor change those
  tokens' teams (``PUT /api/v1/tokens/{token_id}/teams`` goes to a token seeded for it, and until one
  change has answered 2xx its body is ``{}``: generated team names rarely exist);
* make the server call out to the Internet: a tool saved with a generated ``http(s)`` webhook URL
  would be called by ``POST /api/v1/tools/{name}/test``. Generated webhook URLs are pointed at
  TEST-NET-1 (192.0.2.0/24, RFC 5737), which the SSRF guard refuses, so such a save is a 422.
  ``builtin://`` hooks (from the schema's examples) still run.

Event subscriptions need a URL the SSRF guard lets through and, for their deliveries, an event:
generated subscription URLs are pointed at TEST-NET-2 (198.51.100.0/24, RFC 5737; the contract
server allows it, and nothing answers there), and until a call on a subscription has answered 2xx
it goes to one seeded through the API, with a delivery queued for it by a prompt's creation.
Change requests need two things generated data cannot provide:

* a second person: the run's admin token opens requests, and their author never approves or
  rejects them, so those calls carry a reviewer's token instead (``REGISTRY_TEST_REVIEWER_TOKEN``),
  but only where they would carry the admin's: requests that test missing or wrong credentials
  keep theirs;
* a request in the state each step needs (a draft to submit, one in review to approve): until a
  step has answered 2xx once, its calls are pointed at a request seeded for it through the API
  (``REGISTRY_TEST_BASE_URL``), on a label protected for that purpose. Generated ids rarely name
  a request at all, and the order in which the phases' examples run is not the order of steps.
  Opening one is the same: until an open has answered 2xx, a generated body is pointed at a prompt
  seeded with a label protected for it (generated names rarely exist, and the demo catalog
  protects nothing), so the operation is seen to work at least once.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import httpx
import schemathesis

#: Token ids no generated request may revoke.
PROTECTED = {int(v) for v in os.environ.get("REGISTRY_TEST_PROTECTED_TOKEN_IDS", "").split(",") if v.strip()}
#: An id no token has (token ids start at 1 and the test server makes few).
UNUSED_TOKEN_ID = 2**62
#: Refused by the SSRF guard (reserved documentation network), so nothing is ever called there.
UNREACHABLE_WEBHOOK = "https://192.0.2.1/hook"
#: Where generated event subscriptions send (TEST-NET-2: allowed by the contract server, unanswered).
SUBSCRIBER = "https://198.51.100.1/hook"
#: The run's own token, and a reviewer's for approving what it opened.
ADMIN_TOKEN = os.environ.get("REGISTRY_TEST_ADMIN_TOKEN", "")
REVIEWER_TOKEN = os.environ.get("REGISTRY_TEST_REVIEWER_TOKEN", "")
BASE_URL = os.environ.get("REGISTRY_TEST_BASE_URL", "")
#: Change request steps, by path suffix; those that have answered 2xx (then left to generated data).
STEPS = ("submit", "approve", "reject", "withdraw", "publish")
_answered: set[str] = set()
_seeds = itertools.count(1)


def _step(case: Any) -> str | None:
    if case.method.upper() != "POST" or not case.path.startswith("/api/v1/change-requests/{request_id}/"):
        return None
    step = case.path.rsplit("/", 1)[-1]
    return step if step in STEPS else None


def _seed_entry(step: str, http: httpx.Client) -> str | None:
    """A global prompt of its own (generated calls may have moved or archived any other entry),
    with a label of the same name protected for it; its name, or None if the server would not."""
    name = f"contract-{step}-{next(_seeds)}"
    created = http.post("/api/v1/prompts", json={"name": name, "template": "Hello", "labels": ["staging"]})
    if created.status_code != 201 or http.put(f"/api/v1/protected-labels/{name}", json={}).status_code != 200:
        return None
    return name


def _admin_http() -> httpx.Client:
    return httpx.Client(base_url=BASE_URL, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)


def _point_open_at_a_seeded_entry(body: dict[str, Any]) -> None:
    """Until an open has answered 2xx: a generated body names a seeded prompt and its protected
    label (its version left to the default, the newest); the rest stays as generated."""
    if "open" in _answered or not (BASE_URL and ADMIN_TOKEN):
        return
    with _admin_http() as http:
        name = _seed_entry("open", http)
    if name is not None:
        body.update(kind="prompt", name=name, label=name)
        body.pop("to_version", None)


def _seed_request(step: str) -> int | None:
    """A fresh request for ``step`` (a draft to submit, else one in review), opened by the admin on
    a label protected for it; None if the server would not (the call then goes out as generated)."""
    if not (BASE_URL and ADMIN_TOKEN):
        return None
    with _admin_http() as http:
        name = label = _seed_entry(step, http)
        if name is None:
            return None
        opened = http.post(
            "/api/v1/change-requests",
            json={"kind": "prompt", "name": name, "label": label, "draft": step == "submit"},
        )
    return int(opened.json()["id"]) if opened.status_code == 201 else None


def _point_teams_at_a_seeded_token(case: Any) -> None:
    """A team change never touches the run's own tokens (a reviewer left without its teams could
    not review); until one has answered 2xx it goes to a token seeded for it with no teams (the
    generated team names rarely exist, and teams must exist before tokens join them)."""
    try:
        token_id = int(case.path_parameters.get("token_id"))
    except (TypeError, ValueError):
        return
    if token_id not in PROTECTED and "teams" in _answered:
        return
    if not (BASE_URL and ADMIN_TOKEN):
        case.path_parameters["token_id"] = UNUSED_TOKEN_ID
        return
    with _admin_http() as http:
        made = http.post("/api/v1/tokens", json={"name": f"contract-teams-{next(_seeds)}", "scopes": ["viewer"]})
    case.path_parameters["token_id"] = int(made.json()["id"]) if made.status_code == 201 else UNUSED_TOKEN_ID
    if "teams" not in _answered and isinstance(case.body, dict):
        case.body["teams"] = {}


def _seed_subscription() -> tuple[int, int] | None:
    """A subscription and the id of a delivery queued for it; None if the server would not."""
    if not (BASE_URL and ADMIN_TOKEN):
        return None
    n = next(_seeds)
    with _admin_http() as http:
        body = {"name": f"contract-{n}", "url": SUBSCRIBER, "events": ["catalog.version.created"]}
        made = http.post("/api/v1/event-subscriptions", json=body)
        if made.status_code != 201:
            return None
        subscription = int(made.json()["id"])
        http.post("/api/v1/prompts", json={"name": f"contract-event-{n}", "template": "Hello"})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # queued by the delivering task, in moments
            items = http.get(f"/api/v1/event-subscriptions/{subscription}/deliveries").json().get("items")
            if items:
                return subscription, int(items[0]["id"])
            time.sleep(0.05)
    return None


def _subscription_step(case: Any) -> str:
    """Redelivering (which needs a delivery too) is seen to work apart from the other calls."""
    return "redeliver" if case.path.endswith("/redeliver") else "subscription"


def _point_at_a_seeded_subscription(case: Any) -> None:
    if _subscription_step(case) in _answered or case.path_parameters is None:
        return
    seeded = _seed_subscription()
    if seeded is not None:
        case.path_parameters["subscription_id"] = seeded[0]
        if "delivery_id" in case.path_parameters:
            case.path_parameters["delivery_id"] = seeded[1]


def _is_subscription_call(case: Any) -> bool:
    return bool(case.path.startswith("/api/v1/event-subscriptions/{subscription_id}"))


def _as_reviewer(request: Any) -> Any:
    """A ``requests`` auth hook: the admin's bearer token becomes the reviewer's (others stay)."""
    if ADMIN_TOKEN and REVIEWER_TOKEN and request.headers.get("Authorization") == f"Bearer {ADMIN_TOKEN}":
        request.headers["Authorization"] = f"Bearer {REVIEWER_TOKEN}"
    return request


def _is_open(case: Any) -> bool:
    return bool(case.method.upper() == "POST" and case.path == "/api/v1/change-requests")


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
    if _is(case, "PUT", "/tokens/{token_id}/teams") and case.path_parameters:
        _point_teams_at_a_seeded_token(case)
        return
    if _is_open(case) and isinstance(case.body, dict):
        _point_open_at_a_seeded_entry(case.body)
        return
    step = _step(case)
    if step is not None:
        if step not in _answered and case.path_parameters is not None:
            seeded = _seed_request(step)
            if seeded is not None:
                case.path_parameters["request_id"] = seeded
        if step in ("approve", "reject"):
            # The run's token is merged into the request after this hook: swap it where requests
            # applies ``auth``, last, on the prepared request.
            kwargs["auth"] = _as_reviewer
        return
    if _is_subscription_call(case):
        _point_at_a_seeded_subscription(case)
    if case.path.startswith("/api/v1/event-subscriptions") and isinstance(case.body, dict):
        url = case.body.get("url")
        if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
            case.body["url"] = SUBSCRIBER
        return
    if case.path in ("/api/v1/tools", "/api/v1/tools/{name}") and isinstance(case.body, dict):
        webhook = case.body.get("webhook")
        url = webhook.get("url") if isinstance(webhook, dict) else None
        if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
            webhook["url"] = UNREACHABLE_WEBHOOK


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    if _is_subscription_call(case) and 200 <= response.status_code < 300:
        _answered.add(_subscription_step(case))
    step = "open" if _is_open(case) else "teams" if _is(case, "PUT", "/tokens/{token_id}/teams") else _step(case)
    if step is not None and 200 <= response.status_code < 300:
        _answered.add(step)
