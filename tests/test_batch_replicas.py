"""A batch job across replicas (docs/batch.md): two replica processes
(``tests/shared_replica.py --batch-lease``) on one real ``redis-server`` both take items of
one job from its Redis Stream; one is killed with SIGKILL while it holds an item, and the
other claims that item after the lease (XAUTOCLAIM) and finishes the job."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from redis_server import RedisServer, require_redis_server
from test_shared_replicas import Replica

from lib.batch.stream import StreamBoard

LEASE = 2.0  # batch.lease_seconds: how long the dead replica's item waits
ARGS = ("--delay", "1.0", "--batch-lease", str(LEASE))  # an engine call of a second: items overlap
TEXTS = [f"release line number {i}" for i in range(6)]


@pytest.fixture
def redis_url() -> Iterator[str]:
    server = RedisServer(require_redis_server()).start()
    try:
        yield server.url
    finally:
        server.close()


def _pending(board: StreamBoard, replica: Replica) -> int:
    """Stream entries the replica took and has not acknowledged."""
    consumer = f"{socket.gethostname()}:{replica.process.pid}"
    rows: Any = board.client.xpending_range(board.stream, "makers", "-", "+", 100, consumername=consumer)
    return len(rows)


def test_two_replicas_share_a_job_and_one_killed_mid_job_is_taken_over(redis_url: str, tmp_path: Path) -> None:
    a = Replica("a", tmp_path / "cache-a", redis_url, tmp_path / "a.log", ARGS)
    b = Replica("b", tmp_path / "cache-b", redis_url, tmp_path / "b.log", ARGS)
    board = StreamBoard(redis_url, lease=LEASE, consumer="the-test")  # a third reader of the same Redis
    try:
        items = [{"text": text, "voice": "tone-low"} for text in TEXTS]
        submitted = a.call("/batch", {"id": "release-7", "items": items})
        assert (submitted["id"], submitted["total"], submitted["status"]) == ("release-7", 6, "queued")

        # Every replica takes items: both engines run, and B reports A's job.
        assert wait_until(lambda: a.status()["engine_calls"] >= 1 and b.status()["engine_calls"] >= 1, 60)
        assert b.call("/batch/release-7")["total"] == 6

        assert wait_until(lambda: _pending(board, a) >= 1, 30)  # A holds an item...
        a.process.kill()  # ...and dies with it (SIGKILL: nothing acknowledged, nothing handed back)
        a.process.wait(10)
        assert _pending(board, a) == 1

        # B claims A's item once it has been idle for the lease, and finishes the job.
        assert wait_until(lambda: b.call("/batch/release-7")["status"] == "done", 60)
        job = b.call("/batch/release-7")
        assert (job["total"], job["done"], job["failed"]) == (6, 6, 0)
        assert all(item["cache"] in ("HIT", "MISS") and item["error"] is None for item in job["items"])
        assert _pending(board, a) == 0  # taken over from the dead consumer
        assert board.view("release-7") == job  # the same status from any replica: the state is in Redis
        for item in job["items"]:
            assert b.lookup(item["key"])["shared"]  # every result is in the shared tier
    finally:
        board.close()
        b.close()
        a.close()
