"""A batch job across replicas (docs/batch.md): two replica processes
(``tests/shared_replica.py --batch-lease``) on one real ``redis-server`` both take items of
one job from its Redis Stream; one is killed with SIGKILL while it holds an item, and the
other claims that item after the lease (XAUTOCLAIM) and finishes the job; the stream's
bookkeeping (an item counted once, a cancelled job's items dropped) and the claim a
working replica renews."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from redis_server import RedisServer, require_redis_server
from test_background_preload import HeldTone
from test_shared_replicas import Replica

from lib.batch.board import Planned
from lib.batch.jobs import BatchJobs, ItemSpec
from lib.batch.stream import StreamBoard
from lib.request.access import LOCAL

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


def test_the_stream_counts_an_item_once_and_drops_a_cancelled_jobs_items(redis_url: str) -> None:
    board = StreamBoard(redis_url, lease=LEASE, consumer="one")
    try:
        items = [Planned(i, {"text": f"t{i}", "voice": "tone-low"}, f"k{i}", f"/api/audio/k{i}.wav") for i in range(3)]
        assert board.create("twice", items[:2]) and not board.create("twice", items[:1])  # the same id: nothing new
        claim = board.take(wait=1)
        assert claim is not None and (claim.job, claim.index) == ("twice", 0)
        assert board.summary("twice")["status"] == "running"  # type: ignore[index]
        for _ in range(2):  # recorded twice (a lease taken over from a slow replica): counted once
            board.finish(claim, "k0", "/api/audio/k0.wav", "MISS", None)
        assert board.summary("twice")["done"] == 1  # type: ignore[index]

        assert board.cancel("twice") and not board.cancel("no-such-job")
        assert board.take(wait=0.2) is None  # item 1 belongs to a cancelled job: acknowledged, not made
        assert board.client.xlen(board.stream) == 0 and board.client.xpending(board.stream, "makers")["pending"] == 0
        view = board.view("twice")
        assert view is not None and (view["status"], view["done"], view["failed"]) == ("cancelled", 1, 0)
        assert [item["cache"] for item in view["items"]] == ["MISS", None]
    finally:
        board.close()


def test_a_replica_at_work_keeps_its_item_by_renewing_its_claim(redis_url: str, make_service: Any) -> None:
    engine = HeldTone(held="a long one")
    service = make_service(engine=engine, **{"cache.shared_url": redis_url, "batch.lease_seconds": LEASE})
    thief = StreamBoard(redis_url, lease=LEASE, consumer="thief")  # another replica, always asking
    try:
        jobs = BatchJobs.of(service)
        jobs.submit([ItemSpec({"text": "a long one", "voice": "tone-low"})], job_id="held", caller=LOCAL)
        assert wait_until(lambda: engine.texts["a long one"] == 1)
        # Held for three leases: the worker renews its claim, so no other replica takes the item over.
        deadline = time.monotonic() + 3 * LEASE
        while time.monotonic() < deadline:
            assert thief.take(wait=0.2) is None
        engine.release.set()
        assert wait_until(lambda: jobs.status("held")["status"] == "done")
        assert jobs.status("held")["items"][0]["cache"] == "MISS" and engine.texts["a long one"] == 1
    finally:
        engine.release.set()
        thief.close()
