"""Change events from real ``mcp-registry serve`` processes on one PostgreSQL database: a delivering
replica killed with -9 mid-batch loses nothing once one runs again (only the event in flight may
come twice, with its webhook-id), and two replicas deliver each event exactly once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import fresh_postgres_schema, require_postgres
from tests.events.receiver import Receiver, receiving, verify
from tests.serve_process import ServerProcess
from tests.waiting import wait_until

ENV = {
    "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    # A killed holder's lease lapses within 2 s (the default, 30 s, would only make the test slower).
    "REGISTRY_EVENTS_LEASE_S": "2",
    "REGISTRY_EVENTS_RETRY_BASE_S": "0.2",
    "REGISTRY_EVENTS_RETRY_MAX_S": "1",
}
ADMIN = "events-replica-admin"


@pytest.fixture
def database(postgres_server_url: str | None) -> Iterator[str]:
    with fresh_postgres_schema(require_postgres(postgres_server_url)) as url:
        yield url


def replica(folder: Path, name: str, database: str) -> ServerProcess:
    return ServerProcess(folder / name, name=name, database_url=database, admin_token=ADMIN, env=ENV)


def subscribe(admin: httpx.Client, receiver: Receiver) -> dict[str, object]:
    made = admin.post(
        "/api/v1/event-subscriptions",
        json={"name": "replicas", "url": receiver.url, "events": ["catalog.version.created"]},
    )
    assert made.status_code == 201, made.text
    return dict(made.json())


def create_prompt(admin: httpx.Client, name: str) -> None:
    answer = admin.post("/api/v1/prompts", json={"name": name, "template": "hi"})
    assert answer.status_code == 201, answer.text


def deliveries(admin: httpx.Client, subscription: dict[str, object]) -> list[dict[str, object]]:
    answer = admin.get(f"/api/v1/event-subscriptions/{subscription['id']}/deliveries", params={"limit": 500})
    return list(answer.json()["items"])


def test_kill_9_of_the_delivering_replica_mid_batch_loses_nothing(tmp_path: Path, database: str) -> None:
    names = [f"batch-{n}" for n in range(6)]
    with receiving() as receiver:
        receiver.hold_first = True
        first = replica(tmp_path, "first", database).start()
        try:
            with first.admin() as admin:
                subscription = subscribe(admin, receiver)
                for name in names:
                    create_prompt(admin, name)
            wait_until(receiver.first_arrived.is_set, "the first delivery to be in flight", timeout=30)
        finally:
            first.kill()  # SIGKILL: no shutdown, the lease is not given up, the in-flight send not recorded
        receiver.released.set()

        second = replica(tmp_path, "second", database).start()
        try:
            with second.admin() as admin:
                wait_until(
                    lambda: {item.json["data"]["name"] for item in receiver.all()} >= set(names),
                    lambda: f"every event after the restart (got {[i.id for i in receiver.all()]})",
                    timeout=60,
                )
                wait_until(
                    lambda: all(d["status"] == "delivered" for d in deliveries(admin, subscription)),
                    "every delivery to be recorded",
                    timeout=30,
                )
                log = deliveries(admin, subscription)
        finally:
            second.stop()

    got = receiver.all()
    counts = Counter(item.id for item in got)
    in_flight = got[0].id
    assert counts[in_flight] == 2, counts  # sent, killed before it was recorded, sent again
    assert all(count == 1 for webhook_id, count in counts.items() if webhook_id != in_flight), counts
    # In change-log order, each id naming the same event both times.
    distinct = list(dict.fromkeys(item.id for item in got))
    assert [next(i.json["data"]["name"] for i in got if i.id == d) for d in distinct] == names
    assert all(verify(str(subscription["secret"]), item) for item in got)
    assert len(log) == len(names) and {str(d["webhook_id"]) for d in log} == set(counts)


def test_two_replicas_deliver_each_event_once(tmp_path: Path, database: str) -> None:
    with receiving() as receiver:
        a = replica(tmp_path, "a", database).start()
        b = replica(tmp_path, "b", database).start()
        try:
            with a.admin() as on_a, b.admin() as on_b:
                subscription = subscribe(on_a, receiver)
                names = [f"both-{n}" for n in range(10)]
                for n, name in enumerate(names):
                    create_prompt(on_a if n % 2 else on_b, name)
                wait_until(
                    lambda: (
                        len(deliveries(on_b, subscription)) == len(names)
                        and all(d["status"] == "delivered" for d in deliveries(on_b, subscription))
                    ),
                    "every delivery recorded",
                    timeout=60,
                )
                got = receiver.all()
                assert sorted(item.json["data"]["name"] for item in got) == sorted(names)
                assert len({item.id for item in got}) == len(got) == len(names)
                assert [item.json["data"]["name"] for item in got] == names  # change-log order
                assert all(d["attempts"] == 1 for d in deliveries(on_a, subscription))

                # A replica stops (SIGTERM: a holder gives the lease up): the other one delivers.
                a.stop()
                create_prompt(on_b, "after-stop")
                wait_until(
                    lambda: any(item.json["data"]["name"] == "after-stop" for item in receiver.all()),
                    "delivery after a replica stopped",
                    timeout=30,
                )
                assert len(receiver.all()) == len(names) + 1
        finally:
            a.stop()
            b.stop()
