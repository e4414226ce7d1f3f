"""Issue 24, section 4: two processes starting on an empty data folder and the generated secret key.

Without ``REGISTRY_SECRET_KEY``, each process reads ``<data_dir>/secret.key`` or generates it. The
file was created outside any lock and written after it was created: two processes calling at one
instant raised ``FileExistsError`` in 21-98 of 100 rounds, and a process could read the key while
it was still empty (it would then encrypt with another key than its sibling). Now the key is made
under a lock in the data folder and published whole (written to a temporary file, synced, then
linked into place), so every process gets the one key and no reader ever sees a partial file.

Real processes (forked, released together by a barrier) on fresh folders, many rounds.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from registry.catalog.secrets import SecretKeyError, load_or_create_key

ROUNDS = 60
#: How long a reader looks for the file to appear before it gives up (a bound, not a wait).
APPEAR_S = 10.0

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked processes released together need fork")


def _create(barrier: Any, data_dir: str, out: Connection) -> None:
    try:
        barrier.wait()
        out.send(("key", load_or_create_key(None, Path(data_dir))))
    except BaseException as exc:  # reported to the test, which names it
        out.send(("error", repr(exc)))


def _read_as_it_appears(barrier: Any, data_dir: str, out: Connection) -> None:
    """Read the key file the moment it exists, as an older process that does not take the lock would."""
    path = Path(data_dir) / "secret.key"
    try:
        barrier.wait()
        end = time.monotonic() + APPEAR_S
        while time.monotonic() < end:
            try:
                out.send(("read", path.read_text()))
                return
            except FileNotFoundError:
                continue
        out.send(("error", "the key file never appeared"))
    except BaseException as exc:
        out.send(("error", repr(exc)))


def _round(data_dir: Path, workers: list[Any]) -> list[tuple[str, str]]:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(workers))
    pipes = [context.Pipe(duplex=False) for _ in workers]
    processes = [
        context.Process(target=work, args=(barrier, str(data_dir), send))
        for work, (_, send) in zip(workers, pipes, strict=True)
    ]
    for process in processes:
        process.start()
    try:
        results = []
        for receive, _ in pipes:
            assert receive.poll(30), "a process did not report within 30 s"
            results.append(receive.recv())
        return results
    finally:
        for process in processes:
            process.join(30)


def test_two_processes_creating_the_key_at_one_instant_agree_on_one_key(tmp_path: Path) -> None:
    problems = []
    for n in range(ROUNDS):
        data_dir = tmp_path / f"round-{n}" / "data"  # not there yet: made by whichever comes first
        results = _round(data_dir, [_create, _create])
        keys = {value for kind, value in results if kind == "key"}
        errors = [value for kind, value in results if kind == "error"]
        stored = (data_dir / "secret.key").read_text().strip()
        if errors or len(keys) != 1 or "" in keys or keys != {stored}:
            problems.append((n, results, stored))
        assert sorted(p.name for p in data_dir.iterdir() if not p.name.endswith(".lock")) == ["secret.key"]
        assert (data_dir / "secret.key").stat().st_mode & 0o777 == 0o600
    assert problems == [], f"{len(problems)} of {ROUNDS} rounds went wrong, e.g. {problems[:3]}"


def test_a_reader_never_sees_an_empty_or_partial_key(tmp_path: Path) -> None:
    seen = []
    for n in range(ROUNDS):
        data_dir = tmp_path / f"round-{n}" / "data"
        data_dir.mkdir(parents=True)
        results = _round(data_dir, [_create, _read_as_it_appears, _read_as_it_appears])
        assert results[0][0] == "key", results
        key = results[0][1]
        assert key, results
        for kind, value in results[1:]:
            assert kind == "read", results
            seen.append(value)
            assert value == key + "\n", f"round {n}: a reader saw {value!r} where the key is {key!r}"
    assert len(seen) == 2 * ROUNDS


def test_an_empty_key_file_is_refused_not_used_as_the_key(tmp_path: Path) -> None:
    """An empty ``secret.key`` (an older version interrupted between creating and writing it) was
    read as the key "": values would be encrypted under a key every other process lacks."""
    (tmp_path / "secret.key").write_text("")
    with pytest.raises(SecretKeyError, match=r"secret\.key is empty"):
        load_or_create_key(None, tmp_path)
